#!/usr/bin/env python3
"""The long fuzz run and the decompression bombs of issue 17: the figures docs/security.md records.

Fuzz (``--inputs N``, default 10,000): mutated inputs of every format (bundled samples, plus small
corpus files when ``../shared/corpus`` is present), built by the seeded mutators of
``tests/fuzz_common.py`` and the per-format ones (``tests/fuzz_kineto.py``, ``fuzz_xplane.py``,
``fuzz_amd.py``) when present, each checked in a worker process (``--jobs``) in process (C and
pure-Python paths for Kineto and XPlane) and every ``--cli-every``-th through the real CLI. Prints a
table per format: inputs, accepted, refused (one-line errors), tracebacks, bad exit codes,
multi-line errors, changed stores after a refusal, wrong run counts after an acceptance, C/pure
verdict disagreements (and row-count differences when both accept), crashes (signals), hangs.
Failures go to ``--failures`` (default ``./fuzz-failures``) as reproducers plus ``failures.jsonl``;
the summary (``harness.report_header`` first) to ``--out`` (default ``<failures>/summary.json``).

Bombs (``--bombs``): small gzip files that inflate to ``--bomb-gib`` GiB (default 2), one per
format: a Kineto ``.pt.trace.json.gz`` holding one kernel whose name is the whole size, a Kineto
``.json.gz`` without ``traceEvents`` (one huge array), a rocprofv3 ``_results.json.gz`` of
repeated kernel records, an ``.xplane.pb.gz`` of millions of lines, an ``.rpd.gz`` (the sample
plus zero pages). Each runs as ``tracekit ingest BOMB --store <new store>`` in its own process,
measured by ``harness.run_measured`` (``--repeat`` times, medians reported): wall time and the
child's own peak RSS (``VmHWM``); the harness kills it past ``--rss-cap-mb`` (default 3000) or
``--time-cap-s`` (default 120) — a failure. A bomb passes when it is refused in one line (exit 2)
or accepted (exit 0) within the caps.

Usage::

    .venv/bin/python benchmarks/bench_fuzz.py --inputs 10000 --jobs 2 --bombs
    .venv/bin/python benchmarks/bench_fuzz.py --inputs 0 --bombs --bomb-gib 0.5
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness import add_common_args, new_parser, report_header, run_measured, tests_module

fc = tests_module("fuzz_common")
_varint = tests_module("fuzz_xplane").varint

GIB = 1 << 30
CHUNK = 1 << 20


# ---------------------------------------------------------------------------------------------
# Bombs: streamed through zlib, never held in memory


def _write_gz(path: Path, parts: Iterator[bytes]) -> int:
    """gzip ``parts`` into ``path`` (level 9: the best ratio); returns the uncompressed size."""
    total = 0
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0) as g:
        for p in parts:
            g.write(p)
            total += len(p)
    return total


def _repeat(unit: bytes, size: int) -> Iterator[bytes]:
    """Whole copies of ``unit`` adding up to about ``size`` bytes, in ~1 MiB blocks."""
    per_block = max(1, CHUNK // len(unit))
    left = max(1, size // len(unit))
    block = unit * per_block
    while left > 0:
        k = min(left, per_block)
        yield block if k == per_block else unit * k
        left -= k


def bomb_kineto_long_name(path: Path, size: int) -> int:
    head = b'{"schemaVersion":1,"traceEvents":[{"ph":"X","cat":"kernel","pid":0,"tid":7,"ts":1,"dur":2,"name":"'
    tail = b'"}]}'
    return _write_gz(path, iter([head, *_repeat(b"A", size), tail]))


def bomb_kineto_no_events(path: Path, size: int) -> int:
    head = b'{"schemaVersion":1,"deviceProperties":[],"distributedInfo":{"rank":0},"padding":['
    return _write_gz(path, iter([head, b"0", *_repeat(b",0", size), b"]}"]))


def bomb_rocprofv3_json(path: Path, size: int) -> int:
    doc = json.loads((fc.SAMPLES / "amd_synthetic_results.json").read_bytes())
    tool = doc["rocprofiler-sdk-tool"][0]
    record = json.dumps(tool["buffer_records"]["kernel_dispatch"][0], separators=(",", ":")).encode()
    tool["buffer_records"]["kernel_dispatch"] = ["@@RECORDS@@"]
    text = json.dumps(doc, separators=(",", ":")).encode()
    head, tail = text.split(b'"@@RECORDS@@"')
    return _write_gz(path, iter([head, record, *_repeat(b"," + record, size), tail]))


def bomb_xplane(path: Path, size: int) -> int:
    """One ``/host:CPU`` plane of identical lines with three events each (~30 bytes a line on the
    wire, so ``size`` makes tens of millions of lines; identical lines compress ~1000:1)."""
    from tracekit.parsers.proto import xplane_pb2  # type: ignore[attr-defined]

    line = xplane_pb2.XLine(id=1, name="thread", timestamp_ns=1000)
    for i in range(3):
        line.events.add(metadata_id=1, offset_ps=1000 * i, duration_ps=500)
    one = line.SerializeToString()
    field = bytes([3 << 3 | 2]) + _varint(len(one)) + one
    n = max(1, size // len(field))
    meta = xplane_pb2.XPlane(id=1, name="/host:CPU")
    meta.event_metadata[1].id = 1
    meta.event_metadata[1].name = "op"
    plane_body_head = meta.SerializeToString()
    plane_len = len(plane_body_head) + n * len(field)
    head = bytes([1 << 3 | 2]) + _varint(plane_len) + plane_body_head
    return _write_gz(path, iter([head, *_repeat(field, n * len(field))]))


def bomb_rpd(path: Path, size: int) -> int:
    data = (fc.SAMPLES / "amd_synthetic.rpd").read_bytes()
    return _write_gz(path, iter([data, *_repeat(bytes(65536), size)]))


BOMBS = {
    "kineto-2GiB-kernel-name.pt.trace.json.gz": bomb_kineto_long_name,
    "kineto-no-traceEvents.pt.trace.json.gz": bomb_kineto_no_events,
    "rocprofv3-records_results.json.gz": bomb_rocprofv3_json,
    "xplane-many-lines.xplane.pb.gz": bomb_xplane,
    "rpd-zero-pages.rpd.gz": bomb_rpd,
}


def run_bomb(path: Path, work: Path, repeat: int, rss_cap_mb: float, time_cap_s: float) -> dict[str, Any]:
    """``tracekit ingest PATH`` into a new store, ``repeat`` times: exit code, verdict, median wall s
    and peak RSS MB (``VmHWM``), and whether it passed (see the module docstring)."""
    runs = []
    for i in range(repeat):
        run_dir = work / f"run{i}"
        run_dir.mkdir()
        log_path = run_dir / "stderr.log"
        with open(log_path, "wb") as log:
            sample = run_measured(fc.cli_command("ingest", str(path), "--store", str(run_dir / "store.duckdb")),
                                  log, time_cap_s, vmhwm_dir=run_dir, rss_cap_mb=rss_cap_mb, stdout=subprocess.DEVNULL)
        sample.extra["stderr"] = log_path.read_text(errors="replace")
        shutil.rmtree(run_dir, ignore_errors=True)
        runs.append(sample)
        if sample.extra.get("killed"):
            break
    last = runs[-1]
    lines = last.extra["stderr"].strip().splitlines()
    killed = last.extra.get("killed", "")
    if killed:
        verdict = f"KILLED ({killed})"
    elif last.returncode == 2:
        verdict = "refused: " + (lines[0] if lines else "")
    elif last.returncode == 0:
        verdict = "accepted"
    else:
        verdict = f"exit {last.returncode}: {lines[-1] if lines else ''}"
    one_line = last.returncode != 2 or (len(lines) == 1 and lines[0].startswith("error:"))
    ok = (not killed and all(r.returncode == last.returncode for r in runs) and last.returncode in (0, 2)
          and "Traceback" not in last.extra["stderr"] and one_line)
    return {"rc": last.returncode, "stderr": last.extra["stderr"], "verdict": verdict, "killed": killed,
            "peak_rss_mb": round(statistics.median(r.rss_mb for r in runs), 1),
            "rss_source": last.extra.get("rss_source"), "seconds": round(statistics.median(r.wall_s for r in runs), 2),
            "runs": len(runs), "ok": ok}


def run_bombs(work: Path, size: int, repeat: int, rss_cap_mb: float, time_cap_s: float) -> list[dict[str, Any]]:
    base = run_bomb(fc.SAMPLES / "amd_synthetic.rpd", work, repeat, rss_cap_mb, time_cap_s)
    rows = [{"bomb": "(baseline: the 64 KB sample .rpd)", "file_mb": 0.06, "inflated_mb": 0.06, **base}]
    for name, build in BOMBS.items():
        path = work / name
        t0 = time.monotonic()
        inflated = build(path, size)
        built_s = time.monotonic() - t0
        r = run_bomb(path, work, repeat, rss_cap_mb, time_cap_s)
        rows.append({"bomb": name, "file_mb": round(path.stat().st_size / 1e6, 2),
                     "inflated_mb": round(inflated / 1e6, 1), "build_s": round(built_s, 1), **r})
        path.unlink(missing_ok=True)
        print(f"  {name}: {r['verdict'][:150]} | peak RSS {r['peak_rss_mb']} MB | {r['seconds']} s", flush=True)
    return rows


def bombs_table(rows: list[dict[str, Any]]) -> str:
    head = f"{'bomb':<42} {'file MB':>8} {'inflated MB':>12} {'peak RSS MB':>12} {'seconds':>8}  verdict"
    out = [head, "-" * len(head)]
    for r in rows:
        out.append(f"{r['bomb'][:42]:<42} {r['file_mb']:>8} {r['inflated_mb']:>12} {r['peak_rss_mb']:>12} "
                   f"{r['seconds']:>8}  {'' if r['ok'] else 'FAIL '}{r['verdict'][:110]}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = new_parser(__doc__)
    ap.add_argument("--inputs", type=int, default=10_000, help="mutated inputs in all (0: no fuzz run)")
    ap.add_argument("--seed", type=int, default=0, help="master seed: the same seed makes the same inputs")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="worker processes")
    ap.add_argument("--failures", type=Path, default=Path("fuzz-failures"), help="folder for reproducers")
    ap.add_argument("--cli-every", type=int, default=25, help="every N-th case of a task also through the CLI")
    ap.add_argument("--no-corpus", action="store_true", help="bundled samples only")
    ap.add_argument("--no-pure", action="store_true", help="skip the pure-Python comparison")
    ap.add_argument("--case-timeout", type=float, default=300.0, help="seconds before a case counts as a hang")
    ap.add_argument("--max-minutes", type=float, default=0.0,
                    help="start no new chunk of inputs after this long (0: no limit); the table says so")
    ap.add_argument("--bombs", action="store_true", help="also build and run the decompression bombs")
    ap.add_argument("--bomb-gib", type=float, default=2.0, help="inflated size of each bomb (GiB)")
    ap.add_argument("--rss-cap-mb", type=float, default=3000.0, help="kill a bomb's ingest above this RSS")
    ap.add_argument("--time-cap-s", type=float, default=120.0, help="kill a bomb's ingest after this long")
    add_common_args(ap, repeat=1, tracekit=False, workdir=False, timeout=False)
    a = ap.parse_args(argv)
    a.failures.mkdir(parents=True, exist_ok=True)
    summary_path = a.out or a.failures / "summary.json"
    result: dict[str, Any] = {"inputs": a.inputs, "seed": a.seed, "jobs": a.jobs}
    failed = False
    if a.inputs > 0:
        seeds = fc.bundled_seeds() + ([] if a.no_corpus else fc.corpus_seeds())
        sources = {fmt: fc.available_sources(fmt) for fmt in fc.FORMATS}
        print(f"fuzz: {a.inputs} inputs, {len(seeds)} seeds, mutators {sources}, {a.jobs} jobs", flush=True)
        done = [0]
        t0 = time.monotonic()

        def progress(rec: dict[str, Any]) -> None:
            done[0] += 1
            if done[0] % 500 == 0:
                print(f"  {done[0]} inputs, {time.monotonic() - t0:.0f} s", flush=True)

        s = fc.run_fuzz(a.inputs, master_seed=a.seed, jobs=a.jobs, out_dir=a.failures, seeds=seeds, cli_every=a.cli_every,
                        dual=not a.no_pure, case_timeout_s=a.case_timeout, on_case=progress,
                        budget_s=a.max_minutes * 60)
        print(fc.format_table(s))
        n_done = s.totals().get("inputs", 0)
        print(f"{n_done} of {a.inputs} inputs in {s.seconds:.0f} s"
              + (f" (stopped at the {a.max_minutes:g}-minute budget)" if s.stopped_early else ""))
        hard = s.hard_failures()
        if hard:
            print(f"\n{len(hard)} failures:\n" + fc.describe_failures(hard, limit=60))
            failed = True
        result["fuzz"] = s.as_dict()
        result["mutators"] = sources
    if a.bombs:
        print(f"\nbombs: {a.bomb_gib} GiB each, caps {a.rss_cap_mb:.0f} MB / {a.time_cap_s:.0f} s", flush=True)
        work = Path(tempfile.mkdtemp(prefix="tracekit-bombs-"))
        try:
            rows = run_bombs(work, int(a.bomb_gib * GIB), a.repeat, a.rss_cap_mb, a.time_cap_s)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        print(bombs_table(rows))
        result["bombs"] = rows
        failed = failed or not all(r["ok"] for r in rows)
    summary_path.write_text(json.dumps(report_header() | result, indent=1, default=str))
    print(f"summary: {summary_path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
