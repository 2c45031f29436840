"""Writing runs into a lake: copy a run from a staged store file in one lake transaction.

A writer ingests (and may analyze) into a private store file first — the same parsers, the same
one-transaction ingest and the same rows as any store — and then :func:`publish_run` copies the
run's rows of every run table into the lake with ``INSERT … BY NAME SELECT *`` in ONE DuckLake
transaction, so a run is in the lake whole or not at all. ``BY NAME`` lets an older writer's rows
land in a lake with newer columns (NULL there). Concurrent commits that DuckLake cannot merge,
and a SQLite catalog that is busy, are retried (:mod:`tracekit.lake.retry`).
"""

from __future__ import annotations

import time
from pathlib import Path

import duckdb

from tracekit.lake.catalog import ALIAS
from tracekit.lake.retry import with_retries
from tracekit.sql_text import quote
from tracekit.store import RUN_TABLES

__all__ = ["STAGE", "attach_stage", "publish_run"]

#: The alias of the staged store file while it is attached to a lake connection.
STAGE = "stage"

def attach_stage(con: duckdb.DuckDBPyConnection, staged: Path) -> None:
    """Attach a staged store file read-only as :data:`STAGE`."""
    con.execute(f"ATTACH {quote(str(staged))} AS {STAGE} (READ_ONLY)")


def publish_run(con: duckdb.DuckDBPyConnection, run_id: str) -> tuple[int, float]:
    """Copy ``run_id`` from the attached stage into the lake in one transaction, retrying
    conflicts (:func:`tracekit.lake.retry.with_retries`); return (rows copied, seconds the successful commit took)."""
    return with_retries(lambda: _copy_once(con, run_id))


def _copy_once(con: duckdb.DuckDBPyConnection, run_id: str) -> tuple[int, float]:
    copied = 0
    con.execute("BEGIN")
    try:
        for table in RUN_TABLES:
            row = con.execute(
                f"INSERT INTO {ALIAS}.main.{table} BY NAME SELECT * FROM {STAGE}.main.{table} WHERE run_id = ?",
                [run_id]).fetchone()
            copied += int(row[0]) if row and row[0] is not None else 0
        started = time.perf_counter()
        con.execute("COMMIT")
        return copied, time.perf_counter() - started
    except BaseException:
        try:
            con.execute("ROLLBACK")
        except duckdb.Error:
            pass  # DuckLake already rolled back a failed commit
        raise
