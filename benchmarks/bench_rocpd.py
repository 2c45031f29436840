#!/usr/bin/env python3
"""rocpd ingest benchmark: ``tracekit ingest`` on a large rocprofv3 rocpd (schema 3) database.

What it measures
----------------
The same way as ``bench_ingest.py``, through ``benchmarks/harness.py``: every
measured command runs as its own whole process (interpreter start-up, imports,
SQLite reads, store writes: everything); the parent records wall time around
spawn .. reap, and reports the median of ``--repeat`` runs, each into a fresh
store (deleted afterwards; its size is reported). Peak RSS is the child's own
``VmHWM`` (Linux ``/proc/self/status``, written as the child leaves, as
``tests/helpers.peak_rss_of_python`` does): ``ru_maxrss`` of a child starts from
the RSS of the process that forked it, so it is only the fallback (no ``/proc``,
a ``--tracekit`` command that is not Python); each run says which it holds.

The input
---------
No large real rocpd database is public, so one is generated once (cached in
``--workdir``, default /tmp/tracekit-bench) from the corpus sample
``rocpd-v3-sample/vllm_mi300x_decode_results.db`` (2,205 dispatches, 85 copies,
290 API/marker regions, 59,808 per-instance counter rows): the sample file is
copied, then its timeline is replicated ``--copies`` times (default 227:
500,535 dispatches; ``bench_analyze.py`` and ``bench_dashboard.py`` use 454,
about a million, through :func:`generate`) inside SQLite
(``INSERT ... SELECT`` into the UUID-suffixed tables, one transaction per
table) with every id space shifted per copy (event ids, internal correlation /
region ids, dispatch ids, copy ids, counter-row ids) and timestamps shifted by
the sample's span plus 1 ms per copy. Kernel dispatches, their events, memory
copies and regions are replicated in every copy; per-instance counter rows
(712 per profiled dispatch) only in every ``--pmc-every``-th copy, so the
counter table stays a realistic size (rocprofv3 collects counters for the few
dispatches its kernel filters select, not for a million). API arguments
(``rocpd_arg``) are not replicated: tracekit does not read them.

The report gives the database size, row counts, wall s, peak RSS MB, records/s
(dispatches + copies + regions per second of whole-process wall time) and
dispatches/s. MB = 10**6 bytes.

How to run
----------
::

    .venv/bin/python benchmarks/bench_rocpd.py --repeat 3 --out rocpd.json

Only the standard library is used (and ``harness.py`` beside this file).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shlex
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from harness import MB, Sample, TracekitTool, median, run_measured, tail
from rocpd_input import DEFAULT_SOURCE, DEFAULT_WORKDIR, INGEST_DISPATCHES, copies_for, generate


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="rocpd database to replicate")
    p.add_argument("--copies", type=int, default=0,
                   help=f"copies of the source timeline (default: enough for {INGEST_DISPATCHES:,} dispatches)")
    p.add_argument("--pmc-every", type=int, default=20,
                   help="replicate the counter rows only in every Nth copy (default %(default)s)")
    p.add_argument("--tracekit", default=None, help="tracekit command (default: .venv/bin/tracekit)")
    p.add_argument("--repeat", type=int, default=3, help="runs; median reported")
    p.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR, help="cache/scratch dir (default %(default)s)")
    p.add_argument("--generate-only", action="store_true", help="only generate the database, then exit")
    p.add_argument("--timeout", type=float, default=3600.0, help="per-run timeout in seconds")
    p.add_argument("--out", type=Path, default=None, help="write JSON results here")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    workdir: Path = args.workdir.resolve()
    db, meta = generate(args.source, workdir, copies_for(args.source, args.copies, INGEST_DISPATCHES), args.pmc_every)
    if args.generate_only:
        return 0
    tool = TracekitTool(args.tracekit)
    ok, why = tool.available()
    if not ok:
        print(why, file=sys.stderr)
        return 2
    rows = meta["rows"]
    records = rows["rocpd_kernel_dispatch"] + rows["rocpd_memory_copy"] + rows["rocpd_region"]
    print(f"\n== {db.name}: {meta['db_bytes'] / MB:.0f} MB, {rows['rocpd_kernel_dispatch']:,} dispatches, "
          f"{rows['rocpd_memory_copy']:,} copies, {rows['rocpd_region']:,} regions, "
          f"{rows['rocpd_pmc_event']:,} counter rows ({meta['dispatches_with_counters']:,} dispatches "
          f"with counters, every {meta['pmc_every']}th copy)", flush=True)
    samples: list[Sample] = []
    log_dir = workdir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    for i in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="tracekit-rocpd-", dir=workdir) as d:
            run_dir = Path(d)
            cmd = tool.command(db, run_dir)
            log_path = log_dir / f"rocpd-big-tracekit-{i}.log"
            with open(log_path, "wb") as log:
                sample = run_measured(cmd, log, args.timeout, vmhwm_dir=run_dir)
            tool.after_run(run_dir, sample)
        if sample.returncode != 0:
            print(f"FAILED (exit {sample.returncode}): {shlex.join(cmd)}\n{tail(log_path)}", file=sys.stderr)
            return 1
        samples.append(sample)
        print(f"  [tracekit] run {i + 1}/{args.repeat}: {sample.wall_s:.2f} s, {sample.rss_mb:.0f} MB peak RSS "
              f"({sample.extra['rss_source']}), "
              f"store {sample.extra.get('store_mb', 0):.0f} MB", flush=True)
    wall = median([s.wall_s for s in samples])
    rss = median([s.rss_mb for s in samples])
    result = {
        "wall_s": wall, "peak_rss_mb": rss, "records_per_s": records / wall,
        "dispatches_per_s": rows["rocpd_kernel_dispatch"] / wall,
        "store_mb": median([s.extra.get("store_mb", 0.0) for s in samples]),
        "cpu_s": median([s.user_s + s.sys_s for s in samples]),
    }
    table = "\n".join([
        "| DB MB | dispatches | copies | regions | counter rows | wall s | peak RSS MB | records/s | dispatches/s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        (
            f"| {meta['db_bytes'] / MB:.0f} | {rows['rocpd_kernel_dispatch']:,} | "
            f"{rows['rocpd_memory_copy']:,} | {rows['rocpd_region']:,} | {rows['rocpd_pmc_event']:,} | "
            f"{wall:.2f} | {rss:.0f} | {result['records_per_s']:,.0f} | {result['dispatches_per_s']:,.0f} |"
        ),
    ])
    print("\n" + table)
    if args.out is not None:
        report = {
            "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "host": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": sys.version.split()[0]},
            "repeat": args.repeat, "command": tool.prefix, "versions": tool.versions(),
            "input": {k: v for k, v in meta.items() if k not in ("params", "key")} | {"path": str(db)},
            "result": result, "runs": [s.__dict__ for s in samples], "markdown": table,
        }
        args.out.write_text(json.dumps(report, indent=1, default=str))
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
