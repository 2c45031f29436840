#!/usr/bin/env python3
"""XPlane ingest benchmark: ``tracekit ingest`` vs XProf's own conversion of the same .xplane.pb.

What it measures
----------------
The same way as ``bench_ingest.py``, through ``benchmarks/harness.py``: every
measured command runs as its own whole process (interpreter start-up, imports,
parse, output: everything); the parent records wall time around spawn .. reap and
peak RSS, the child's own ``VmHWM`` (every tool here is a Python process;
``ru_maxrss`` only where there is no ``/proc``), and reports the median of
``--repeat`` interleaved runs (tracekit, xprof-trace_viewer, ..., tracekit, ...).

Tools (``--tools``, default ``tracekit,xprof-trace_viewer,xprof-overview,xprof-hlo_stats``):

* ``tracekit``: ``tracekit ingest FILE --store <fresh path>.duckdb --json`` (a new
  store for every run, deleted afterwards; its on-disk size and the event counts
  tracekit reports are recorded).
* ``xprof-trace_viewer``: in XProf's own venv (``--xprof-python``),
  ``xprof.convert.raw_to_tool_data.xspace_to_tool_data([COPY], "trace_viewer",
  {"use_saved_result": False})``: the whole XSpace -> trace-viewer JSON string
  conversion XProf does before it can show a trace (C++ conversion to a Trace
  proto, then Python ``process_raw_trace`` to JSON). This is the reference.
* ``xprof-overview`` / ``xprof-hlo_stats``: the same call for ``overview_page`` /
  ``hlo_stats`` (secondary references: op-stats tools that also walk every event).
* ``xprof-trace_viewer_stream`` (not in the default set): ``trace_viewer@``, the
  streaming trace viewer, which writes SSTABLE caches next to the file and
  returns only a visible-window subset of the events.

``COPY`` is a fresh copy of FILE inside the run's temp dir, made before the
clock starts, so caches XProf may write next to its input never land beside the
source file and never leak from one run to the next.

Per file the report gives MB (on disk; a .gz input is decompressed into XProf's
copy), the XEvent count (``jax.profiler.ProfileData`` with ``--jax-python`` when
jax imports there, else a protobuf-free walk of the XSpace wire format;
``--events N`` overrides; cached in ``--workdir``), then per
tool wall s, peak RSS MB, CPU s, events/s and s per million events, and the
XProf-trace_viewer/tracekit wall and tracekit/XProf RSS ratios, checked against
the issue 3 target: tracekit <= 1.0 s per million events. MB = 10**6 bytes.

How to run
----------
::

    python3 -m venv /work/xprof-venv && /work/xprof-venv/bin/pip install xprof
    .venv/bin/python benchmarks/bench_xplane.py --xprof-python /work/xprof-venv/bin/python \\
        --repeat 3 --out results.json

A tool that exits non-zero is reported as FAILED with its last stderr line and
the benchmark goes on with the other tools. The default big capture is generated
with ``tools/make_jax_sample.py --python-tracer --xla-default-codegen``
when it does not exist (needs jax); other missing files are skipped with a message. Only the standard library is used
(and ``harness.py`` beside this file).
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness import (
    MB,
    REPO_ROOT,
    Sample,
    Tool,
    TracekitTool,
    add_common_args,
    cache_key,
    fmt,
    markdown_table,
    measure_side_by_side,
    median,
    new_parser,
    parse_tools,
    python_versions,
    resolve_executable,
    select_tools,
    summarize,
    tail,
    tests_module,
    write_report,
)

DEFAULT_FILES = (
    Path("/tmp/tracekit-bench/jax_cpu_pytracer.xplane.pb"),
    Path("/work/shared/corpus/xplane/xprof_tpu_v6e_inference/tpu_inference_2.xplane.pb"),
)
DEFAULT_XPROF_PYTHON = "/work/xprof-venv/bin/python"
# Benchmark tool name -> XProf tool name passed to xspace_to_tool_data.
XPROF_TOOLS = {
    "xprof-trace_viewer": "trace_viewer",
    "xprof-overview": "overview_page",
    "xprof-hlo_stats": "hlo_stats",
    "xprof-trace_viewer_stream": "trace_viewer@",
}
ALL_TOOLS = ("tracekit", *XPROF_TOOLS)
DEFAULT_TOOLS = ("tracekit", "xprof-trace_viewer", "xprof-overview", "xprof-hlo_stats")
REFERENCE_TOOL = "xprof-trace_viewer"

# Target from issue 3.
TARGET_S_PER_M_EVENTS = 1.0  # tracekit whole-process wall seconds per million XEvents
#: The target is about large captures: on a small file s/M is the fixed cost of a process
#: (interpreter, imports, store creation) divided by a small count.
MIN_EVENTS_FOR_VERDICT = 100_000

XPROF_SNIPPET = (
    "import json, sys, time\n"
    "t0 = time.perf_counter()\n"
    "from xprof.convert import raw_to_tool_data\n"
    "t1 = time.perf_counter()\n"
    "data, content_type = raw_to_tool_data.xspace_to_tool_data(\n"
    "    [sys.argv[1]], sys.argv[2], {'use_saved_result': False})\n"
    "t2 = time.perf_counter()\n"
    "if data is None:\n"
    "    sys.exit(f'error: xspace_to_tool_data({sys.argv[2]!r}) returned no data')\n"
    "print('XPROF_RESULT ' + json.dumps({'import_s': t1 - t0, 'convert_s': t2 - t1,\n"
    "    'output_chars': len(data), 'content_type': content_type}), flush=True)\n"
)
JAX_COUNT_SNIPPET = (
    "import gzip, sys\n"
    "from jax.profiler import ProfileData\n"
    "p = sys.argv[1]\n"
    "pd = (ProfileData.from_serialized_xspace(gzip.open(p).read()) if p.endswith('.gz')\n"
    "      else ProfileData.from_file(p))\n"
    "print(sum(1 for p in pd.planes for line in p.lines for _ in line.events))\n"
)


# --------------------------------------------------------------------------- #
# Tools
# --------------------------------------------------------------------------- #


class TracekitXplaneTool(TracekitTool):
    """``tracekit ingest FILE --store <fresh>.duckdb --json``; records what tracekit reports."""

    def __init__(self, cmd: str | None, fmt: str | None) -> None:
        super().__init__(cmd)
        self.fmt = fmt

    def command(self, trace: Path, run_dir: Path) -> list[str]:
        cmd = [*super().command(trace, run_dir), "--json"]
        return [*cmd, "--format", self.fmt] if self.fmt else cmd

    def parse_log(self, log_path: Path, sample: Sample) -> None:
        doc = _first_json(log_path, "[")
        if isinstance(doc, list) and doc and isinstance(doc[0], dict):
            sample.extra["reported"] = {k: v for k, v in doc[0].items()
                                        if k.startswith("n_") or k == "format"}


class XprofTool(Tool):
    """``xspace_to_tool_data([copy], TOOL, {"use_saved_result": False})`` in XProf's venv."""

    def __init__(self, name: str, xprof_tool: str, python: str) -> None:
        self.name = name
        self.xprof_tool = xprof_tool
        self.python = python
        self._versions: dict[str, Any] | None = None

    def available(self) -> tuple[bool, str]:
        if resolve_executable(self.python) is None:
            return False, f"XProf python not found: {self.python!r} (use --xprof-python)"
        if not self.versions().get("xprof"):
            return False, f"xprof is not installed for {self.python}"
        return True, f"{self.python} xspace_to_tool_data(..., {self.xprof_tool!r}, ...)"

    def command(self, trace: Path, run_dir: Path) -> list[str]:
        # A private copy (made before the clock starts): XProf writes caches next to
        # its input (trace_viewer@ always writes <stem>.SSTABLE files there).
        copy_dir = run_dir / "xplane"
        copy_dir.mkdir(exist_ok=True)
        copy = copy_dir / trace.name.removesuffix(".gz")
        if trace.name.endswith(".gz"):  # XProf reads plain .xplane.pb only
            with gzip.open(trace, "rb") as src, open(copy, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 24)
        else:
            shutil.copyfile(trace, copy)
        return [self.python, "-c", XPROF_SNIPPET, str(copy), self.xprof_tool]

    def after_run(self, run_dir: Path, sample: Sample) -> None:
        written = sorted(p.name for p in (run_dir / "xplane").iterdir() if not p.name.endswith(".xplane.pb"))
        if written:
            sample.extra["files_written_next_to_input"] = written

    def parse_log(self, log_path: Path, sample: Sample) -> None:
        for line in log_path.read_text(errors="replace").splitlines():
            if line.startswith("XPROF_RESULT "):
                sample.extra.update(json.loads(line[len("XPROF_RESULT "):]))

    def versions(self) -> dict[str, Any]:
        if self._versions is None:
            self._versions = python_versions(self.python, ["xprof", "protobuf", "numpy"])
        return self._versions


