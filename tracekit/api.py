"""Read-side Python API used by the CLI (and by users): listing runs and read-only queries."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import duckdb

from tracekit.errors import QueryError
from tracekit.store import default_store_path, open_store

Rows = tuple[list[str], list[tuple[Any, ...]]]

RUNS_SQL = """
SELECT r.run_id, r.format, r.vendor, r.device_name, r.label, r.workload, r.n_ranks AS ranks,
       coalesce(k.n, 0) AS device_events,
       round(coalesce(k.busy_ns, 0) / 1e6, 3) AS device_time_ms,
       round(rk.span_ns / 1e6, 3) AS span_ms,
       r.captured_at, r.ingested_at, r.source
FROM runs r
LEFT JOIN (SELECT run_id, count(*) AS n, sum(dur_ns) AS busy_ns FROM kernels GROUP BY run_id) k
  USING (run_id)
LEFT JOIN (SELECT run_id, max(last_ns - first_ns) AS span_ns FROM ranks GROUP BY run_id) rk
  USING (run_id)
ORDER BY r.ingested_at DESC, r.run_id
"""


def list_runs(store: str | Path | None = None) -> Rows:
    """The store's runs with device-event count, summed device time (ms) and longest rank span (ms)."""
    return run_query(RUNS_SQL, store)


def run_query(sql: str, store: str | Path | None = None) -> Rows:
    """Execute one read-only statement; return (column names, rows).

    The connection is read-only with external access disabled: statements that write, attach
    databases, read or write files are rejected by DuckDB and reported as :class:`QueryError`.
    """
    path = Path(store) if store is not None else default_store_path()
    with open_store(path, read_only=True) as con:
        try:
            rel = con.execute(sql)
            columns = [d[0] for d in rel.description] if rel.description else []
            rows = rel.fetchall() if rel.description else []
        except duckdb.Error as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise QueryError(f"{path}: query failed: {first}") from None
    return columns, rows


def top_activity(run_id: str, store: str | Path | None = None, limit: int = 5) -> tuple[str, list[str], list[tuple[Any, ...]]]:
    """(title, columns, rows): a run's top device kernels by total time, or its top host ops
    (inclusive time) when the run has no device activity, e.g. a CPU capture. Times in ms."""
    columns, rows = run_query(
        f"""SELECT name, count(*) AS calls, round(sum(dur_ns) / 1e6, 3) AS total_ms,
                   round(100 * sum(dur_ns) / sum(sum(dur_ns)) OVER (), 1) AS pct
            FROM kernels WHERE run_id = {_quote(run_id)}
            GROUP BY name ORDER BY sum(dur_ns) DESC LIMIT {int(limit)}""",
        store,
    )
    if rows:
        return "top device kernels by total time", columns, rows
    columns, rows = run_query(
        f"""SELECT name, count(*) AS calls, round(sum(dur_ns) / 1e6, 3) AS total_ms
            FROM ops WHERE run_id = {_quote(run_id)}
            GROUP BY name ORDER BY sum(dur_ns) DESC LIMIT {int(limit)}""",
        store,
    )
    return "no device activity; top host ops by inclusive time", columns, rows


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def analyze_runs(
    run_ids: list[str], store: str | Path | None = None, *, only_new: bool = False
) -> list[dict[str, Any]]:
    """Run every registered analyzer on the runs (all runs without findings when ``only_new``
    and no ids are given), store the results, and return them as plain dicts."""
    from tracekit.analysis import analyze_run
    from tracekit.errors import TraceInputError

    path = Path(store) if store is not None else default_store_path()
    with open_store(path) as con:
        known = {r[0] for r in con.execute("SELECT run_id FROM runs").fetchall()}
        if not run_ids:
            done = {r[0] for r in con.execute("SELECT DISTINCT run_id FROM metric_rows").fetchall()}
            run_ids = sorted(known - done) if only_new else sorted(known)
        for rid in run_ids:
            if rid not in known:
                raise TraceInputError(path, f"no run {rid!r} in the store (see `tracekit runs`)")
        out = []
        # The writer connection runs DuckDB on one thread (cheap ingest, see store.connect); the
        # analyzers' sorts and joins over 1M-row runs use every core (benchmarks/bench_analyze.py),
        # still on this connection, so writes stay serialized by the store lock.
        threads = int(con.execute("SELECT current_setting('threads')").fetchall()[0][0])
        con.execute(f"SET threads = {max(1, os.cpu_count() or 1)}")
        try:
            for rid in run_ids:
                results = analyze_run(con, rid)
                out.append(
                    {
                        "run_id": rid,
                        "findings": [
                            {"analyzer": name, **f.__dict__} for name, r in results.items() for f in r.findings
                        ],
                        "metrics": [
                            {"analyzer": name, **m.__dict__} for name, r in results.items() for m in r.metrics
                        ],
                    }
                )
        finally:
            con.execute(f"SET threads = {threads}")
    return out
