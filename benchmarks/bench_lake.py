"""Lake commits under concurrent writers: runs committed per second and commit latency (issue 19).

Starts a throw-away PostgreSQL (and, with ``--s3``, moto's S3 server) on 127.0.0.1, creates one
lake per configuration, and runs W writer processes at once, each ingesting its own R runs (real
CPU traces, byte-distinct gzip copies of the bundled sample, one ``ingest`` per run as CI runners
do) and then all of them the same extra trace. Reports, per configuration: runs committed,
failed commits, wall time, committed runs/s, p50/p99 of the commit itself (DuckLake's COMMIT of
one run's rows) and of a whole run's ingest (connect, claim, stage, publish), and whether every
run is present exactly once and the shared trace once.

Run it in the lake environment (``tools/test_lake.sh`` makes it)::

    .venv-lake/bin/python benchmarks/bench_lake.py --writers 2,4 --runs 40 --s3 --out lake.json
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import harness


def _writer(url: str, paths: list[str], env: dict[str, str]) -> dict[str, Any]:
    """One writer process: ingest each path as its own command; the commit and run times, s."""
    os.environ.update(env)
    from tracekit.ingest_lake import ingest_into_lake
    from tracekit.lake import publish

    commits: list[float] = []
    original = publish.publish_run

    def timed(con: Any, run_id: str) -> tuple[int, float]:
        rows, commit_s = original(con, run_id)
        commits.append(commit_s)
        return rows, commit_s

    publish.publish_run = timed  # type: ignore[assignment]
    runs: list[float] = []
    failed = 0
    for path in paths:
        started = time.perf_counter()
        try:
            ingest_into_lake([path], url)
        except Exception:  # noqa: BLE001 - a failed commit is what this counts
            failed += 1
        runs.append(time.perf_counter() - started)
    return {"commits": commits, "runs": runs, "failed": failed}


def _quantile(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def _count(url: str, env: dict[str, str]) -> tuple[int, int]:
    os.environ.update(env)
    from tracekit.store import close, connect

    con = connect(url, read_only=True)
    try:
        row = con.execute("SELECT count(*), count(DISTINCT run_id) FROM run_meta").fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)
    finally:
        close(con)


def _createdb(host: str, port: int, name: str) -> None:
    cmd = ["createdb", "-h", host, "-p", str(port), "-U", "postgres", name]
    if os.geteuid() == 0:
        cmd = ["runuser", "-u", "postgres", "--", *cmd]
    subprocess.run(cmd, check=True, capture_output=True)


def one_config(pg: tuple[str, int], data: str, env: dict[str, str], writers: int, runs: int,
               work: Path, name: str) -> dict[str, Any]:
    host, port = pg
    _createdb(host, port, name)
    url = f"lake:postgresql://postgres@{host}:{port}/{name}?data={data}"
    os.environ.update(env)
    from tracekit.lake.maintenance import init_lake

    init_lake(url)
    services = harness.tests_module("helpers")
    copies = [str(p) for p in services.distinct_copies(work, writers * runs + 1, stem=name)]
    shared, own = copies[0], copies[1:]
    batches = [[*own[i * runs:(i + 1) * runs], shared] for i in range(writers)]
    context = multiprocessing.get_context("spawn")
    started = time.perf_counter()
    with context.Pool(writers) as pool:
        outs = pool.starmap(_writer, [(url, batch, env) for batch in batches])
    wall = time.perf_counter() - started
    commits = [c for o in outs for c in o["commits"]]
    run_times = [r for o in outs for r in o["runs"]]
    n_rows, n_distinct = _count(url, env)
    expected = writers * runs + 1
    return {
        "catalog": "postgresql", "data": "s3" if data.startswith("s3://") else "local", "writers": writers,
        "runs_each": runs, "committed": len(commits), "failed": sum(o["failed"] for o in outs),
        "wall_s": wall, "runs_per_s": len(commits) / wall if wall else None,
        "commit_p50_s": _quantile(commits, 0.5), "commit_p99_s": _quantile(commits, 0.99),
        "run_p50_s": _quantile(run_times, 0.5), "run_p99_s": _quantile(run_times, 0.99),
        "run_meta_rows": n_rows, "distinct_runs": n_distinct, "expected_runs": expected,
        "exactly_once": n_rows == n_distinct == expected,
    }


def main() -> None:
    p = harness.new_parser(__doc__)
    p.add_argument("--writers", default="2,4", help="writer process counts (default %(default)s)")
    p.add_argument("--runs", type=int, default=40, help="runs per writer (default %(default)s)")
    p.add_argument("--s3", action="store_true", help="also with the data on a local S3 server (moto)")
    p.add_argument("--out", type=Path, default=None, help="write JSON results here")
    args = p.parse_args()
    services = harness.tests_module("lake_services")
    results = []
    with tempfile.TemporaryDirectory(prefix="tracekit-bench-lake-") as tmp, services.postgres() as pg:
        work = Path(tmp)
        with contextlib.ExitStack() as stack:
            targets: list[tuple[str, dict[str, str]]] = [("local", {})]
            if args.s3:
                targets.append(("s3", stack.enter_context(services.s3("lake"))))
            for where, env in targets:
                for w in (int(x) for x in args.writers.split(",")):
                    name = f"lake_{where}_{w}"
                    data = f"s3://lake/{name}/" if where == "s3" else str(work / name)
                    res = one_config(pg, data, env, w, args.runs, work, name)
                    results.append(res)
                    print(f"{where:5} {w} writers x {args.runs}: {res['committed']} committed, {res['failed']} failed, "
                          f"{res['runs_per_s']:.2f} runs/s, commit p50 {res['commit_p50_s']:.3f} s "
                          f"p99 {res['commit_p99_s']:.3f} s, exactly once: {res['exactly_once']}", flush=True)
    rows = [[r["data"], str(r["writers"]), str(r["committed"]), str(r["failed"]), harness.fmt(r["runs_per_s"], ".2f"),
             harness.fmt(r["commit_p50_s"], ".3f"), harness.fmt(r["commit_p99_s"], ".3f"),
             harness.fmt(r["run_p50_s"], ".2f"), "yes" if r["exactly_once"] else "NO"] for r in results]
    print("\n".join(harness.markdown_table(
        ["data", "writers", "committed", "failed", "runs/s", "commit p50 s", "commit p99 s", "run p50 s",
         "each run once"], rows, [False, True, True, True, True, True, True, True, False])))
    harness.write_report(args.out, {"benchmark": "lake", "duckdb": _duckdb_version(),
                                    "results": results})
    if not all(r["exactly_once"] and r["failed"] == 0 for r in results):
        sys.exit(1)


def _duckdb_version() -> str:
    import duckdb

    return str(duckdb.__version__)


if __name__ == "__main__":
    main()