def _first_json(log_path: Path, opener: str) -> Any:
    """The first JSON value in the log that starts a line with ``opener`` (stderr is mixed in)."""
    text = log_path.read_text(errors="replace")
    dec = json.JSONDecoder()
    pos = 0
    while (i := text.find(opener, pos)) != -1:
        if i == 0 or text[i - 1] == "\n":
            try:
                return dec.raw_decode(text, i)[0]
            except ValueError:
                pass
        pos = i + 1
    return None


def failure_line(log_path: Path) -> str:
    """The line that says why a run failed: the last ``error``-looking line, else the last line."""
    lines = [ln.strip() for ln in tail(log_path, 200).splitlines() if ln.strip()]
    for ln in reversed(lines):
        low = ln.lower()
        if low.startswith(("error", "traceback", "e0000")) or "error:" in low:
            return ln
    return lines[-1] if lines else "(no output)"


# --------------------------------------------------------------------------- #
# File facts (size, XEvent count), cached
# --------------------------------------------------------------------------- #


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _fields(buf: memoryview, start: int, end: int, want: int) -> list[tuple[int, int]]:
    """(start, end) of every length-delimited field number ``want`` in buf[start:end]."""
    out: list[tuple[int, int]] = []
    pos = start
    while pos < end:
        key, pos = _varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            _, pos = _varint(buf, pos)
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        elif wire == 2:
            n, pos = _varint(buf, pos)
            if field == want:
                out.append((pos, pos + n))
            pos += n
        else:
            raise ValueError(f"unsupported protobuf wire type {wire} at byte {pos}")
    return out


