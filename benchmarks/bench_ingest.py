#!/usr/bin/env python3
"""Ingest benchmark: ``tracekit ingest`` vs HTA 0.5.0 vs a plain ``json.load`` floor.

What it measures
----------------
Every measured command runs as its own whole process (interpreter start-up,
imports, parse, store writes: everything). For each one the parent records

* wall time (``time.perf_counter`` around spawn .. reap), and
* peak RSS, from ``os.wait4(pid)``'s ``ru_maxrss`` of exactly that child
  (Linux reports the largest RSS of the child or of any descendant it reaped;
  it is never summed and never mixed up with earlier measurements).

and reports the median of ``--repeat`` runs. Runs are interleaved
(tracekit, HTA, floor, tracekit, HTA, floor, ...) so drift hits all tools alike.

Tools (``--tools``, default ``tracekit,hta,floor``):

* ``tracekit``: ``tracekit ingest FILE --store <fresh path>.duckdb`` (a new store
  for every run, deleted afterwards; its on-disk size is reported).
* ``hta``: ``TraceAnalysis(trace_dir=D)`` in HTA's own venv (``--hta-python``),
  where ``D`` is a temp dir holding only a symlink to ``FILE``.
* ``floor``: ``json.load(gzip.open(FILE))`` with this interpreter: the cost of
  merely materialising the JSON in Python, as a reference point.

Per file the report gives uncompressed JSON MB, gz MB, event count, wall s,
peak RSS MB, MB/s and events/s (MB/s uses the *uncompressed* JSON size), plus
HTA/tracekit wall and tracekit/HTA RSS ratios, checked against the targets:
tracekit >= 10x faster than HTA with <= 1/3 of its peak RSS, and peak RSS
under 1000 MB on the ~1 GB generated trace. All MB are 10**6 bytes.

``--big`` also generates (once, cached in ``--workdir``) a ~1 GB Kineto trace
by replicating the source trace's ``traceEvents`` with timestamps shifted by
the trace span per copy and ids renumbered, streamed straight to .json.gz, and
measures tracekit on it (HTA and the floor only with ``--hta-big`` /
``--floor-big``: they need many GB of RAM).

How to run
----------
::

    python3 -m venv /work/hta-venv
    /work/hta-venv/bin/pip install HolisticTraceAnalysis==0.5.0 pandas==2.2.3
    python benchmarks/bench_ingest.py --hta-python /work/hta-venv/bin/python \\
        --repeat 3 --big --out results.json

``--tracekit CMD`` overrides the tracekit command (default: the ``tracekit``
script beside this interpreter, then ``.venv/bin/tracekit``, then ``PATH``).
A tool whose command is missing is skipped with a message. Only the standard
library is used.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import gzip
import json
import math
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, Any, cast

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_FILE = Path(
    "/work/shared/corpus/kineto/tracelens-mi300x-sd35-inference/profile_trace_rank_0.json.gz"
)
DEFAULT_WORKDIR = Path("/tmp/tracekit-bench")
ALL_TOOLS = ("tracekit", "hta", "floor")
MB = 1_000_000

# Targets from issue 2.
TARGET_SPEEDUP = 10.0  # HTA wall / tracekit wall >= this
TARGET_RSS_FRACTION = 1.0 / 3.0  # tracekit RSS / HTA RSS <= this
TARGET_BIG_RSS_MB = 1000.0  # tracekit peak RSS on the ~1 GB trace < this

HTA_SNIPPET = (
    "import sys\n"
    "from hta.trace_analysis import TraceAnalysis\n"
    "TraceAnalysis(trace_dir=sys.argv[1])\n"
)
FLOOR_SNIPPET = (
    "import gzip, json, sys\n"
    "p = sys.argv[1]\n"
    "with (gzip.open(p, 'rb') if p.endswith('.gz') else open(p, 'rb')) as f:\n"
    "    json.load(f)\n"
)
VERSIONS_SNIPPET = (
    "import importlib.metadata as m, json, sys\n"
    "out = {}\n"
    "for n in sys.argv[1:]:\n"
    "    try:\n"
    "        out[n] = m.version(n)\n"
    "    except m.PackageNotFoundError:\n"
    "        out[n] = None\n"
    "print(json.dumps(out))\n"
)

# Bump when the generator's output changes, to invalidate cached big traces.
GENERATOR_VERSION = 1
# Gap (us) between the end of one replicated copy and the start of the next.
COPY_GAP_US = 1000
# args that hold ids, grouped by the id space they share; each space gets its own
# per-copy offset. Flow events' top-level "id" shares the correlation space
# (ac2g flows use the runtime/kernel correlation id).
ID_SPACES: dict[str, tuple[str, ...]] = {
    "correlation": ("correlation",),
    "external": ("External id",),
    "python": ("Python id", "Python parent id"),
    "ev_idx": ("Ev Idx",),
}
STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")


# --------------------------------------------------------------------------- #
# Measurement
# --------------------------------------------------------------------------- #


@dataclasses.dataclass
class Sample:
    """One measured whole-process run."""

    wall_s: float
    maxrss_kb: int
    user_s: float
    sys_s: float
    returncode: int
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def rss_mb(self) -> float:
        return self.maxrss_kb * 1024 / MB


#: Children run with Python's bytecode cache on, as in any normal install: some sandboxes set
#: PYTHONDONTWRITEBYTECODE, which would make every run recompile an editable install's sources
#: while the anchors' site-packages were byte-compiled by pip.
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def select_tools(candidates: dict[str, Tool], wanted: list[str]) -> tuple[list[Tool], dict[str, str]]:
    """The wanted tools that are available, and why the others were skipped (printed as it goes)."""
    tools: list[Tool] = []
    skipped: dict[str, str] = {}
    for name in wanted:
        ok, why = candidates[name].available()
        if ok:
            tools.append(candidates[name])
            print(f"[{name}] {why}")
        else:
            skipped[name] = why
            print(f"[{name}] SKIPPED: {why}", flush=True)
    return tools, skipped


def run_measured(cmd: Sequence[str], log: IO[bytes], timeout_s: float) -> Sample:
    """Run ``cmd`` as a child, reap it with wait4 and return its wall time and rusage."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        list(cmd), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=CHILD_ENV
    )
    timer = threading.Timer(timeout_s, proc.kill)
    timer.start()
    try:
        _, status, ru = os.wait4(proc.pid, 0)
    finally:
        timer.cancel()
    wall = time.perf_counter() - t0
    rc = os.waitstatus_to_exitcode(status)
    proc.returncode = rc  # already reaped; keep Popen from waiting again
    return Sample(wall_s=wall, maxrss_kb=int(ru.ru_maxrss), user_s=ru.ru_utime, sys_s=ru.ru_stime, returncode=rc)


