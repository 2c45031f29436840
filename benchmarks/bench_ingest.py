#!/usr/bin/env python3
"""Ingest benchmark: ``tracekit ingest`` vs HTA 0.5.0 vs a plain ``json.load`` floor.

What it measures
----------------
Every measured command runs as its own whole process (interpreter start-up,
imports, parse, store writes: everything), measured by ``benchmarks/harness.py``:

* wall time (``time.perf_counter`` around spawn .. reap), and
* peak RSS, the child's own ``VmHWM`` (``/proc/self/status``, written as it
  leaves by the harness's wrapper; every tool here is a Python process), with
  ``ru_maxrss`` from ``os.wait4`` only as the fallback where there is no ``/proc``,

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
library is used (and ``harness.py`` beside this file).
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, cast

from harness import (
    MB,
    Tool,
    TracekitTool,
    add_common_args,
    cache_key,
    fmt,
    markdown_table,
    measure_side_by_side,
    new_parser,
    parse_tools,
    python_versions,
    resolve_executable,
    select_tools,
    summarize,
    write_report,
)

DEFAULT_FILE = Path(
    "/work/shared/corpus/kineto/tracelens-mi300x-sd35-inference/profile_trace_rank_0.json.gz"
)
ALL_TOOLS = ("tracekit", "hta", "floor")

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
# Anchors
# --------------------------------------------------------------------------- #


class HtaTool(Tool):
    name = "hta"

    def __init__(self, python: str) -> None:
        self.python = python
        self._versions: dict[str, Any] | None = None

    def available(self) -> tuple[bool, str]:
        if resolve_executable(self.python) is None:
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
            self._versions = python_versions(self.python, ["HolisticTraceAnalysis", "pandas", "numpy"])
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


def file_facts(path: Path, workdir: Path) -> dict[str, Any]:
    """Return gz/json byte sizes and the traceEvents count, cached in ``workdir``."""
    meta = big_meta_path(path)
    if meta.exists():  # generated by us: facts were recorded at generation time
        m = json.loads(meta.read_text())
        if m.get("key") == cache_key(path):
            return {"gz_bytes": m["gz_bytes"], "json_bytes": m["json_bytes"], "events": m["events"]}
    cache_file = workdir / "file_facts.json"
    cache: dict[str, Any] = json.loads(cache_file.read_text()) if cache_file.exists() else {}
    key = cache_key(path)
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
    params = {"source": cache_key(source), "copies": copies, "generator": GENERATOR_VERSION,
              "compresslevel": compresslevel}
    if out.exists() and meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta.get("params") == params and meta.get("key") == cache_key(out):
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
    meta = {"params": params, "key": cache_key(out), "source_path": str(source),
            "copies": copies, "shift_us": shift_us, "events": n_events, "json_bytes": json_bytes,
            "gz_bytes": out.stat().st_size, "generation_s": round(gen_s, 1)}
    meta_path.write_text(json.dumps(meta, indent=1))
    print(f"[big] wrote {out}: {json_bytes / MB:.0f} MB JSON, {out.stat().st_size / MB:.0f} MB gz, "
          f"{n_events} events in {gen_s:.1f} s", flush=True)
    return out


# --------------------------------------------------------------------------- #
# Benchmark driver and report
# --------------------------------------------------------------------------- #


def bench_file(trace: Path, label: str, tools: list[Tool], repeat: int, workdir: Path,
               timeout_s: float) -> dict[str, Any]:
    facts = file_facts(trace, workdir)
    print(f"\n== {label}: {trace} ({facts['json_bytes'] / MB:.1f} MB JSON, {facts['events']} events)",
          flush=True)
    measured = measure_side_by_side(trace, tools, repeat, workdir, timeout_s, label)
    results: dict[str, Any] = {}
    for tool in tools:
        ss = measured.samples[tool.name]
        if tool.name in measured.errors or not ss:
            results[tool.name] = measured.errors.get(tool.name, {"error": "no runs"})
            continue
        r = summarize(ss)
        results[tool.name] = {"wall_s": r["wall_s"], "peak_rss_mb": r["peak_rss_mb"],
                              "mb_per_s": facts["json_bytes"] / MB / r["wall_s"],
                              "events_per_s": facts["events"] / r["wall_s"]} | r

    out: dict[str, Any] = {"label": label, "path": str(trace), **facts, "results": results}
    tk, hta = results.get("tracekit", {}), results.get("hta", {})
    if "wall_s" in tk and "wall_s" in hta:
        out["hta_over_tracekit_wall"] = hta["wall_s"] / tk["wall_s"]
        out["tracekit_over_hta_rss"] = tk["peak_rss_mb"] / hta["peak_rss_mb"]
    return out


def render_markdown(files: list[dict[str, Any]], big_label: str | None) -> str:
    rows: list[list[str]] = []
    for f in files:
        gz = f["gz_bytes"] / MB if f.get("gz_bytes") else None
        head = [f["label"], f"{f['json_bytes'] / MB:.1f}", fmt(gz, ".2f"), f"{f['events']:,}"]
        for name, r in f["results"].items():
            if "error" in r:
                rows.append([*head, name, "failed/skipped", "", "", ""])
                continue
            rows.append([*head, name, f"{r['wall_s']:.2f}", f"{r['peak_rss_mb']:.0f}", f"{r['mb_per_s']:.1f}",
                         f"{r['events_per_s']:,.0f}"])
    lines = markdown_table(
        ["file", "JSON MB", "gz MB", "events", "tool", "wall s", "peak RSS MB", "MB/s", "events/s"], rows,
        [False, True, True, True, False, True, True, True, True])
    verdicts: list[list[str]] = []
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
        verdicts.append([f["label"], fmt(sp, ".1f"), fmt(rr, ".3f"), fmt(tk.get("peak_rss_mb"), ".0f"),
                         ", ".join(checks) or "n/a"])
    lines += ["", *markdown_table(
        ["file", "HTA/tracekit wall (target >= 10)", "tracekit/HTA RSS (target <= 0.33)", "tracekit peak RSS MB",
         "verdict"], verdicts, [False, True, True, True, False])]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = new_parser(__doc__)
    p.add_argument("--file", action="append", type=Path, default=None,
                   help=f"trace to benchmark (repeatable; default {DEFAULT_FILE})")
    p.add_argument("--hta-python", default="/work/hta-venv/bin/python",
                   help="python of a venv with HolisticTraceAnalysis 0.5.0 (default %(default)s)")
    p.add_argument("--tools", default=",".join(ALL_TOOLS), help=f"comma list of {','.join(ALL_TOOLS)}")
    p.add_argument("--big", action="store_true", help="also generate and benchmark a ~1 GB trace")
    p.add_argument("--big-source", type=Path, default=DEFAULT_FILE, help="trace replicated for --big")
    p.add_argument("--big-mb", type=float, default=1000.0, help="target uncompressed size of --big")
    p.add_argument("--hta-big", action="store_true", help="run HTA on the big trace too (needs many GB)")
    p.add_argument("--floor-big", action="store_true", help="run the json.load floor on the big trace")
    p.add_argument("--generate-only", action="store_true", help="only generate the big trace, then exit")
    add_common_args(p)
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

    wanted = parse_tools(args.tools, ALL_TOOLS)
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

    write_report(args.out, {
        "repeat": args.repeat,
        "mb": "10**6 bytes; MB/s is uncompressed JSON MB per second of whole-process wall time",
        "rss": "the child's own VmHWM for Python commands (rss_source per run), else ru_maxrss",
        "targets": {"hta_over_tracekit_wall_min": TARGET_SPEEDUP,
                    "tracekit_over_hta_rss_max": TARGET_RSS_FRACTION,
                    "big_tracekit_rss_mb_max": TARGET_BIG_RSS_MB},
        "versions": {t.name: t.versions() for t in tools},
        "commands": {t.name: getattr(t, "prefix", None) or getattr(t, "python", sys.executable) for t in tools},
        "skipped": skipped,
        "files": files,
        "markdown": table,
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
