"""Shared driver of the coverage-guided targets in this folder (issue 17).

Each target module defines ``one_input(data: bytes) -> None`` (raises only the exceptions its C
module documents for bad input; anything else, or a crash, is a bug) and ``seeds() -> list[bytes]``.

* With ``atheris`` importable (``pip install atheris``; a wheel on PyPI for CPython 3.11 on x86-64
  Linux) the target runs under libFuzzer: ``python benchmarks/fuzz_targets/fuzz_kineto_scan.py -max_total_time=60``
  (any libFuzzer flag; a crash is written by libFuzzer as ``crash-<sha1>`` in the CWD). The
  Python side is instrumented; the C module is a prebuilt extension, so libFuzzer sees its
  coverage only when the extension was built with ``CC=clang CFLAGS=-fsanitize=fuzzer-no-link``.
* Without it (or with ``--fallback``): a seeded mutation loop over the seeds (the generic mutator
  of ``tests/fuzz_common.py``) that runs the inputs in a child process, so a segmentation fault
  is caught: the input that was running is saved to ``--out`` (default ``fuzz-failures/``) and
  the loop goes on. ``--seconds N`` / ``--runs N`` bound it.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from harness import new_parser, write_report

INSTRUMENTED = ROOT / "build" / "fuzz-instrumented" / "tracekit" / "parsers"


def _atheris_mode() -> bool:
    """True when a target of this folder is the program (not imported by another, e.g. the smoke
    run of ``tools/fuzz_smoke.py``), atheris is installed, and the loop was not asked for."""
    if Path(sys.argv[0]).resolve().parent != Path(__file__).resolve().parent:
        return False
    if "--fallback" in sys.argv or "--child" in sys.argv:
        return False
    return importlib.util.find_spec("atheris") is not None


def exact(data: bytes | bytearray) -> Any:
    """A copy of ``data`` in a buffer of exactly its size (a NumPy array: one ``malloc`` of
    ``len(data)`` bytes), for handing inputs to the C modules. A ``bytes`` object carries a NUL
    after its data, inside the same allocation, so under AddressSanitizer a read one byte past
    its end goes unseen; past this buffer's end it is reported."""
    import numpy as np

    return np.frombuffer(bytes(data), dtype=np.uint8).copy()


def c_module(name: str) -> ModuleType:
    """``tracekit.parsers.<name>``: the coverage-instrumented copy (``build_instrumented.sh``) when
    running under atheris and it was built, else the regular extension."""
    if _atheris_mode():
        import atheris  # type: ignore[import-not-found]  # noqa: F401 - provides libFuzzer's symbols

        found = sorted(INSTRUMENTED.glob(f"{name}.*.so")) if INSTRUMENTED.is_dir() else []
        preload = Path(importlib.util.find_spec("atheris").origin or "").parents[1] / "asan_with_fuzzer.so"  # type: ignore[union-attr]
        if found and preload.is_file() and str(preload) not in os.environ.get("LD_PRELOAD", ""):
            env = dict(os.environ, LD_PRELOAD=str(preload),
                       ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "detect_leaks=0:allocator_may_return_null=1"))
            os.execve(sys.executable, [sys.executable, *sys.argv], env)  # again, with libFuzzer + ASan loaded
        if found:
            spec = importlib.util.spec_from_file_location(f"tracekit.parsers.{name}", found[0])
            assert spec is not None and spec.loader is not None
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            print(f"INFO: {name} from the instrumented build {found[0]}", file=sys.stderr)
            return mod
        print(f"INFO: {name} not instrumented (run benchmarks/fuzz_targets/build_instrumented.sh): no C coverage", file=sys.stderr)
    return importlib.import_module(f"tracekit.parsers.{name}")


def mutate(data: bytes, rng: random.Random, seeds: list[bytes]) -> bytes:
    """1, 2 or 4 generic byte mutations of ``data`` (``tests/fuzz_common.byte_mutation``), some
    splicing in another seed; deterministic for a given ``rng`` state."""
    from fuzz_common import byte_mutation

    for _ in range(rng.choice((1, 1, 2, 4))):
        data, _ = byte_mutation(data, rng, rng.choice(seeds))
    return data


def _child(target: str, seed: int, runs: int, seconds: float, current: Path) -> int:
    """The loop run in the child: returns 1 on the first Python-level bug (printed), else 0."""
    mod = __import__(target)
    seeds = mod.seeds()
    mutator = getattr(mod, "mutate", mutate)  # a target's own mutator, where it has one
    rng = random.Random(seed)
    t0 = time.monotonic()
    i = 0
    while (runs <= 0 or i < runs) and (seconds <= 0 or time.monotonic() - t0 < seconds):
        data = mutator(rng.choice(seeds), rng, seeds) if rng.random() < 0.97 else rng.choice(seeds)
        current.write_bytes(data)
        try:
            mod.one_input(data)
        except Exception:  # noqa: BLE001 - one_input lets through only what is a bug
            traceback.print_exc()
            print(f"BUG after {i} inputs", file=sys.stderr)
            return 1
        i += 1
    print(f"{i} inputs, no failure", file=sys.stderr)
    return 0