def tail(path: Path, n: int = 15) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


class Tool:
    name: str = ""

    def available(self) -> tuple[bool, str]:
        raise NotImplementedError

    def command(self, trace: Path, run_dir: Path) -> list[str]:
        raise NotImplementedError

    def after_run(self, run_dir: Path, sample: Sample) -> None:
        """Hook to collect per-run extras and clean up."""

    def versions(self) -> dict[str, Any]:
        return {}


def _resolve_executable(token: str) -> str | None:
    if os.sep in token:
        return token if os.path.isfile(token) and os.access(token, os.X_OK) else None
    return shutil.which(token)


def _python_versions(python: str, packages: Iterable[str]) -> dict[str, Any]:
    try:
        out = subprocess.run(
            [python, "-c", VERSIONS_SNIPPET, *packages],
            capture_output=True, text=True, timeout=120, check=True,
        ).stdout
        return dict(json.loads(out))
    except (OSError, subprocess.SubprocessError, ValueError):
        return {}


class TracekitTool(Tool):
    name = "tracekit"

    def __init__(self, cmd: str | None) -> None:
        if cmd is None:
            candidates = [
                str(Path(sys.executable).parent / "tracekit"),
                str(REPO_ROOT / ".venv" / "bin" / "tracekit"),
                "tracekit",
            ]
            found = next((c for c in candidates if _resolve_executable(c)), candidates[1])
            self.prefix = [found]
        else:
            self.prefix = shlex.split(cmd)

    def available(self) -> tuple[bool, str]:
        if not self.prefix or _resolve_executable(self.prefix[0]) is None:
            return False, f"tracekit command not found: {shlex.join(self.prefix)!r} (use --tracekit CMD)"
        return True, shlex.join(self.prefix)

    def command(self, trace: Path, run_dir: Path) -> list[str]:
        return [*self.prefix, "ingest", str(trace), "--store", str(run_dir / "store.duckdb")]

    def after_run(self, run_dir: Path, sample: Sample) -> None:
        size = sum(p.stat().st_size for p in run_dir.glob("store.duckdb*") if p.is_file())
        sample.extra["store_mb"] = size / MB

    def versions(self) -> dict[str, Any]:
        exe = _resolve_executable(self.prefix[0]) if self.prefix else None
        if exe is None:
            return {}
        python = Path(exe).parent / "python"
        return _python_versions(str(python), ["tracekit", "duckdb"]) if python.exists() else {}


