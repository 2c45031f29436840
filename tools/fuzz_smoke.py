#!/usr/bin/env python3
"""CI smoke fuzz of tracekit's two C modules under AddressSanitizer and UBSan (issue 18).

1. Builds ``tracekit/parsers/_kineto_scan.c`` and ``_xplane_wire.c`` with
   ``-fsanitize=address,undefined -fno-sanitize-recover=all`` (plus ``-fwrapv``, as Python's
   own flags build them) into ``--build`` (default ``build/fuzz-asan/``; never the in-place
   ``.so`` the tests use), skipped when the objects there are newer than the sources.
   Compiler: ``$CC``, else ``gcc``, else ``clang``.
2. Runs one worker per C module, in parallel, with the compiler's ASan runtime in ``LD_PRELOAD``,
   ``PYTHONMALLOC=malloc`` (Python objects in ASan-checked memory) and ``detect_leaks=0``
   (the interpreter's own allocations at exit are not the C modules' leaks). An import hook
   makes ``tracekit.parsers.<module>`` the sanitized build; the worker checks that it is.
   Each worker runs, from a fixed ``--seed``:

   * ``--inputs`` seeded mutations (``tests/fuzz_common.byte_mutation``) of the seeds of its
     target in ``benchmarks/fuzz_targets/`` (the bundled samples, plus small files of
     ``$TRACEKIT_SHARED/corpus`` when present) through the target's ``one_input``: the C module
     called directly, inputs handed over in buffers of exactly their size;
   * ``--file-inputs`` mutated trace files of its format ingested twice, through the C path and
     the pure-Python one (``TRACEKIT_PURE_PYTHON=1``): different verdicts, different row counts,
     a traceback or a multi-line error fail (``tests/fuzz_common.judge``).

A sanitizer report, a crash or a failed check stops the run: the input is saved under ``--out``
(default ``fuzz-failures/``), its path printed (with the ``--replay PATH`` command that runs just
that input again, for a scanner-level one), and the exit status is 1. The last line is the
summary, e.g. ``fuzz smoke: 6000 inputs + 60 files, 48.2 s, clean (gcc, ASan+UBSan)``.
Exit status 3 (with ``fuzz smoke: unavailable: ...``): no C compiler or sanitizer runtime and ``CI``
is set (.ci/run sets it); without ``CI`` that is a skip, exit status 0.

atheris is not used here: its libFuzzer carries clang's ASan runtime, which cannot share a
process with gcc's; the coverage-guided runs are ``benchmarks/fuzz_targets/*.py`` (see
``build_instrumented.sh`` there).

``--plant-bug`` builds a copy of ``_xplane_wire.c`` whose varint reader reads one byte past its
buffer (into ``BUILD/planted/``) and runs the same checks on it: the run must fail with an ASan
report (the proof that this smoke catches such a bug; ``tests/test_fuzz_smoke.py``).

    .venv/bin/python tools/fuzz_smoke.py                 # CI: --inputs 3000 --file-inputs 20
    .venv/bin/python tools/fuzz_smoke.py --inputs 50 --file-inputs 2
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import random
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PARSERS = ROOT / "tracekit" / "parsers"
TARGETS_DIR = ROOT / "benchmarks" / "fuzz_targets"

#: C module -> (its fuzz target in benchmarks/fuzz_targets, the trace format of its file-level run)
MODULES = {"_kineto_scan": ("fuzz_kineto_scan", "kineto"), "_xplane_wire": ("fuzz_xplane_wire", "xplane")}
HEADERS = ("_json_text.h",)
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"]
#: what a sanitizer writes when it stops the process
REPORT_MARKS = ("ERROR: AddressSanitizer", "runtime error:", "ERROR: UndefinedBehaviorSanitizer", "ERROR: LeakSanitizer")
#: the planted bug of --plant-bug: the varint reader's bounds check lets it read one byte past the end
PLANT = ("_xplane_wire", "        if (p >= end) return -1;\n        uint8_t b = *p++;",
         "        if (p > end) return -1;\n        uint8_t b = *p++;")


class Unavailable(Exception):
    """No compiler or no sanitizer runtime here."""


# ---------------------------------------------------------------------------------------------
# Build


def pick_compiler() -> str:
    """``$CC``, else gcc, else clang (a path); :class:`Unavailable` when none is found."""
    for cc in (os.environ.get("CC"), "gcc", "clang"):
        if cc and shutil.which(cc.split()[0]):
            return cc
    raise Unavailable("no C compiler (set CC, or install gcc)")


def asan_runtime(cc: str) -> str:
    """The shared ASan runtime that ``cc`` links against (for ``LD_PRELOAD``)."""
    names = ["libclang_rt.asan-x86_64.so", "libclang_rt.asan.so"] if "clang" in cc else ["libasan.so"]
    for name in names:
        out = subprocess.run([*cc.split(), f"-print-file-name={name}"], capture_output=True, text=True,
                             check=False).stdout.strip()
        if out and Path(out).is_file():
            return str(Path(out).resolve())
    raise Unavailable(f"{cc} has no shared ASan runtime ({' or '.join(names)}; Debian: apt-get install libasan8)")


def cxx_runtime() -> str:
    """libstdc++, preloaded with the ASan runtime: DuckDB throws C++ exceptions, and ASan's
    ``__cxa_throw`` interceptor finds the real one only when libstdc++ is loaded before it
    starts (else it stops with ``CHECK failed ... real___cxa_throw``)."""
    import ctypes.util

    return ctypes.util.find_library("stdc++") or "libstdc++.so.6"


def _fresh(target: Path, sources: Sequence[Path]) -> bool:
    return target.is_file() and all(target.stat().st_mtime_ns > s.stat().st_mtime_ns for s in sources)


def _planted_copy(src: Path, out_dir: Path) -> Path:
    """A copy of ``src`` in ``out_dir`` with the bug of :data:`PLANT`."""
    text = src.read_text()
    if PLANT[1] not in text:
        raise SystemExit(f"--plant-bug: the varint bounds check was not found in {src}")
    out_dir.mkdir(parents=True, exist_ok=True)
    copy = out_dir / src.name
    copy.write_text(text.replace(PLANT[1], PLANT[2], 1))
    return copy


def build(cc: str, out_dir: Path, *, plant: bool = False) -> dict[str, Path]:
    """Compile both modules with the sanitizers into ``out_dir`` (both at once; a module whose
    ``.so`` is newer than its sources is kept); returns module -> .so path. With ``plant``,
    ``_xplane_wire`` is compiled from a copy carrying the planted bug, into ``out_dir/planted/``."""
    include = sysconfig.get_paths()["include"]
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    flags = ["-shared", "-fPIC", "-O1", "-g", "-fwrapv", "-std=c11", *SANITIZE, f"-I{include}", f"-I{PARSERS}"]
    if "clang" in cc:
        flags.append("-shared-libsan")
    out_dir.mkdir(parents=True, exist_ok=True)
    built: dict[str, Path] = {}
    jobs: list[tuple[Path, Path, Path, subprocess.Popen[str]]] = []
    for mod in MODULES:
        src = PARSERS / f"{mod}.c"
        deps = [src, *(PARSERS / h for h in HEADERS), Path(__file__)]
        target_dir = out_dir / "planted" if plant and mod == PLANT[0] else out_dir
        built[mod] = so = target_dir / f"{mod}{suffix}"
        if not _fresh(so, deps):
            if target_dir != out_dir:
                src = _planted_copy(src, target_dir)
            # written under another name and renamed when done: a run beside this one never loads half a file
            tmp = so.with_name(f"{so.name}.{os.getpid()}.tmp")
            jobs.append((src, so, tmp, subprocess.Popen([*cc.split(), *flags, str(src), "-o", str(tmp)],
                                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
    for src, so, tmp, p in jobs:
        log = p.communicate()[0]
        if p.returncode == 0:
            os.replace(tmp, so)
        else:
            if "sanitize" in log and ("cannot find" in log or "not supported" in log):
                raise Unavailable(f"{cc} cannot build with the sanitizers: {log.strip().splitlines()[-1]}")
            raise SystemExit(f"building {src} failed:\n{log}")
    return built


# ---------------------------------------------------------------------------------------------
# The worker (runs with the ASan runtime preloaded)


class _SanitizedModules(importlib.abc.MetaPathFinder):
    """Imports ``tracekit.parsers.<module>`` from the sanitized build."""

    def __init__(self, built: dict[str, str]) -> None:
        self.built = built

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        mod = fullname.rpartition(".")[2]
        if fullname.startswith("tracekit.parsers.") and mod in self.built:
            return importlib.util.spec_from_file_location(fullname, self.built[mod])
        return None


def _corpus_files(fmt: str) -> list[Path]:
    import fuzz_common as fc

    return [s.path for s in fc.corpus_seeds() if s.fmt == fmt and s.path.is_file()]


def _run_target(target: ModuleType, n: int, seed: int, current: Path, extra_seeds: list[bytes]) -> int:
    """``n`` mutated inputs through ``target.one_input``; the input is in ``current`` while it runs."""
    from _driver import mutate as generic

    mutate = getattr(target, "mutate", generic)  # the target's own mutator, where it has one
    seeds = target.seeds() + extra_seeds
    rng = random.Random(seed)
    for i in range(n):
        data = mutate(rng.choice(seeds), rng, seeds) if i >= len(seeds) else seeds[i]
        if data and rng.random() < 0.5:  # another first byte: the targets read their mode from it
            data = bytes([rng.randrange(256)]) + data[1:]
        current.write_bytes(data)
        target.one_input(data)
    return n


def _run_files(fmt: str, n: int, seed: int, current: Path, work: Path, corpus: bool) -> tuple[int, list[str]]:
    """``n`` mutated files of ``fmt``, each ingested through the C and the pure-Python path."""
    import fuzz_common as fc

    if n <= 0:
        return 0, []
    seeds = [s for s in fc.bundled_seeds() + (fc.corpus_seeds() if corpus else []) if s.fmt == fmt]
    fx = fc.StoreFixture(work / "fixture")
    for i in range(n):
        s = seeds[i % len(seeds)]
        case_dir = work / f"case{i}"
        path, desc = fc.make_case(s, "generic", i, seed, case_dir)
        current.write_text(str(path))
        outs = fc.judge(path, fmt, fx, cli=False, dual=True, timeout_s=300)
        problems = [f"{o.mode}: {kind}: {detail[:1500]}" for o in outs for kind, detail in o.failures]
        if problems:
            return i + 1, [f"{s.name} case {i} ({desc})", *problems]
        shutil.rmtree(case_dir, ignore_errors=True)
    return n, []


def worker(spec: dict[str, Any]) -> int:
    """Run one module's checks; prints one JSON line (inputs, files, problems); 1 on a problem."""
    sys.meta_path.insert(0, _SanitizedModules(spec["built"]))
    sys.path[:0] = [str(TARGETS_DIR), str(ROOT / "tests")]
    mod_name = spec["module"]
    target_name, fmt = MODULES[mod_name]
    target = importlib.import_module(target_name)
    loaded = sys.modules[f"tracekit.parsers.{mod_name}"]
    if Path(loaded.__file__ or "") != Path(spec["built"][mod_name]):
        print(f"the sanitized build was not the one imported: {loaded.__file__}", file=sys.stderr)
        return 1
    if spec.get("replay"):
        target.one_input(Path(spec["replay"]).read_bytes())
        print(json.dumps({"inputs": 1, "files": 0, "problems": [], "seeds": 0, "inputs_s": 0, "inputs_cpu_s": 0,
                          "files_s": 0, "files_cpu_s": 0}))
        return 0
    current = Path(spec["current"])
    extra = [x for p in _corpus_files(fmt) for x in target.seeds_of(p)] if spec["corpus"] else []
    t0, c0 = time.monotonic(), time.process_time()
    n = _run_target(target, spec["inputs"], spec["seed"], current, extra)
    current.unlink(missing_ok=True)
    t1, c1 = time.monotonic(), time.process_time()
    files, problems = _run_files(fmt, spec["file_inputs"], spec["seed"], current.with_suffix(".path"),
                                 Path(spec["work"]), spec["corpus"])
    t2, c2 = time.monotonic(), time.process_time()
    print(json.dumps({"inputs": n, "files": files, "problems": problems, "seeds": len(target.seeds()) + len(extra),
                      "inputs_s": round(t1 - t0, 1), "inputs_cpu_s": round(c1 - c0, 1),
                      "files_s": round(t2 - t1, 1), "files_cpu_s": round(c2 - c1, 1)}))
    return 1 if problems else 0


