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
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness import MB, Sample, TracekitTool, cache_key, median, run_measured, tail

DEFAULT_SOURCE = Path("/work/shared/corpus/rocprof/rocpd-v3-sample/vllm_mi300x_decode_results.db")
DEFAULT_WORKDIR = Path("/tmp/tracekit-bench")
GENERATOR_VERSION = 1
TARGET_DISPATCHES = 1_000_000  # the database bench_analyze / bench_dashboard share (454 copies)
#: this benchmark's default: 227 copies of the sample, 500,535 dispatches (the issue-18 RSS budget)
INGEST_DISPATCHES = 500_000
GAP_NS = 1_000_000

#: Per table: which columns hold which id space ("time" = a timestamp).
ID_COLUMNS: dict[str, dict[str, str]] = {
    "rocpd_event": {"id": "event", "stack_id": "stack", "parent_stack_id": "stack"},
    "rocpd_kernel_dispatch": {"id": "dispatch", "dispatch_id": "dispatch", "event_id": "event",
                              "start": "time", "end": "time"},
    "rocpd_memory_copy": {"id": "copy", "event_id": "event", "start": "time", "end": "time"},
    "rocpd_region": {"id": "stack", "event_id": "event", "start": "time", "end": "time"},
    "rocpd_pmc_event": {"id": "pmc", "event_id": "event"},
}


def _tables(con: sqlite3.Connection) -> dict[str, str]:
    """Base name -> the UUID-suffixed physical table."""
    out: dict[str, str] = {}
    names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    for base in ID_COLUMNS:
        hits = [n for n in names if n.startswith(base + "_") and len(n) == len(base) + 37]
        if len(hits) != 1:
            raise SystemExit(f"{base}: expected one UUID-suffixed table, found {hits}")
        out[base] = hits[0]
    return out


def _span(con: sqlite3.Connection, t: dict[str, str]) -> tuple[int, int]:
    lo, hi = con.execute(
        f'''SELECT min(s), max(e) FROM (
              SELECT start s, "end" e FROM "{t['rocpd_kernel_dispatch']}"
              UNION ALL SELECT start, "end" FROM "{t['rocpd_memory_copy']}"
              UNION ALL SELECT start, "end" FROM "{t['rocpd_region']}")'''
    ).fetchone()
    return int(lo), int(hi)


def _id_range(con: sqlite3.Connection, t: dict[str, str], space: str) -> tuple[int, int]:
    parts = [f'SELECT "{c}" v FROM "{t[table]}"' for table, cols in ID_COLUMNS.items()
             for c, s in cols.items() if s == space]
    lo, hi = con.execute(f"SELECT min(v), max(v) FROM ({' UNION ALL '.join(parts)}) WHERE v > 0").fetchone()
    return int(lo), int(hi)


def copies_for(source: Path, copies: int = 0, target: int = TARGET_DISPATCHES) -> int:
    """``copies``, or when ≤ 0 the number of copies of ``source`` that reaches ``target`` dispatches."""
    if copies > 0:
        return copies
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    try:
        n = src.execute(f'SELECT count(*) FROM "{_tables(src)["rocpd_kernel_dispatch"]}"').fetchone()[0]
    finally:
        src.close()
    return -(-target // n)


def cached_meta(store: Path, key: dict[str, Any]) -> dict[str, Any] | None:
    """The metadata saved beside a benchmark's cached ``store`` if it was built for ``key`` (the
    input database's cache key and the versions), else None after removing the stale files."""
    meta_path = store.with_name(store.name + ".meta.json")
    if store.exists() and meta_path.exists():
        meta: dict[str, Any] = json.loads(meta_path.read_text())
        if meta.get("key") == key:
            return meta
    for p in store.parent.glob(store.name + "*"):
        p.unlink()
    return None


def generate(source: Path, workdir: Path, copies: int, pmc_every: int) -> tuple[Path, dict[str, Any]]:
    out = workdir / f"rocpd-big-x{copies}-pmc{pmc_every}_results.db"
    meta_path = out.with_name(out.name + ".meta.json")
    params = {"source": cache_key(source), "copies": copies, "pmc_every": pmc_every,
              "generator": GENERATOR_VERSION}
    if out.exists() and meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta.get("params") == params and meta.get("key") == cache_key(out):
            print(f"[gen] reusing {out} ({meta['db_bytes'] / MB:.0f} MB, {meta['rows']})", flush=True)
            return out, meta

    print(f"[gen] generating {out}: {copies} copies of {source.name}, counters in every "
          f"{pmc_every}th copy ...", flush=True)
    t0 = time.perf_counter()
    workdir.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    shutil.copyfile(source, tmp)
    os.chmod(tmp, 0o644)
    con = sqlite3.connect(tmp, isolation_level=None)
    con.execute("PRAGMA journal_mode = OFF")
    con.execute("PRAGMA synchronous = OFF")
    con.execute("PRAGMA cache_size = -262144")
    t = _tables(con)
    lo, hi = _span(con, t)
    shift_time = hi - lo + GAP_NS
    spaces = {s for cols in ID_COLUMNS.values() for s in cols.values() if s != "time"}
    ranges = {s: _id_range(con, t, s) for s in spaces}
    stride = {s: hi_ - lo_ + 1 for s, (lo_, hi_) in ranges.items()}
    orig_max = {s: hi_ for s, (_, hi_) in ranges.items()}
    for base, id_cols in ID_COLUMNS.items():
        table = t[base]
        cols = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]
        key = next(c for c, s in id_cols.items() if c == "id")
        key_space = id_cols[key]
        n_src = con.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
        ks = [k for k in range(1, copies) if base != "rocpd_pmc_event" or k % pmc_every == 0]
        con.execute("BEGIN")
        for k in ks:
            exprs = []
            for c in cols:
                space = id_cols.get(c)
                if space == "time":
                    exprs.append(f'"{c}" + {k * shift_time}')
                elif space is not None:
                    # 0 / NULL (no parent, no event) stay as they are
                    exprs.append(f'CASE WHEN "{c}" > 0 THEN "{c}" + {k * stride[space]} ELSE "{c}" END')
                else:
                    exprs.append(f'"{c}"')
            con.execute(
                f'INSERT INTO "{table}" ({", ".join(chr(34) + c + chr(34) for c in cols)}) '
                f'SELECT {", ".join(exprs)} FROM "{table}" WHERE "{key}" <= {orig_max[key_space]}'
            )
        con.execute("COMMIT")
        print(f"[gen]   {base}: {n_src:,} rows x {1 + len(ks)} copies", flush=True)
    rows = {base: con.execute(f'SELECT count(*) FROM "{t[base]}"').fetchone()[0] for base in ID_COLUMNS}
    n_counted = con.execute(
        f'SELECT count(DISTINCT event_id) FROM "{t["rocpd_pmc_event"]}"').fetchone()[0]
    con.close()
    os.replace(tmp, out)
    gen_s = time.perf_counter() - t0
    meta = {"params": params, "key": cache_key(out), "source": str(source), "copies": copies,
            "pmc_every": pmc_every, "rows": rows, "dispatches_with_counters": n_counted,
            "db_bytes": out.stat().st_size, "generation_s": round(gen_s, 1)}
    meta_path.write_text(json.dumps(meta, indent=1))
    print(f"[gen] wrote {out}: {meta['db_bytes'] / MB:.0f} MB, {rows} in {gen_s:.1f} s", flush=True)
    return out, meta


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