class HtaTool(Tool):
    name = "hta"

    def __init__(self, python: str) -> None:
        self.python = python
        self._versions: dict[str, Any] | None = None

    def available(self) -> tuple[bool, str]:
        if _resolve_executable(self.python) is None:
            return False, f"HTA python not found: {self.python!r} (use --hta-python)"
        if not self.versions().get("HolisticTraceAnalysis"):
            return False, f"HolisticTraceAnalysis is not installed for {self.python}"
        return True, self.python

    def command(self, trace: Path, run_dir: Path) -> list[str]:
        # HTA takes a directory and parses every *.gz / *.json in it, so give it
        # one holding only this trace. The rank comes from the first '"rank": N'
        # in the file (rank 0 with a warning when absent), not from the name.
        trace_dir = run_dir / "hta_trace_dir"
        trace_dir.mkdir(exist_ok=True)
        name = trace.name if trace.name.endswith((".gz", ".json")) else trace.name + ".json"
        link = trace_dir / name
        if not link.exists():
            link.symlink_to(trace.resolve())
        return [self.python, "-c", HTA_SNIPPET, str(trace_dir)]

    def versions(self) -> dict[str, Any]:
        if self._versions is None:
            self._versions = _python_versions(self.python, ["HolisticTraceAnalysis", "pandas", "numpy"])
        return self._versions


class FloorTool(Tool):
    name = "floor"

    def available(self) -> tuple[bool, str]:
        return True, sys.executable

    def command(self, trace: Path, run_dir: Path) -> list[str]:
        return [sys.executable, "-c", FLOOR_SNIPPET, str(trace)]


# --------------------------------------------------------------------------- #
# File facts (uncompressed size, event count), cached
# --------------------------------------------------------------------------- #


def _open_trace(path: Path) -> IO[bytes]:
    if path.name.endswith(".gz"):
        return cast(IO[bytes], gzip.open(path, "rb"))
    return open(path, "rb")


def _cache_key(path: Path) -> str:
    st = path.stat()
    return f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}"


def file_facts(path: Path, workdir: Path) -> dict[str, Any]:
    """Return gz/json byte sizes and the traceEvents count, cached in ``workdir``."""
    meta = big_meta_path(path)
    if meta.exists():  # generated by us: facts were recorded at generation time
        m = json.loads(meta.read_text())
        if m.get("key") == _cache_key(path):
            return {"gz_bytes": m["gz_bytes"], "json_bytes": m["json_bytes"], "events": m["events"]}
    cache_file = workdir / "file_facts.json"
    cache: dict[str, Any] = json.loads(cache_file.read_text()) if cache_file.exists() else {}
    key = _cache_key(path)
    if key not in cache:
        print(f"[facts] counting events in {path} (once, cached) ...", flush=True)
        json_bytes = 0
        with _open_trace(path) as f:
            while chunk := f.read(1 << 22):
                json_bytes += len(chunk)
        # counted in a child process: json.load would grow this process to ~400 MB, and a child
        # forked from a large parent starts with that RSS in its own ru_maxrss
        events = int(subprocess.run(
            [sys.executable, "-c", (
                "import gzip, json, sys; p = sys.argv[1]; "
                "f = gzip.open(p) if p.endswith('.gz') else open(p, 'rb'); "
                "print(len(json.load(f)['traceEvents']))"
            ), str(path)],
            check=True, capture_output=True, text=True,
        ).stdout)
        cache[key] = {"gz_bytes": path.stat().st_size if path.name.endswith(".gz") else None,
                      "json_bytes": json_bytes, "events": events}
        workdir.mkdir(parents=True, exist_ok=True)
        cache_file.write_text(json.dumps(cache, indent=1))
    return dict(cache[key])


