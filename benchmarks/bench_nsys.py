#!/usr/bin/env python3
"""nsys ingest benchmark: ``tracekit ingest`` on a large Nsight Systems SQLite export, next to the
kernel summary ``nsys stats`` would compute from the same file (measured with sqlite3).

What it measures
----------------
Through ``benchmarks/harness.py``, each command a whole process (start-up, imports, reads, store
writes), wall time around spawn .. reap, peak RSS its own ``VmHWM``; the median of ``--repeat``
runs, each tracekit run into a fresh store:

* ``tracekit ingest EXPORT``;
* the anchor, ``kern_sum``: Python's sqlite3 running the query behind ``nsys stats --report
  cuda_gpu_kern_sum`` (per kernel name: count, total, mean, min, max over
  ``CUPTI_ACTIVITY_KIND_KERNEL`` joined to ``StringIds``), the least any reader pays to summarise
  the kernels of the export. ``nsys`` itself is not installed here; where it is, ``nsys stats``
  can be timed by hand on the same file.

The input
---------
No large public nsys export exists (the corpus's largest holds 23,419 kernels), so one is
generated once (cached in ``--workdir``) from the bundled synthetic sample
``sample_traces/nsys_synthetic_tp2_graphs.sqlite`` (2 processes, 172 kernels, 24 copies, 192 API
rows, 164 NVTX ranges): its kernel, copy, runtime, sync and NVTX rows are replicated ``--copies``
times inside SQLite (``INSERT … SELECT`` over a ``generate_series``-style recursive CTE), each
copy shifted by the sample's span in time and by a fixed stride in correlation ids, so launches
still pair 1:1. The default 5,814 copies give 1,000,008 kernels.

How to run
----------
::

    .venv/bin/python benchmarks/bench_nsys.py --repeat 3 --out nsys.json
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import harness

SAMPLE = harness.REPO_ROOT / "sample_traces" / "nsys_synthetic_tp2_graphs.sqlite"
TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
          "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "NVTX_EVENTS")
CORR_STRIDE = 1_000_000

KERN_SUM = """
SELECT s.value, count(*), sum(k."end" - k.start), avg(k."end" - k.start), min(k."end" - k.start),
       max(k."end" - k.start)
FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName GROUP BY 1 ORDER BY 3 DESC"""


def generate(out: Path, copies: int) -> dict[str, int]:
    """The sample's rows replicated ``copies`` times into ``out`` (made once, then reused)."""
    if not out.exists():
        tmp = out.with_suffix(".part")
        shutil.copyfile(SAMPLE, tmp)
        con = sqlite3.connect(tmp)
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        lo, hi = con.execute('SELECT min(start), max(coalesce("end", start)) FROM NVTX_EVENTS').fetchone()
        span = hi - lo + 1_000_000
        for table in TABLES:
            if table not in tables:
                continue
            cols = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]

            def shifted(c: str) -> str:
                if c in ("start", "end"):
                    return f'"{c}" + n.i * {span}'
                if c == "correlationId":
                    return f"CASE WHEN correlationId IS NULL THEN NULL ELSE correlationId + n.i * {CORR_STRIDE} END"
                return f'"{c}"'

            con.execute(f"""INSERT INTO {table} ({", ".join(f'"{c}"' for c in cols)})
                WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {copies - 1})
                SELECT {", ".join(shifted(c) for c in cols)} FROM {table}, n""")
            con.commit()
        con.close()
        tmp.rename(out)
    con = sqlite3.connect(f"file:{out}?mode=ro", uri=True)
    counts = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}
    con.close()
    return counts


def main() -> None:
    p = harness.new_parser(__doc__)
    harness.add_common_args(p, repeat=3)
    p.add_argument("--copies", type=int, default=5_814, help="copies of the sample (default %(default)s)")
    args = p.parse_args()
    exe = args.tracekit or str(Path(sys.executable).parent / "tracekit")
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    export = work / f"nsys_synthetic_x{args.copies}.sqlite"
    counts = generate(export, args.copies)
    rows = sum(counts.values())
    print(f"{export}: {export.stat().st_size / 1e6:.0f} MB, {counts['CUPTI_ACTIVITY_KIND_KERNEL']:,} kernels, "
          f"{rows:,} rows", flush=True)
    log = (work / "nsys-bench.log").open("wb")
    anchor, ours = [], []
    for _ in range(args.repeat):
        anchor.append(harness.run_measured(
            [sys.executable, "-c", ("import sqlite3, sys; con = sqlite3.connect(sys.argv[1]); "
             "print(len(con.execute(sys.argv[2]).fetchall()))"), str(export), KERN_SUM],
            log, args.timeout, vmhwm_dir=work))
        store = work / "nsys-bench.duckdb"
        store.unlink(missing_ok=True)
        s = harness.run_measured([exe, "ingest", str(export), "--store", str(store), "--json"], log, args.timeout,
                                 vmhwm_dir=work, stdout=subprocess.DEVNULL)
        if s.returncode != 0:
            log.flush()
            raise SystemExit(f"tracekit ingest failed:\n{harness.tail(work / 'nsys-bench.log')}")
        s.extra["store_mb"] = store.stat().st_size / 1e6
        ours.append(s)
        store.unlink()
    log.close()
    a, o = harness.summarize(anchor), harness.summarize(ours)
    table = harness.markdown_table(
        ["command", "wall s", "peak RSS MB", "rows/s"],
        [["kern_sum (sqlite3, the nsys stats query)", f"{a['wall_s']:.2f}", f"{a['peak_rss_mb']:.0f}", "—"],
         ["tracekit ingest", f"{o['wall_s']:.2f}", f"{o['peak_rss_mb']:.0f}", f"{rows / o['wall_s']:,.0f}"]],
        [False, True, True, True])
    print("\n".join(table))
    harness.write_report(args.out, {"benchmark": "nsys-ingest", "export_mb": export.stat().st_size / 1e6,
                                    "rows": counts, "kern_sum": a, "tracekit_ingest": o})


if __name__ == "__main__":
    main()