def count_xevents_wire(path: Path) -> int:
    """Count XEvents without protobuf: XSpace.planes(1) -> XPlane.lines(3) -> XLine.events(4)."""
    if path.name.endswith(".gz"):
        with gzip.open(path, "rb") as f:
            buf = memoryview(f.read())
    else:
        buf = memoryview(path.read_bytes())
    n = 0
    for ps, pe in _fields(buf, 0, len(buf), 1):
        for ls, le in _fields(buf, ps, pe, 3):
            n += len(_fields(buf, ls, le, 4))
    return n


def count_xevents_jax(path: Path, python: str) -> int | None:
    try:
        out = subprocess.run([python, "-c", JAX_COUNT_SNIPPET, str(path)],
                             capture_output=True, text=True, timeout=1800, check=True).stdout
        return int(out.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def file_facts(path: Path, workdir: Path, jax_python: str, events: int | None) -> dict[str, Any]:
    """File bytes and XEvent count (``--events`` > cache > jax ProfileData > wire walk)."""
    facts: dict[str, Any] = {"bytes": path.stat().st_size, "gzipped": path.name.endswith(".gz")}
    if events is not None:
        return facts | {"events": events, "events_from": "--events"}
    cache_file = workdir / "xplane_facts.json"
    cache: dict[str, Any] = json.loads(cache_file.read_text()) if cache_file.exists() else {}
    key = cache_key(path)
    if key not in cache:
        print(f"[facts] counting XEvents in {path} (once, cached) ...", flush=True)
        n = count_xevents_jax(path, jax_python) if resolve_executable(jax_python) else None
        how = "jax.profiler.ProfileData"
        if n is None:
            n, how = count_xevents_wire(path), "protobuf-free wire walk"
        cache[key] = {"events": n, "events_from": how}
        workdir.mkdir(parents=True, exist_ok=True)
        cache_file.write_text(json.dumps(cache, indent=1))
    return facts | dict(cache[key])


# --------------------------------------------------------------------------- #
# Benchmark driver and report
# --------------------------------------------------------------------------- #


def bench_file(trace: Path, label: str, tools: list[Tool], repeat: int, workdir: Path,
               timeout_s: float, facts: dict[str, Any]) -> dict[str, Any]:
    print(f"\n== {label}: {trace} ({facts['bytes'] / MB:.1f} MB, {facts['events']:,} XEvents)", flush=True)
    with open(trace, "rb") as f:  # warm the page cache so run 1 is not the only cold one
        while f.read(1 << 24):
            pass
    measured = measure_side_by_side(trace, tools, repeat, workdir, timeout_s, f"xplane-{label}", failure_line)
    samples, errors = measured.samples, measured.errors
    events = facts["events"]
    results: dict[str, Any] = {}
    for tool in tools:
        ss = samples[tool.name]
        if tool.name in errors or not ss:
            results[tool.name] = errors.get(tool.name, {"error": "no runs"})
            continue
        r: dict[str, Any] = summarize(ss)
        wall = r["wall_s"]
        r["events_per_s"] = events / wall if events else None
        r["s_per_m_events"] = wall / (events / 1e6) if events else None
        if any("convert_s" in s.extra for s in ss):
            r["in_process_convert_s"] = median(s.extra["convert_s"] for s in ss)
            r["output_chars"] = ss[-1].extra.get("output_chars")
        for key in ("reported", "files_written_next_to_input"):
            if key in ss[-1].extra:
                r[key] = ss[-1].extra[key]
        results[tool.name] = r

    out: dict[str, Any] = {"label": label, "path": str(trace), **facts, "results": results}
    tk, ref = results.get("tracekit", {}), results.get(REFERENCE_TOOL, {})
    if "wall_s" in tk and "wall_s" in ref:
        out["xprof_over_tracekit_wall"] = ref["wall_s"] / tk["wall_s"]
        out["tracekit_over_xprof_rss"] = tk["peak_rss_mb"] / ref["peak_rss_mb"]
    reported = tk.get("reported", {}).get("n_trace_events")
    if reported is not None and reported != events:
        print(f"  note: tracekit reports n_trace_events={reported:,}; the file has {events:,} XEvents")
    return out


def _short(s: str, n: int = 90) -> str:
    s = s.replace("|", "\\|")
    return s if len(s) <= n else s[: n - 1] + "…"


def render_markdown(files: list[dict[str, Any]]) -> str:
    rows: list[list[str]] = []
    for f in files:
        head = [f["label"], f"{f['bytes'] / MB:.1f}", f"{f['events']:,}"]
        for name, r in f["results"].items():
            if "error" in r:
                why = r["error"].replace(f["path"], "FILE")
                rows.append([*head, name, f"FAILED: {_short(why)}", "", "", "", ""])
                continue
            rows.append([*head, name, f"{r['wall_s']:.2f}", f"{r['peak_rss_mb']:.0f}", f"{r['cpu_s']:.2f}",
                         fmt(r["events_per_s"], ",.0f"), fmt(r["s_per_m_events"], ".2f")])
    lines = markdown_table(
        ["file", "MB", "XEvents", "tool", "wall s", "peak RSS MB", "CPU s", "events/s", "s per M events"], rows,
        [False, True, True, False, True, True, True, True, True])
    verdicts: list[list[str]] = []
    for f in files:
        tk = f["results"].get("tracekit", {})
        spm = tk.get("s_per_m_events")
        if spm is not None:
            verdict = "PASS" if spm <= TARGET_S_PER_M_EVENTS else "FAIL"
            if (f.get("events") or 0) < MIN_EVENTS_FOR_VERDICT:
                verdict = f"n/a (under {MIN_EVENTS_FOR_VERDICT:,} events: the process's fixed cost)"
        else:
            verdict = "tracekit FAILED" if "error" in tk else "n/a"
        verdicts.append([f["label"], fmt(spm, ".2f"), fmt(f.get("xprof_over_tracekit_wall"), ".2f"),
                         fmt(f.get("tracekit_over_xprof_rss"), ".2f"), verdict])
    lines += ["", *markdown_table(
        ["file", f"tracekit s per M events (target <= {TARGET_S_PER_M_EVENTS:.1f})",
         "XProf trace_viewer / tracekit wall", "tracekit / XProf trace_viewer RSS", "verdict"], verdicts,
        [False, True, True, True, False])]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = new_parser(__doc__)
    p.add_argument("--file", action="append", type=Path, default=None,
                   help="xplane.pb to benchmark (repeatable; default: "
                        + ", ".join(str(f) for f in DEFAULT_FILES) + ")")
    p.add_argument("--tracekit-format", default=None, help="pass --format FMT to tracekit ingest")
    p.add_argument("--xprof-python", default=DEFAULT_XPROF_PYTHON,
                   help="python of a venv with xprof installed (default %(default)s)")
    p.add_argument("--jax-python", default=str(REPO_ROOT / ".venv" / "bin" / "python"),
                   help="python used to count XEvents with jax.profiler.ProfileData when jax imports "
                        "there (else a protobuf-free walk; default %(default)s)")
    p.add_argument("--events", type=int, default=None,
                   help="XEvent count to use instead of counting (only with a single --file)")
    p.add_argument("--tools", default=",".join(DEFAULT_TOOLS), help=f"comma list of {','.join(ALL_TOOLS)}")
    p.add_argument("--synthetic", action="store_true",
                   help="benchmark the synthetic streaming files instead (issue 17; made once in --workdir "
                        "by tests/fuzz_xplane.py): 1M host lines of 3 events (77 MB), the same gzipped, "
                        "and one TPU XLA Ops line of 5M events (89 MB); tracekit only")
    add_common_args(p)
    return p.parse_args(argv)


def make_synthetic(workdir: Path) -> list[Path]:
    """The issue 17 streaming files, generated once (bytes streamed to disk, never held)."""
    write_synthetic = tests_module("fuzz_xplane").write_synthetic

    lines, big = workdir / "synthetic_1M_lines.xplane.pb", workdir / "synthetic_5M_events_1_line.xplane.pb"
    gz = workdir / "synthetic_1M_lines.xplane.pb.gz"
    if not lines.exists():
        write_synthetic(lines, n_lines=1_000_000, events_per_line=3)
    if not gz.exists():
        with lines.open("rb") as f, gzip.open(gz, "wb", compresslevel=1) as g:
            while block := f.read(1 << 20):
                g.write(block)
    if not big.exists():
        write_synthetic(big, n_lines=0, big_line_events=5_000_000, device=True)
    return [lines, gz, big]


def make_python_tracer_capture(path: Path) -> None:
    """Make the default big capture (~840k XEvents: JAX on CPU with the Python tracer on) with
    the project's own sample script, as issue 3 asks for the benchmark file."""
    script = REPO_ROOT / "tools" / "make_jax_sample.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    print(f"[big] generating {path} with {script.name} --python-tracer --xla-default-codegen")
    subprocess.run(
        [sys.executable, str(script), "--python-tracer", "--xla-default-codegen", "--output", str(path)],
        check=True,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    workdir: Path = args.workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    if args.synthetic:
        args.file = make_synthetic(workdir)
        args.tools = "tracekit"
    paths: list[Path] = args.file or list(DEFAULT_FILES)
    if not args.file and not DEFAULT_FILES[0].exists():
        make_python_tracer_capture(DEFAULT_FILES[0])
    if args.events is not None and len(paths) != 1:
        print("--events needs exactly one --file", file=sys.stderr)
        return 2

    wanted = parse_tools(args.tools, ALL_TOOLS)
    candidates: dict[str, Tool] = {"tracekit": TracekitXplaneTool(args.tracekit, args.tracekit_format)}
    for name, xprof_tool in XPROF_TOOLS.items():
        candidates[name] = XprofTool(name, xprof_tool, args.xprof_python)
    tools, skipped = select_tools(candidates, wanted)

    files: list[dict[str, Any]] = []
    missing: list[str] = []
    for path in paths:
        if not path.is_file():
            missing.append(str(path))
            print(f"[file] SKIPPED, not found: {path}", flush=True)
            continue
        label = path.name.removesuffix(".gz").removesuffix(".xplane.pb")
        facts = file_facts(path, workdir, args.jax_python, args.events)
        files.append(bench_file(path, label, tools, args.repeat, workdir, args.timeout, facts))
    if not files:
        print("no input file found", file=sys.stderr)
        return 1

    table = render_markdown(files)
    print("\n" + table)
    if skipped:
        print("\nSkipped tools: " + "; ".join(f"{k}: {v}" for k, v in skipped.items()))
    for f in files:
        for name, r in f["results"].items():
            if "error" in r:
                print(f"\nFAILED {name} on {f['label']}: {r['error']}\n  command: {r.get('command', '')}"
                      f"\n  log: {r.get('log', '')}")

    write_report(args.out, {
            "repeat": args.repeat,
            "mb": "10**6 bytes of .xplane.pb; events are XEvents summed over every plane and line",
            "targets": {"tracekit_s_per_m_events_max": TARGET_S_PER_M_EVENTS},
            "reference_tool": REFERENCE_TOOL,
            "versions": {t.name: t.versions() for t in tools},
            "commands": {t.name: (getattr(t, "prefix", None)
                                  or [getattr(t, "python", ""), "-c", "<XPROF_SNIPPET>",
                                      "<copy of FILE>", getattr(t, "xprof_tool", "")])
                         for t in tools},
            "xprof_snippet": XPROF_SNIPPET,
            "skipped_tools": skipped,
            "missing_files": missing,
            "files": files,
            "markdown": table,
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