# --------------------------------------------------------------------------- #
# Big trace generation
# --------------------------------------------------------------------------- #


def big_meta_path(path: Path) -> Path:
    return path.with_name(path.name + ".meta.json")


def _shift_ts(value: Any, shift: int) -> Any:
    if isinstance(value, float):
        return round(value + shift, 3)
    if isinstance(value, int):
        return value + shift
    return value


def generate_big(source: Path, workdir: Path, target_mb: float, compresslevel: int = 6) -> Path:
    """Stream a ~``target_mb`` MB Kineto trace made of shifted copies of ``source``.

    Copy k has every ``ts`` shifted by k * (span + gap), every id space
    (correlation + flow ``id``, External id, Python id/parent id, Ev Idx) offset
    by k * (max + 1), and ``ProfilerStep#n`` renumbered so steps stay unique.
    Metadata (``ph == "M"``) events are written once. Top-level keys keep the
    source's order and values. Output is written event by event through gzip, so
    only the source trace is ever held in memory, not the output.
    """
    with _open_trace(source) as f:
        src_json_bytes = 0
        while chunk := f.read(1 << 22):
            src_json_bytes += len(chunk)
    copies = max(1, round(target_mb * MB / src_json_bytes))
    stem = source.name.split(".")[0]
    out = workdir / f"big-{source.parent.name}-{stem}-x{copies}.json.gz"
    meta_path = big_meta_path(out)
    params = {"source": _cache_key(source), "copies": copies, "generator": GENERATOR_VERSION,
              "compresslevel": compresslevel}
    if out.exists() and meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta.get("params") == params and meta.get("key") == _cache_key(out):
            print(f"[big] reusing {out} ({meta['json_bytes'] / MB:.0f} MB JSON, {meta['events']} events)")
            return out

    print(f"[big] generating {out}: {copies} copies of {source} ...", flush=True)
    t0 = time.perf_counter()
    with _open_trace(source) as f:
        doc = json.load(f)
    events: list[dict[str, Any]] = doc["traceEvents"]

    starts = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
    ends = [e["ts"] + (e["dur"] if isinstance(e.get("dur"), (int, float)) else 0)
            for e in events if isinstance(e.get("ts"), (int, float))]
    shift_us = math.ceil(max(ends) - min(starts)) + COPY_GAP_US

    space_max: dict[str, int] = {s: 0 for s in ID_SPACES}
    arg_space = {k: s for s, keys in ID_SPACES.items() for k in keys}
    steps: list[int] = []
    for e in events:
        if isinstance(e.get("id"), int) and e.get("ph") in ("s", "f", "t"):
            space_max["correlation"] = max(space_max["correlation"], e["id"])
        args = e.get("args")
        if isinstance(args, dict):
            for arg_key, space in arg_space.items():
                v = args.get(arg_key)
                if isinstance(v, int) and not isinstance(v, bool):
                    space_max[space] = max(space_max[space], v)
        m = STEP_RE.match(str(e.get("name", "")))
        if m:
            steps.append(int(m.group(1)))
    step_stride = (max(steps) - min(steps) + 1) if steps else 0

    def copy_event(e: dict[str, Any], k: int) -> dict[str, Any]:
        if k == 0:
            return e
        e2 = dict(e)
        if "ts" in e2:
            e2["ts"] = _shift_ts(e2["ts"], k * shift_us)
        if isinstance(e2.get("id"), int) and e2.get("ph") in ("s", "f", "t"):
            e2["id"] += k * (space_max["correlation"] + 1)
        args = e2.get("args")
        if isinstance(args, dict) and any(key in args for key in arg_space):
            a2 = dict(args)
            for key, s in arg_space.items():
                v = a2.get(key)
                if isinstance(v, int) and not isinstance(v, bool):
                    a2[key] = v + k * (space_max[s] + 1)
            e2["args"] = a2
        if step_stride:
            m = STEP_RE.match(str(e2.get("name", "")))
            if m:
                e2["name"] = f"ProfilerStep#{int(m.group(1)) + k * step_stride}"
        return e2

    workdir.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    n_events = 0
    json_bytes = 0
    buf: list[str] = []
    buf_len = 0
    with gzip.open(tmp, "wb", compresslevel=compresslevel) as gz:

        def emit(s: str) -> None:
            nonlocal buf_len, json_bytes
            buf.append(s)
            buf_len += len(s)
            if buf_len >= 1 << 22:
                data = "".join(buf).encode()
                gz.write(data)
                json_bytes += len(data)
                buf.clear()
                buf_len = 0

        # Default separators (", ", ": ") like the source; HTA's rank sniffing
        # needs the space in '"rank": N'. Header on its own line, one event a line.
        emit("{")
        for i, (key, value) in enumerate(doc.items()):
            emit(", " if i else "")
            if key != "traceEvents":
                emit(f"{json.dumps(key)}: {json.dumps(value)}")
                continue
            emit('"traceEvents": [\n')
            first = True
            for copy_no in range(copies):
                for e in events:
                    if copy_no and e.get("ph") == "M":
                        continue
                    emit(("" if first else ",\n") + json.dumps(copy_event(e, copy_no)))
                    first = False
                    n_events += 1
            emit("\n]")
        emit("}\n")
        data = "".join(buf).encode()
        gz.write(data)
        json_bytes += len(data)
    del doc, events
    os.replace(tmp, out)
    gen_s = time.perf_counter() - t0
    meta = {"params": params, "key": _cache_key(out), "source_path": str(source),
            "copies": copies, "shift_us": shift_us, "events": n_events, "json_bytes": json_bytes,
            "gz_bytes": out.stat().st_size, "generation_s": round(gen_s, 1)}
    meta_path.write_text(json.dumps(meta, indent=1))
    print(f"[big] wrote {out}: {json_bytes / MB:.0f} MB JSON, {out.stat().st_size / MB:.0f} MB gz, "
          f"{n_events} events in {gen_s:.1f} s", flush=True)
    return out


