"""The team store's read side at fleet scale: the queries of ``check --history``, the weekly page,
the Runs page and one run's page at 10,000 runs, on one DuckDB file and on a lake (PostgreSQL
catalog, local Parquet) before and after compaction (issue 19).

Data. Seed runs are real: the ``../shared`` corpus runs (``tests/corpus_runs.py``; the bundled
samples without it), ingested and analyzed once (metrics and findings stored). ``--runs`` runs
are synthesized from them in SQL, row for row, stored run after run as ingests append them: run
``i`` copies seed ``i mod S`` under a new run id
with one of 20 workloads, label ``main`` or ``pr-N``, a capture time spread over 6 months and its
metric values moved by a deterministic ±2 %. ``host_events`` is left out (at 10,000 runs it would
be ~150M rows; no query measured here reads it), as in ``shared/reference/team-store-and-fleet.md``
§2.5. Every other run table is copied.

Layouts, each read by a fresh connection (open or attach timed apart):

* ``file``: the synthesized runs in one DuckDB store file;
* ``lake, bulk + compacted``: the same rows copied into a lake in one transaction per table and
  then ``tracekit lake compact`` — the steady state of a nightly-compacted lake;
* ``lake, per-run commits`` / ``… after compact``: ``--per-run`` runs committed one transaction
  per run, as ``tracekit ingest`` does (one small data file per run per table: the state before
  the nightly compaction), measured, compacted with ``tracekit lake compact``, measured again.

Queries (median and best of ``--repeat`` after one warm-up, ms), each call as a dashboard page
makes it: on a store file on the open connection with the page's TEMP tables dropped first, on a
lake as one read of the dashboard's reader pool (the lake attached once, a reused cursor, one
transaction; hardware identified once per snapshot):

* ``check --history``: the workload's run list and the metric series ``tracekit check`` reads;
* ``weekly``: the dashboard's weekly trends of a workload (``weekly_trends`` + ``workload_weeks``);
* ``runs page``: the dashboard's Runs page (``runs_table``: run hardware, the total of runs, the
  first page of 50) and ``tracekit runs`` (``RUNS_SQL``, every run);
* ``single run``: one run's top kernels (``top_activity``) and its findings (``run_findings``).

Run it in the lake environment (``tools/test_lake.sh`` makes ``.venv-lake``)::

    .venv-lake/bin/python benchmarks/bench_lake_queries.py --runs 10000 --per-run 1000 --out q.json
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import harness

WORKLOADS = 20
#: Runs synthesized per statement (each statement's rows sorted by run).
CHUNK = 500
#: The run tables the benchmark copies (host_events is left out, see the module docstring).
SKIP_TABLES = ("host_events",)


def _seed_paths(tmp: Path) -> list[Path]:
    try:
        corpus = harness.tests_module("corpus_runs")
    except Exception:  # noqa: BLE001 - no ../shared: the bundled samples
        corpus = None
    if corpus is not None and corpus.CORPUS_RUNS and all(p.exists() for p in corpus.CORPUS_RUNS.values()):
        return [corpus.run_path(label, tmp) for label in corpus.CORPUS_RUNS]
    samples = harness.REPO_ROOT / "sample_traces"
    return sorted(p for p in samples.iterdir() if not p.name.endswith((".md", ".json", ".py")) and p.name != "weekly")


def seed_store(path: Path, tmp: Path) -> int:
    """Ingest and analyze the seed runs into ``path`` (kept between runs of the benchmark)."""
    from tracekit.ingest import ingest
    from tracekit.run_analysis import analyze_runs

    if not path.exists():
        scratch = path.with_suffix(".partial")
        scratch.unlink(missing_ok=True)
        results = ingest(_seed_paths(tmp), scratch, one_run=True)
        analyze_runs([r.run_id for r in results], scratch)
        scratch.rename(path)
    import duckdb

    con = duckdb.connect(str(path), read_only=True)
    try:
        return int(con.execute("SELECT count(*) FROM run_meta").fetchone()[0])  # type: ignore[index]
    finally:
        con.close()


def synthesize(seed: Path, out: Path, n_runs: int) -> dict[str, int]:
    """``n_runs`` runs synthesized from the seed store into the new store file ``out``; rows per table."""
    from tracekit.store import RUN_TABLES, close, connect

    con = connect(out)
    try:
        con.execute(f"ATTACH '{seed}' AS seed (READ_ONLY)")
        con.execute("BEGIN")
        con.execute(f"""CREATE TEMP TABLE gen AS
            WITH s AS (SELECT run_id, row_number() OVER (ORDER BY run_id) - 1 AS k, count(*) OVER () AS n
                       FROM seed.run_meta)
            SELECT printf('synth%05d', i) AS run_id, s.run_id AS seed_run, i,
                   'w' || (i % {WORKLOADS}) AS workload,
                   CASE WHEN i % 4 = 0 THEN 'pr-' || (i // 4) ELSE 'main' END AS label,
                   TIMESTAMP '2026-06-01' + to_microseconds(((i * 182 * 86400 * 1e6) // {n_runs})::BIGINT)
                     AS captured_at
            FROM range({n_runs}) t(i) JOIN s ON s.k = i % s.n""")
        rows = {}
        for table in RUN_TABLES:
            if table in SKIP_TABLES:
                continue
            replace = "g.run_id AS run_id"
            if table == "run_meta":
                replace += (", g.run_id AS content_sha256, g.workload AS workload, g.label AS label, "
                            "g.captured_at AS captured_at")
            elif table == "metric_rows":  # ±2 %, deterministic per (run, metric)
                replace += ", t.value * (0.98 + 0.04 * (hash(g.run_id || t.name) % 1000) / 1000.0) AS value"
            for lo in range(0, n_runs, CHUNK):  # run after run, as ingests append them (row-group locality)
                con.execute(f"INSERT INTO main.{table} BY NAME SELECT t.* REPLACE ({replace}) "
                            f"FROM seed.main.{table} t JOIN gen g ON t.run_id = g.seed_run "
                            f"WHERE g.i >= {lo} AND g.i < {lo + CHUNK} ORDER BY g.i")
            rows[table] = int(con.execute(f"SELECT count(*) FROM main.{table}").fetchone()[0])  # type: ignore[index]
        con.execute("COMMIT")
        con.execute("DETACH seed")
    finally:
        close(con)
    return rows


def _tables(con: Any) -> list[str]:
    from tracekit.store import RUN_TABLES

    return [t for t in RUN_TABLES if t not in SKIP_TABLES]


def lake_bulk(src: Path, url: str) -> float:
    """Copy every run table of the store file ``src`` into the lake, one transaction per table."""
    from tracekit.store import close, connect

    started = time.perf_counter()
    con = connect(url)
    try:
        con.execute(f"ATTACH '{src}' AS src (READ_ONLY)")
        for table in _tables(con):
            con.execute("BEGIN")
            con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM src.main.{table}")
            con.execute("COMMIT")
    finally:
        close(con)
    return time.perf_counter() - started


def lake_per_run(src: Path, url: str, n_runs: int) -> float:
    """Commit the first ``n_runs`` runs of ``src`` to the lake one transaction per run (all its
    tables), as ``tracekit ingest`` does."""
    from tracekit.store import close, connect

    started = time.perf_counter()
    con = connect(url)
    try:
        con.execute(f"ATTACH '{src}' AS src (READ_ONLY)")
        ids = [r[0] for r in con.execute(f"SELECT run_id FROM src.main.run_meta ORDER BY run_id LIMIT {n_runs}")
               .fetchall()]
        tables = _tables(con)
        for run_id in ids:
            con.execute("BEGIN")
            for table in tables:
                con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM src.main.{table} WHERE run_id = ?", [run_id])
            con.execute("COMMIT")
    finally:
        close(con)
    return time.perf_counter() - started


def _timed(fn: Callable[[], object], repeat: int) -> dict[str, float]:
    fn()  # warm-up: the first read of each file
    xs = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        xs.append((time.perf_counter() - started) * 1000)
    return {"median_ms": statistics.median(xs), "best_ms": min(xs)}


def measure(store: str, repeat: int) -> dict[str, Any]:
    """Open ``store`` read-only (timed), then time each query as a page runs it: on a store file,
    on that connection with the TEMP tables a page builds dropped before each call (a page opens
    its own connection); on a lake, each call one read of the dashboard's
    :class:`~tracekit.lake.readers.ReaderPool` (a reused cursor, one transaction, the lake
    attached once)."""
    from tracekit.check import _series
    from tracekit.dashboard.data import run_findings, runs_table, weekly_trends, workload_weeks
    from tracekit.lake.readers import ReaderPool
    from tracekit.lake.url import is_lake
    from tracekit.queries import RUNS_SQL, top_activity
    from tracekit.store import close, connect

    started = time.perf_counter()
    con = connect(store, read_only=True)
    open_ms = (time.perf_counter() - started) * 1000
    pool = ReaderPool() if is_lake(store) else None
    try:
        workload = "w7"
        one = con.execute("SELECT run_id FROM runs WHERE n_device_events > 0 ORDER BY run_id DESC LIMIT 1").fetchone()[0]

        def page(fn: Callable[[Any], object]) -> Callable[[], object]:
            def run() -> object:
                if pool is not None:
                    with pool.read(store) as cur:
                        return fn(cur)
                for (name,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE temporary").fetchall():
                    con.execute(f"DROP TABLE temp.main.{name}")
                return fn(con)
            return run

        def history(c: Any) -> object:
            runs = [r[0] for r in c.execute(
                "SELECT run_id FROM runs WHERE workload = ? ORDER BY captured_at NULLS FIRST, ingested_at, run_id",
                [workload]).fetchall()]
            return _series(c, runs[-200:])  # check's default window

        queries = {
            "check --history": history,
            "weekly": lambda c: (weekly_trends(c, workload), workload_weeks(c, workload)),
            "runs page": lambda c: runs_table(c, limit=50),  # what the page asks for: one page, and the total
            "tracekit runs": lambda c: c.execute(RUNS_SQL).fetchall(),
            "single run": lambda c: (top_activity(one, con=c), run_findings(c, one)),
        }
        out: dict[str, Any] = {"open_ms": open_ms}
        for name, fn in queries.items():
            out[name] = _timed(page(fn), repeat)
        out["data_files"] = _data_files(con)
        return out
    finally:
        if pool is not None:
            pool.close()
        close(con)


def _data_files(con: Any) -> int | None:
    from tracekit.lake.catalog import ALIAS

    try:
        row = con.execute(f"SELECT count(*) FROM ducklake_list_files('{ALIAS}', 'device_activity')").fetchone()
    except Exception:  # noqa: BLE001 - a store file
        return None
    return int(row[0]) if row else None


def _createdb(host: str, port: int, name: str) -> None:
    cmd = ["createdb", "-h", host, "-p", str(port), "-U", "postgres", name]
    if os.geteuid() == 0:
        cmd = ["runuser", "-u", "postgres", "--", *cmd]
    subprocess.run(cmd, check=True, capture_output=True)


def _print(name: str, res: dict[str, Any]) -> None:
    parts = [f"{q} {v['median_ms']:.0f}" for q, v in res.items() if isinstance(v, dict)]
    files = f", {res['data_files']} device_activity files" if res.get("data_files") is not None else ""
    print(f"{name:32} open {res['open_ms']:.0f} ms | " + " | ".join(parts) + f" (median ms){files}", flush=True)


def main() -> None:
    p = harness.new_parser(__doc__)
    p.add_argument("--runs", type=int, default=10_000, help="synthesized runs (default %(default)s)")
    p.add_argument("--per-run", type=int, default=1_000,
                   help="runs committed one transaction each for the before-compaction layout (default %(default)s; 0: skip)")
    p.add_argument("--repeat", type=int, default=5, help="timed repeats per query (default %(default)s)")
    p.add_argument("--seed-store", type=Path, default=harness.DEFAULT_WORKDIR / "lake-seed.duckdb",
                   help="seed runs' store, kept between runs (default %(default)s)")
    p.add_argument("--out", type=Path, default=None, help="write JSON results here")
    args = p.parse_args()
    from tracekit.lake.maintenance import compact_lake, init_lake

    services = harness.tests_module("lake_services")
    report: dict[str, Any] = {"benchmark": "lake-queries", "runs": args.runs, "per_run": args.per_run}
    args.seed_store.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tracekit-bench-lakeq-") as tmp, services.postgres() as (host, port):
        work = Path(tmp)
        report["seed_runs"] = seed_store(args.seed_store, work)
        started = time.perf_counter()
        report["rows"] = synthesize(args.seed_store, work / "file.duckdb", args.runs)
        report["synthesize_s"] = time.perf_counter() - started
        print(f"{args.runs} runs from {report['seed_runs']} seeds in {report['synthesize_s']:.0f} s: {report['rows']}",
              flush=True)
        results: dict[str, Any] = {}
        results["file"] = measure(str(work / "file.duckdb"), args.repeat)
        _print("file", results["file"])
        _createdb(host, port, "bulk")
        bulk = f"lake:postgresql://postgres@{host}:{port}/bulk?data={work / 'bulk'}"
        init_lake(bulk)
        report["bulk_load_s"] = lake_bulk(work / "file.duckdb", bulk)
        compact_lake(bulk)
        results["lake, bulk + compacted"] = measure(bulk, args.repeat)
        _print("lake, bulk + compacted", results["lake, bulk + compacted"])
        if args.per_run:
            _createdb(host, port, "perrun")
            per_run = f"lake:postgresql://postgres@{host}:{port}/perrun?data={work / 'perrun'}"
            init_lake(per_run)
            report["per_run_commit_s"] = lake_per_run(work / "file.duckdb", per_run, args.per_run)
            key = f"lake, {args.per_run} per-run commits"
            results[key] = measure(per_run, args.repeat)
            _print(key, results[key])
            started = time.perf_counter()
            done = compact_lake(per_run)
            report["per_run_compact_s"] = time.perf_counter() - started
            report["per_run_compact_files"] = [done.files_before, done.files_after]
            results[key + " after compact"] = measure(per_run, args.repeat)
            _print(key + " after compact", results[key + " after compact"])
    report["results"] = results
    import duckdb

    report["duckdb"] = str(duckdb.__version__)
    report["loadavg"] = os.getloadavg()
    harness.write_report(args.out, {**harness.report_header(), **report})
    if sys.stdout.isatty():
        print("done")


if __name__ == "__main__":
    main()