# ---------------------------------------------------------------------------------------------
# The driver


def _save(out: Path, module: str, current: Path) -> Path | None:
    """Copy the input that was running when a worker stopped into ``out``; its new path. The input
    is ``current`` (bytes, scanner level) or the file or folder named in ``current.path``."""
    out.mkdir(parents=True, exist_ok=True)
    named = current.with_suffix(".path")
    if named.exists():
        src = Path(named.read_text())
        dest = out / f"{module}-file-{src.name}"
        if src.is_dir():
            shutil.copytree(src, dest, dirs_exist_ok=True)
        elif src.is_file():
            shutil.copyfile(src, dest)
        return dest
    if not current.exists():
        return None
    data = current.read_bytes()
    dest = out / f"{module}-input-{hashlib.sha1(data).hexdigest()[:12]}"
    dest.write_bytes(data)
    return dest


def _report_excerpt(stderr: str, lines: int = 40) -> str:
    """The sanitizer report (from its first line, ``lines`` long), else the end of ``stderr``."""
    text = stderr.splitlines()
    marks = (*REPORT_MARKS, "AddressSanitizer", "Traceback")
    start = next((i for i, x in enumerate(text) if any(m in x for m in marks)), max(0, len(text) - lines))
    return "\n".join(text[start:start + lines])