# --------------------------------------------------------------------------- #
# Benchmark driver and report
# --------------------------------------------------------------------------- #


def _median(xs: list[float]) -> float:
    return float(statistics.median(xs)) if xs else float("nan")


def bench_file(trace: Path, label: str, tools: list[Tool], repeat: int, workdir: Path,
               timeout_s: float) -> dict[str, Any]:
    facts = file_facts(trace, workdir)
    print(f"\n== {label}: {trace} ({facts['json_bytes'] / MB:.1f} MB JSON, {facts['events']} events)",
          flush=True)
    samples: dict[str, list[Sample]] = {t.name: [] for t in tools}
    errors: dict[str, str] = {}
    log_dir = workdir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    for i in range(repeat):
        for tool in tools:
            if tool.name in errors:
                continue
            with tempfile.TemporaryDirectory(prefix=f"{tool.name}-", dir=workdir) as d:
                run_dir = Path(d)
                cmd = tool.command(trace, run_dir)
                log_path = log_dir / f"{label}-{tool.name}-{i}.log"
                with open(log_path, "wb") as log:
                    sample = run_measured(cmd, log, timeout_s)
                tool.after_run(run_dir, sample)
            if sample.returncode != 0:
                errors[tool.name] = (f"exit {sample.returncode}: {shlex.join(cmd)}\n"
                                     f"--- {log_path} (tail) ---\n{tail(log_path)}")
                print(f"  [{tool.name}] FAILED ({errors[tool.name].splitlines()[0]}); see {log_path}",
                      flush=True)
                continue
            samples[tool.name].append(sample)
            print(f"  [{tool.name}] run {i + 1}/{repeat}: {sample.wall_s:.2f} s, "
                  f"{sample.rss_mb:.0f} MB peak RSS", flush=True)

    results: dict[str, Any] = {}
    for tool in tools:
        ss = samples[tool.name]
        if tool.name in errors or not ss:
            results[tool.name] = {"error": errors.get(tool.name, "no runs")}
            continue
        wall = _median([s.wall_s for s in ss])
        rss = _median([s.rss_mb for s in ss])
        r: dict[str, Any] = {
            "wall_s": wall,
            "peak_rss_mb": rss,
            "mb_per_s": facts["json_bytes"] / MB / wall,
            "events_per_s": facts["events"] / wall,
            "runs": [dataclasses.asdict(s) | {"rss_mb": s.rss_mb} for s in ss],
        }
        if any("store_mb" in s.extra for s in ss):
            r["store_mb"] = _median([s.extra["store_mb"] for s in ss])
        results[tool.name] = r

    out: dict[str, Any] = {"label": label, "path": str(trace), **facts, "results": results}
    tk, hta = results.get("tracekit", {}), results.get("hta", {})
    if "wall_s" in tk and "wall_s" in hta:
        out["hta_over_tracekit_wall"] = hta["wall_s"] / tk["wall_s"]
        out["tracekit_over_hta_rss"] = tk["peak_rss_mb"] / hta["peak_rss_mb"]
    return out


