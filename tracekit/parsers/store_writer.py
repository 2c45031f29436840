"""How every parser hands a batch of columns to the store: one INSERT path, one error mapping.

:func:`insert_batch` runs ``INSERT INTO <table> BY NAME <select>`` where ``select`` reads the
batch as the table ``batch`` (default: ``SELECT * FROM batch``, the batch's columns named as the
table's). The target columns are the names the SELECT gives (``expr AS column``), so no parser
repeats a table's column list, and a SELECT that converts values keeps that conversion in SQL.

The batch reaches DuckDB through a *replacement scan* of a local variable of this module's
frame, never through ``con.register``: a registered object is a catalog entry, and a dropped
entry stays alive until the transaction ends, so an ingest that registered each batch held every
batch of the trace until COMMIT (``benchmarks/bench_rocpd.py``, 500,535 dispatches: 351 MB peak
RSS that way, 252 MB this way with smaller SQLite fetches, same rows). Here the batch is released
as soon as its INSERT returns.

A batch is anything DuckDB scans: a mapping of column name to NumPy array, a Pandas frame, an
Arrow table, or an object with ``__arrow_c_stream__`` (the native Kineto scanner's).

Errors: a value DuckDB cannot convert or store (conversion, invalid input, out of range,
constraint) is the input's fault and becomes ``TraceInputError(source, "<what>: <reason>")``, one
line; anything else (out of memory, disk, a bug) propagates unchanged, so the ingest maps the
memory limit to its ``TRACEKIT_MEMORY_LIMIT`` ConfigError as for every other statement.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracekit.errors import ConfigError, TraceInputError

if TYPE_CHECKING:  # DuckDB is imported on first use: the CLI starts reading a trace before that
    import duckdb

#: The table name under which the SELECT given to :func:`insert_batch` reads the batch.
BATCH = "batch"


def input_errors() -> tuple[type[Exception], ...]:
    """The DuckDB errors that a value of the input causes: conversion, invalid input, out of
    range, constraint (a NULL or duplicate where the table allows none)."""
    import duckdb

    return (duckdb.ConversionException, duckdb.InvalidInputException, duckdb.OutOfRangeException,
            duckdb.ConstraintException)


def used_params(sql: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
    """The entries of ``params`` that ``sql`` names as ``$name`` (DuckDB refuses unused ones)."""
    if not params:
        return {}
    return {k: v for k, v in params.items() if re.search(rf"\${re.escape(k)}\b", sql)}


def duckdb_reason(exc: BaseException) -> str:
    """DuckDB's first error line, without a scratch file's name, chunk-local record position or
    the ``Invalid Input Error:`` prefix."""
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    line = re.sub(r' in file "[^"]*"', "", line)
    line = re.sub(r", in record/value \d+", "", line)
    return line.replace("Invalid Input Error: ", "")


def insert_batch(
    con: duckdb.DuckDBPyConnection,
    table: str,
    batch: Any = None,
    *,
    select: str | None = None,
    params: Mapping[str, Any] | None = None,
    source: Path | str,
    what: str = "bad value in the trace",
    reason: Callable[[BaseException], str] = duckdb_reason,
) -> int:
    """Insert ``batch`` into ``table`` by column name; return the number of rows inserted.

    ``select`` is the SELECT that reads the batch as table ``batch`` and names each result
    column as the ``table`` column it fills (default ``SELECT * FROM batch``); it may join the
    connection's tables and name parameters ``$name`` from ``params`` (those it does not name
    are left out). ``batch`` may be None when ``select`` reads from elsewhere (``read_json``).
    A value of the input that DuckDB cannot store raises ``TraceInputError(source, "<what>:
    <reason>")``, the reason being ``reason(exc)`` (default :func:`duckdb_reason`).
    """
    sql = f"INSERT INTO {table} BY NAME {select or 'SELECT * FROM ' + BATCH}"
    with blame_input(source, what, reason):
        return _execute(con, sql, batch, params)


def insert_rows(
    con: duckdb.DuckDBPyConnection,
    table: str,
    rows: Sequence[Mapping[str, Any]],
    *,
    source: Path | str | None,
    what: str = "bad value in the trace",
) -> int:
    """Insert a few rows (run, rank, device metadata), each a mapping of column name to value
    (all with the same keys), into ``table``; return how many. The values are bound as
    parameters typed by the table's columns (a ``dict`` for a ``MAP`` column, a ``str`` for a
    ``TIMESTAMP``), with :func:`insert_batch`'s error mapping; with ``source`` None (rows the
    ingest computed, not read from one input) every error is left to the caller."""
    if not rows:
        return 0
    names = list(rows[0])
    sql = f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join(['?'] * len(names))})"
    values = [[row[n] for n in names] for row in rows]
    if source is None:
        con.executemany(sql, values)
    else:
        with blame_input(source, what):
            con.executemany(sql, values)
    return len(rows)


def row_arrays(cols: Sequence[str], rows: Sequence[Sequence[Any]], extra: Mapping[str, Sequence[Any]]) -> dict[str, Any]:
    """Rows fetched from SQLite (tuples in ``cols`` order) as a batch of NumPy columns, plus the
    ``extra`` columns: an int64 array where every value is a 64-bit integer, else an object array
    (NULLs, text, a hostile file's huge integers), for the SELECT to convert with TRY_CAST."""
    import numpy as np  # imported on use: the Kineto reader runs before NumPy is needed

    out: dict[str, Any] = {}
    for name, values in (*zip(cols, zip(*rows)), *extra.items()):
        if values and type(values[0]) is int:
            # NumPy types the whole column in C: int64 only when every value is a 64-bit integer
            # (a None, a float, text or a huge integer makes it another dtype)
            arr = np.array(values)
            if arr.dtype == np.int64:
                out[name] = arr
                continue
        out[name] = np.array(values, dtype=object)
    return out


def rank_span(con: duckdb.DuckDBPyConnection, run_id: str, rank: int) -> tuple[int | None, int | None, int]:
    """(first start, last end, rows stored) of one rank's device and host events so far: the
    RankInfo span [ns] and the count a parser subtracts from what it read to know what it skipped."""
    first_ns, last_ns, n = con.execute(
        """SELECT min(s), max(e), sum(n) FROM (
             SELECT min(start_ns) s, max(start_ns + dur_ns) e, count(*) n FROM device_activity
               WHERE run_id = $run_id AND rank = $rank
             UNION ALL
             SELECT min(start_ns), max(start_ns + dur_ns), count(*) FROM host_events
               WHERE run_id = $run_id AND rank = $rank)""", {"run_id": run_id, "rank": rank}).fetchall()[0]
    return first_ns, last_ns, int(n or 0)


def create_temp_table(
    con: duckdb.DuckDBPyConnection,
    name: str,
    batch: Any,
    *,
    select: str | None = None,
    params: Mapping[str, Any] | None = None,
    source: Path | str,
) -> None:
    """``CREATE OR REPLACE TEMP TABLE name AS <select>`` over ``batch`` (default all its columns):
    a lookup table that later SELECTs join, read the same way as :func:`insert_batch`'s batch.
    The caller drops it when done."""
    sql = f"CREATE OR REPLACE TEMP TABLE {name} AS {select or 'SELECT * FROM ' + BATCH}"
    with blame_input(source, "bad value in the trace"):
        _execute(con, sql, batch, params)


@contextmanager
def blame_input(
    source: Path | str, what: str, reason: Callable[[BaseException], str] = duckdb_reason
) -> Iterator[None]:
    """Turn a DuckDB error that a value of the input causes (:func:`input_errors`) into
    ``TraceInputError(source, "<what>: <reason(exc)>")``; let every other error through."""
    try:
        yield
    except Exception as exc:
        if not isinstance(exc, input_errors()):
            raise  # the memory limit, the disk, a bug: the ingest maps these
        raise TraceInputError(source, f"{what}: {reason(exc)}") from None


def _scannable(columns: Any) -> Any:
    """``columns`` as this DuckDB scans it right. DuckDB 1.x analyzes an object column of a
    mapping of NumPy arrays by sampling it, and when the sampled values are all None it calls a
    pandas method on the array ("'numpy.ndarray' object has no attribute 'first_valid_index'",
    e.g. XPlane device offsets, rocprofv3 JSON) or, with a sample as long as the batch, takes
    seconds per 10,000 rows; as a pandas frame (no copy) the same columns scan in milliseconds.
    DuckDB 2 reads the mapping itself."""
    if not isinstance(columns, Mapping) or not _duckdb_1():
        return columns
    try:
        pandas = importlib.import_module("pandas")  # an optional dependency: no stubs required
    except ImportError:
        import duckdb

        raise ConfigError("duckdb", f"tracekit on DuckDB {duckdb.__version__} needs pandas to hand it columns: "
                          "pip install pandas (tracekit[lake] brings it), or DuckDB 2") from None
    return pandas.DataFrame(columns, copy=False)


def _duckdb_1() -> bool:
    import duckdb

    return duckdb.__version__.startswith("1.")


def _execute(con: duckdb.DuckDBPyConnection, sql: str, columns: Any, params: Mapping[str, Any] | None) -> int:
    """Run ``sql`` with ``columns`` visible to it as table ``batch``; the number it returns
    (rows inserted), else 0. ``batch`` is this frame's local, found by DuckDB's replacement scan
    (it searches the calling frames); it is released when the statement returns."""
    batch = _scannable(columns)  # read by DuckDB's replacement scan as table "batch"
    del columns
    try:
        rows = con.execute(sql, used_params(sql, params)).fetchall()
    finally:
        del batch
    return int(rows[0][0]) if rows and rows[0] and isinstance(rows[0][0], int) else 0