def run(args: argparse.Namespace, cc: str, built: dict[str, Path]) -> int:
    """Start one worker per module, in parallel; report; 0 clean, 1 on any failure."""
    runtime = asan_runtime(cc)
    env = dict(os.environ, LD_PRELOAD=f"{runtime} {cxx_runtime()}", PYTHONMALLOC="malloc",
               ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:abort_on_error=0:allocator_may_return_null=1",
               UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
    env.pop("TRACEKIT_PURE_PYTHON", None)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tracekit-fuzz-smoke-") as tmp:
        procs = {}
        replay_mod = args.replay.name.split("-")[0] if args.replay else None
        for mod in [PLANT[0]] if args.plant_bug else [replay_mod] if replay_mod in MODULES else MODULES:
            work = Path(tmp) / mod
            work.mkdir()
            spec = {"module": mod, "built": {m: str(p) for m, p in built.items()}, "inputs": args.inputs,
                    "file_inputs": args.file_inputs, "seed": args.seed, "current": str(work / "current"),
                    "corpus": not args.no_corpus, "replay": str(args.replay.resolve()) if args.replay else "",
                    "work": str(work)}
            procs[mod] = (work, subprocess.Popen([sys.executable, __file__, "--worker", json.dumps(spec)], env=env,
                                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                                 errors="replace"))
        total_inputs = total_files = 0
        failed = []
        for mod, (work, p) in procs.items():
            stdout, stderr = p.communicate()
            last = stdout.strip().splitlines()[-1] if stdout.strip() else ""
            result = json.loads(last) if last.startswith("{") else None
            report = any(m in stderr for m in REPORT_MARKS)
            if p.returncode == 0 and result is not None and not report:
                print(f"{mod}: {result['inputs']} inputs from {result['seeds']} seeds in {result['inputs_s']} s "
                      f"({result['inputs_cpu_s']} CPU s), {result['files']} files C vs pure in {result['files_s']} s "
                      f"({result['files_cpu_s']} CPU s): clean", flush=True)
                total_inputs += result["inputs"]
                total_files += result["files"]
                continue
            saved = _save(args.out, mod, work / "current")
            what = ("sanitizer report" if report else f"exit {p.returncode}" if result is None
                    else "C/pure-Python check failed")
            print(f"{mod}: FAILED ({what}); input saved to {saved}", file=sys.stderr)
            if saved is not None and "-input-" in saved.name:
                print(f"{mod}: replay: {Path(sys.executable).name} {Path(__file__).relative_to(ROOT)} --replay {saved}"
                      + (" --plant-bug" if args.plant_bug else ""), file=sys.stderr)
            for line in (result or {}).get("problems", []):
                print(f"  {line}", file=sys.stderr)
            log = args.out / f"{mod}-stderr.txt"
            log.write_text(stderr)
            print(_report_excerpt(stderr), file=sys.stderr)
            print(f"{mod}: the whole stderr is in {log}", file=sys.stderr)
            failed.append(mod)
    seconds = time.monotonic() - t0
    tool = f"{Path(cc.split()[0]).name}, ASan+UBSan" + (", planted bug" if args.plant_bug else "")
    verdict = f"FAILED in {', '.join(failed)}" if failed else "clean"
    print(f"fuzz smoke: {total_inputs} inputs + {total_files} files, {seconds:.1f} s, {verdict} ({tool})")
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--worker"]:
        return worker(json.loads(argv[1]))
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--inputs", type=int, default=3000, help="mutated inputs per C module (default %(default)s)")
    ap.add_argument("--file-inputs", type=int, default=20,
                    help="mutated trace files per format, C vs pure Python (default %(default)s)")
    ap.add_argument("--seed", type=int, default=18, help="the same seed makes the same inputs")
    ap.add_argument("--out", type=Path, default=Path("fuzz-failures"), help="folder for reproducers")
    ap.add_argument("--build", type=Path, default=ROOT / "build" / "fuzz-asan", help="folder for the sanitized build")
    ap.add_argument("--plant-bug", action="store_true", help="a copy of _xplane_wire.c with an off-by-one read")
    ap.add_argument("--no-corpus", action="store_true", help="the bundled samples only, not $TRACEKIT_SHARED/corpus")
    ap.add_argument("--replay", type=Path, default=None,
                    help="run one saved scanner-level input (MODULE-input-HASH) through its target instead")
    args = ap.parse_args(argv)
    try:
        cc = pick_compiler()
        asan_runtime(cc)
        t0 = time.monotonic()
        built = build(cc, args.build, plant=args.plant_bug)
        print(f"sanitized build in {args.build} ({time.monotonic() - t0:.1f} s, {cc})", flush=True)
    except Unavailable as e:
        # CI must fuzz (it installs gcc); a user's machine without a compiler skips, saying so
        print(f"fuzz smoke: unavailable: {e}" + ("" if os.environ.get("CI") else " (skipped: CI is not set)"))
        return 3 if os.environ.get("CI") else 0
    return run(args, cc, built)


if __name__ == "__main__":
    sys.exit(main())
