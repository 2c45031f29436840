"""Read-only queries over a store: the run list, ``tracekit query``'s sandboxed statement, and a
run's top activity. Nothing here writes; every function opens the store read-only (or uses the
connection it is given)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import duckdb

from tracekit.errors import QueryError
from tracekit.sql_text import quote
from tracekit.store import first_line, open_store, resolve_store

#: (column names, rows) of one statement.
Rows = tuple[list[str], list[tuple[Any, ...]]]

RUNS_SQL = """
SELECT r.run_id, r.format, r.vendor, r.device_name, r.label, r.workload, r.n_ranks AS ranks,
       t.n_device_events AS device_events, round(t.device_time_ns / 1e6, 3) AS device_time_ms,
       round(rk.span_ns / 1e6, 3) AS span_ms,
       r.captured_at, r.ingested_at, r.source
FROM runs r
JOIN run_device_totals t USING (run_id)
LEFT JOIN (SELECT run_id, max(last_ns - first_ns) AS span_ns FROM ranks GROUP BY run_id) rk
  USING (run_id)
ORDER BY r.ingested_at DESC, r.run_id
"""
"""The run list (``tracekit runs``): one row per run, its event counts from the per-run rollups
(view ``run_device_totals``), not from the events."""


def list_runs(store: str | Path | None = None) -> Rows:
    """The store's runs with device-event count, summed device time (ms) and longest rank span (ms)."""
    return run_query(RUNS_SQL, store)


#: Statement kinds ``tracekit query`` runs: it reads. Anything else (INSERT, COPY, EXPORT, ATTACH,
#: SET, …) is refused by kind before DuckDB sees it; ``EXPLAIN`` only of a statement of these kinds.
_READS = frozenset({"SELECT", "EXPLAIN", "PRAGMA", "CALL"})


def _refuse_unless_read(con: duckdb.DuckDBPyConnection, statement: Any, path: str | Path) -> None:
    kind = statement.type.name
    if kind == "EXPLAIN":  # EXPLAIN ANALYZE runs its statement: check what it explains
        inner = re.sub(r"(?is)^\s*explain\s+(analy[sz]e\s+)?", "", statement.query)
        inner_statements = con.extract_statements(inner) if inner.strip() else []
        # what cannot be told apart (a comment before EXPLAIN, EXPLAIN of EXPLAIN) is refused
        kind = inner_statements[0].type.name if len(inner_statements) == 1 else "EXPLAIN"
        if kind == "EXPLAIN":
            kind = "EXPLAIN of an unrecognised statement"
    if kind not in _READS:
        raise QueryError(f"{path}: query: the store is read-only here ({kind} is refused); change runs "
                         "with `tracekit update` / `tracekit delete`, or copy rows out with --format csv")


def run_query(sql: str, store: str | Path | None = None) -> Rows:
    """Execute one read-only statement; return (column names, rows).

    The connection is read-only with external access disabled: statements that write, attach
    databases, read or write files are rejected by DuckDB and reported as :class:`QueryError`.
    """
    from tracekit.analysis import library

    path = resolve_store(store)
    with open_store(path, read_only=True) as con:
        library.install(con)
        _register_functions(con)
        try:
            # DuckDB runs every statement of a script and returns the last one's rows: refuse a
            # script instead of silently dropping all but the last result
            statements = con.extract_statements(sql)
            if len(statements) != 1:
                raise QueryError(f"{path}: query: give exactly one SQL statement, got {len(statements)}")
            _refuse_unless_read(con, statements[0], path)
            rel = con.execute(sql)
            columns = [d[0] for d in rel.description] if rel.description else []
            rows = rel.fetchall() if rel.description else []
        except duckdb.OutOfMemoryException as exc:
            limit = os.environ.get("TRACEKIT_MEMORY_LIMIT") or "512MB"
            raise QueryError(f"TRACEKIT_MEMORY_LIMIT: {limit} is too little for this query "
                             f"({first_line(exc)}); raise it, e.g. TRACEKIT_MEMORY_LIMIT=4GB") from None
        except duckdb.Error as exc:
            raise QueryError(f"{path}: query failed: {first_line(exc)}") from None
        except RuntimeError as exc:  # DuckDB's answer to Ctrl-C: "Query interrupted"
            if "interrupt" in str(exc).lower():
                raise KeyboardInterrupt from None
            raise
    return columns, rows


def read_rows(sql: str, store: str | Path | None = None, con: duckdb.DuckDBPyConnection | None = None) -> Rows:
    """(column names, rows) of one read-only statement: on ``con`` when given (an open connection,
    e.g. an ingest's before it commits, or the dashboard's), else through :func:`run_query` on
    ``store`` opened read-only."""
    if con is None:
        return run_query(sql, store)
    rel = con.execute(sql)
    return [d[0] for d in rel.description or []], rel.fetchall()


def _register_functions(con: duckdb.DuckDBPyConnection) -> None:
    """The Python functions ``tracekit query`` offers besides the SQL library:
    ``short_kernel_name(name)`` (:func:`tracekit.names.short_kernel_name`, 60 characters), called
    once per row: group or filter first on large runs."""
    try:
        from duckdb.sqltypes import VARCHAR
    except ImportError:  # DuckDB 1.x
        from duckdb.typing import VARCHAR  # type: ignore[import-not-found,no-redef,unused-ignore]

    from tracekit.names import short_kernel_name

    def short(name: str) -> str:
        return short_kernel_name(name)

    con.create_function("short_kernel_name", short, [VARCHAR], VARCHAR, side_effects=False)


def top_activity(
    run_id: str, store: str | Path | None = None, limit: int = 5, *, con: duckdb.DuckDBPyConnection | None = None
) -> tuple[str, list[str], list[tuple[Any, ...]]]:
    """(title, columns, rows): a run's top device kernels by total time, or its top host ops
    (inclusive time) when the run has no device activity, e.g. a CPU capture. Times in ms.

    ``con``: query this open connection (e.g. an ingest's, before it commits) instead of opening
    ``store`` read-only."""
    columns, rows = read_rows(
        f"""SELECT name, count(*) AS calls, sum(dur_ns) / 1e6 AS total_ms,
                   100 * sum(dur_ns) / sum(sum(dur_ns)) OVER () AS pct
            FROM kernels WHERE run_id = {quote(run_id)}
            GROUP BY name ORDER BY sum(dur_ns) DESC LIMIT {int(limit)}""",
        store, con,
    )
    if rows:
        return "top device kernels by total time", columns, rows
    columns, rows = read_rows(
        f"""SELECT name, count(*) AS calls, sum(dur_ns) / 1e6 AS total_ms
            FROM ops WHERE run_id = {quote(run_id)}
            GROUP BY name ORDER BY sum(dur_ns) DESC LIMIT {int(limit)}""",
        store, con,
    )
    return "no device activity; top host ops by inclusive time", columns, rows
