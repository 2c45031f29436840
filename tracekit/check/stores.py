"""Candidates from one store, baselines from another (``tracekit check --baseline-store``).

A PR job keeps its candidate runs in a local store file and reads main's baselines from the team
lake without writing to it. :func:`paired` opens one in-memory DuckDB connection with both stores
attached ``READ_ONLY`` and, in the connection's own in-memory database, every base table as a view
over the candidate store's rows of the candidate runs plus the baseline store's rows of the
baseline runs (``UNION ALL BY NAME``: a store of an older schema reads NULL in newer columns), with
the public views (``views.sql``) over those. Every query of the check — metric series, devices,
``compare_runs`` between a baseline and a candidate run, findings — then runs unchanged on that
one connection, and reads only the runs compared.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import duckdb

from tracekit import schema
from tracekit.errors import StoreError, TraceInputError
from tracekit.lake import catalog
from tracekit.lake.url import parse_lake_url
from tracekit.limits import memory_limit_setting, temp_dir
from tracekit.sql_text import quote
from tracekit.store import RUN_TABLES, StoreLocation, close, first_line, no_progress_bar

__all__ = ["paired", "separate"]

#: The names a store file is attached under (a lake is attached as :data:`tracekit.lake.catalog.ALIAS`).
_FILE_ALIASES = {"candidates": "tk_candidates", "baselines": "tk_baselines"}


def _same(a: StoreLocation, b: StoreLocation) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return str(a) == str(b)
    return a.resolve() == b.resolve()


def separate(store: StoreLocation, baseline_store: StoreLocation | None) -> StoreLocation | None:
    """The baseline store when it is not ``store`` itself (None: one store holds both sides).
    Two different lakes are refused (:class:`TraceInputError`): one connection attaches one lake."""
    if baseline_store is None or _same(store, baseline_store):
        return None
    if isinstance(store, str) and isinstance(baseline_store, str):
        raise TraceInputError(baseline_store, "--store and --baseline-store are two different lakes; "
                              "give at most one lake (the candidates' store is usually a local file)")
    return baseline_store


def _attach(con: duckdb.DuckDBPyConnection, store: StoreLocation, side: str) -> str:
    """Attach ``store`` read-only to ``con``; return the database name it is attached under."""
    if isinstance(store, str):
        catalog.attach(con, parse_lake_url(store), read_only=True)  # also makes it the default database
        return catalog.ALIAS
    alias = _FILE_ALIASES[side]
    try:
        con.execute(f"ATTACH {quote(str(store))} AS {alias} (READ_ONLY)")
    except duckdb.Error as exc:
        raise StoreError(store, f"cannot use the store: {first_line(exc)}") from None
    return alias


def _rows_of(database: str, table: str, runs: list[str]) -> str:
    ids = ", ".join(map(quote, runs)) or "NULL"
    return f"SELECT * FROM {database}.main.{table} WHERE run_id IN ({ids})"


@contextmanager
def paired(store: StoreLocation, candidates: list[str], baseline_store: StoreLocation,
           baselines: list[str]) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-only view of ``candidates`` in ``store`` and ``baselines`` in ``baseline_store`` as
    one store (see the module docstring). Both stores must have been opened once with
    :func:`tracekit.store.open_store` (which checks that they are tracekit stores)."""
    with tempfile.TemporaryDirectory(prefix=f"tracekit-check-{os.getpid()}-", dir=temp_dir()) as spill:
        con = duckdb.connect(":memory:", config={"threads": max(1, os.cpu_count() or 1),
                                                 "memory_limit": memory_limit_setting(), "temp_directory": spill})
        try:
            no_progress_bar(con)
            cand_db = _attach(con, store, "candidates")
            base_db = _attach(con, baseline_store, "baselines")
            con.execute("USE memory")
            for table in RUN_TABLES:
                con.execute(f"CREATE VIEW {table} AS {_rows_of(cand_db, table, candidates)} "
                            f"UNION ALL BY NAME {_rows_of(base_db, table, baselines)}")
            con.execute(schema.views_sql())
            yield con
        finally:
            close(con)