def fallback(target: str, *, seed: int, runs: int, seconds: float, out: Path, report: Path | None = None) -> int:
    """Run the mutation loop in child processes; save the input of every crash or bug; with
    ``report``, write the counts there as JSON (``harness.write_report``)."""
    failures = 0
    with tempfile.TemporaryDirectory(prefix="tracekit-target-") as tmp:
        current = Path(tmp) / "current"
        t0 = time.monotonic()
        attempt = 0
        done = 0
        while (runs <= 0 or done < runs) and (seconds <= 0 or time.monotonic() - t0 < seconds):
            left_s = 0.0 if seconds <= 0 else max(0.001, seconds - (time.monotonic() - t0))
            p = subprocess.run([sys.executable, __file__, "--child", target, str(seed + attempt),
                                str(max(0, runs - done) if runs > 0 else 0), str(left_s), str(current)],
                               capture_output=True, text=True, check=False)
            attempt += 1
            tail = p.stderr.strip().splitlines()
            ran = next((int(x.split()[0]) for x in reversed(tail) if x.endswith("no failure")), None)
            if p.returncode == 0 and ran is not None:
                done += ran
                break
            failures += 1
            data = current.read_bytes() if current.exists() else b""
            out.mkdir(parents=True, exist_ok=True)
            name = out / f"{target}-{'crash' if p.returncode < 0 else 'bug'}-{hashlib.sha1(data).hexdigest()[:12]}"
            name.write_bytes(data)
            print(f"{target}: exit {p.returncode} (signal {-p.returncode if p.returncode < 0 else 0}); "
                  f"input saved to {name}\n{p.stderr[-2000:]}", file=sys.stderr)
            done += 1  # at least the failing one; the child's count is lost with it
    print(f"{target}: {done} inputs or more, {failures} failures")
    write_report(report, {"target": target, "seed": seed, "inputs": done, "failures": failures,
                          "seconds": round(time.monotonic() - t0, 2), "failures_dir": str(out)})
    return 1 if failures else 0


def main(target: str, one_input: Callable[[bytes], None], seeds: Callable[[], list[bytes]]) -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return _child(*sys.argv[2:3], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), Path(sys.argv[6]))
    ap = new_parser(getattr(sys.modules["__main__"], "__doc__", None) or f"coverage-guided target {target}")
    ap.add_argument("--fallback", action="store_true", help="the mutation loop even when atheris is here")
    ap.add_argument("--seconds", type=float, default=0.0, help="stop after this long (0: no limit)")
    ap.add_argument("--runs", type=int, default=0, help="stop after this many inputs (0: no limit)")
    ap.add_argument("--seed", type=int, default=0, help="the same seed makes the same inputs")
    ap.add_argument("--out", type=Path, default=Path("fuzz-failures"), help="folder for the failing inputs")
    ap.add_argument("--report", type=Path, default=None, help="the mutation loop's counts as JSON here")
    args, rest = ap.parse_known_args()
    try:
        import atheris  # type: ignore[import-not-found]
    except ImportError:
        atheris = None
    if atheris is None or args.fallback:
        if args.seconds <= 0 and args.runs <= 0:
            args.seconds = 60.0
        return fallback(target, seed=args.seed, runs=args.runs, seconds=args.seconds, out=args.out,
                        report=args.report)
    corpus = Path(tempfile.mkdtemp(prefix=f"{target}-seeds-"))
    for i, s in enumerate(seeds()):
        (corpus / f"seed{i}").write_bytes(s)
    flags = list(rest)
    if args.seconds > 0:
        flags.append(f"-max_total_time={int(args.seconds)}")
    if args.runs > 0:
        flags.append(f"-runs={args.runs}")
    flags.append(f"-seed={args.seed + 1}")
    if not any(f.startswith("-max_len=") for f in flags):
        flags.append("-max_len=1048576")
    args.out.mkdir(parents=True, exist_ok=True)
    flags.append(f"-artifact_prefix={args.out}{os.sep}{target}-")
    atheris.Setup([sys.argv[0], *flags, str(corpus)], one_input)
    atheris.Fuzz()
    return 0


if __name__ == "__main__":  # the child of the fallback loop
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.exit(_child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), Path(sys.argv[6])))