def _fmt(v: Any, spec: str) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def render_markdown(files: list[dict[str, Any]], big_label: str | None) -> str:
    lines = [
        "| file | JSON MB | gz MB | events | tool | wall s | peak RSS MB | MB/s | events/s |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for f in files:
        gz = f["gz_bytes"] / MB if f.get("gz_bytes") else None
        for name, r in f["results"].items():
            if "error" in r:
                lines.append(f"| {f['label']} | {f['json_bytes'] / MB:.1f} | {_fmt(gz, '.2f')} | "
                             f"{f['events']:,} | {name} | failed/skipped | | | |")
                continue
            lines.append(
                f"| {f['label']} | {f['json_bytes'] / MB:.1f} | {_fmt(gz, '.2f')} | {f['events']:,} | "
                f"{name} | {r['wall_s']:.2f} | {r['peak_rss_mb']:.0f} | {r['mb_per_s']:.1f} | "
                f"{r['events_per_s']:,.0f} |")
    lines += ["", ("| file | HTA/tracekit wall (target >= 10) | tracekit/HTA RSS (target <= 0.33) | "
                  "tracekit peak RSS MB | verdict |"),
              "|---|---:|---:|---:|---|"]
    for f in files:
        tk = f["results"].get("tracekit", {})
        checks: list[str] = []
        sp, rr = f.get("hta_over_tracekit_wall"), f.get("tracekit_over_hta_rss")
        if sp is not None and rr is not None:
            checks.append("speed " + ("PASS" if sp >= TARGET_SPEEDUP else "FAIL"))
            checks.append("rss " + ("PASS" if rr <= TARGET_RSS_FRACTION else "FAIL"))
        if f["label"] == big_label and "peak_rss_mb" in tk:
            checks.append(f"big rss < {TARGET_BIG_RSS_MB:.0f} MB "
                          + ("PASS" if tk["peak_rss_mb"] < TARGET_BIG_RSS_MB else "FAIL"))
        lines.append(f"| {f['label']} | {_fmt(sp, '.1f')} | {_fmt(rr, '.3f')} | "
                     f"{_fmt(tk.get('peak_rss_mb'), '.0f')} | {', '.join(checks) or 'n/a'} |")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--file", action="append", type=Path, default=None,
                   help=f"trace to benchmark (repeatable; default {DEFAULT_FILE})")
    p.add_argument("--tracekit", default=None, help="tracekit command (default: .venv/bin/tracekit)")
    p.add_argument("--hta-python", default="/work/hta-venv/bin/python",
                   help="python of a venv with HolisticTraceAnalysis 0.5.0 (default %(default)s)")
    p.add_argument("--tools", default=",".join(ALL_TOOLS), help=f"comma list of {','.join(ALL_TOOLS)}")
    p.add_argument("--repeat", type=int, default=3, help="runs per tool per file; median reported")
    p.add_argument("--big", action="store_true", help="also generate and benchmark a ~1 GB trace")
    p.add_argument("--big-source", type=Path, default=DEFAULT_FILE, help="trace replicated for --big")
    p.add_argument("--big-mb", type=float, default=1000.0, help="target uncompressed size of --big")
    p.add_argument("--hta-big", action="store_true", help="run HTA on the big trace too (needs many GB)")
    p.add_argument("--floor-big", action="store_true", help="run the json.load floor on the big trace")
    p.add_argument("--generate-only", action="store_true", help="only generate the big trace, then exit")
    p.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR,
                   help="cache/scratch dir for generated traces, stores, logs (default %(default)s)")
    p.add_argument("--timeout", type=float, default=3600.0, help="per-run timeout in seconds")
    p.add_argument("--out", type=Path, default=None, help="write JSON results here")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    workdir: Path = args.workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)

    big: Path | None = None
    if args.generate_only:
        generate_big(args.big_source, workdir, args.big_mb)
        return 0
    if args.big:
        # generated (or found in the cache) by a child process: generating json.loads the source
        # trace, and every measured child forked from a parent that large would report the
        # parent's ~400 MB as its own ru_maxrss
        subprocess.run(
            [sys.executable, __file__, "--generate-only", "--workdir", str(workdir),
             "--big-source", str(args.big_source), "--big-mb", str(args.big_mb)],
            check=True,
        )
        big = generate_big(args.big_source, workdir, args.big_mb)  # now a cache hit

    wanted = [t.strip() for t in args.tools.split(",") if t.strip()]
    unknown = set(wanted) - set(ALL_TOOLS)
    if unknown:
        print(f"unknown tools: {sorted(unknown)}", file=sys.stderr)
        return 2
    candidates: dict[str, Tool] = {
        "tracekit": TracekitTool(args.tracekit),
        "hta": HtaTool(args.hta_python),
        "floor": FloorTool(),
    }
    tools, skipped = select_tools(candidates, wanted)

    files: list[dict[str, Any]] = []
    for path in args.file or [DEFAULT_FILE]:
        label = path.parent.name or path.name
        files.append(bench_file(path, label, tools, args.repeat, workdir, args.timeout))
    big_label: str | None = None
    if big is not None:
        big_label = f"big:{big.name}"
        big_tools = [t for t in tools if t.name == "tracekit"
                     or (t.name == "hta" and args.hta_big) or (t.name == "floor" and args.floor_big)]
        if big_tools:
            files.append(bench_file(big, big_label, big_tools, args.repeat, workdir, args.timeout))
        else:
            print("[big] no tool to run on the big trace (tracekit missing?)")

    table = render_markdown(files, big_label)
    print("\n" + table)
    if skipped:
        print("\nSkipped: " + "; ".join(f"{k}: {v}" for k, v in skipped.items()))
    for f in files:
        for name, r in f["results"].items():
            if "error" in r:
                print(f"\nFAILED {name} on {f['label']}: {r['error']}")

    if args.out is not None:
        report = {
            "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "host": {"platform": platform.platform(), "cpus": os.cpu_count(),
                     "python": sys.version.split()[0]},
            "repeat": args.repeat,
            "mb": "10**6 bytes; MB/s is uncompressed JSON MB per second of whole-process wall time",
            "targets": {"hta_over_tracekit_wall_min": TARGET_SPEEDUP,
                        "tracekit_over_hta_rss_max": TARGET_RSS_FRACTION,
                        "big_tracekit_rss_mb_max": TARGET_BIG_RSS_MB},
            "versions": {t.name: t.versions() for t in tools},
            "commands": {t.name: getattr(t, "prefix", None) or getattr(t, "python", sys.executable)
                         for t in tools},
            "skipped": skipped,
            "files": files,
            "markdown": table,
        }
        args.out.write_text(json.dumps(report, indent=1))
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
