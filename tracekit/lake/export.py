"""Exporting a store or a lake as Hive-partitioned Parquet that Spark and Trino read
(``tracekit lake export SOURCE OUT``; ``docs/team-store.md``, "Reading the lake from Spark and Trino").

Layout: ``OUT/<table>/month=YYYY-MM/data_N.parquet`` for every table of
:data:`tracekit.store.RUN_TABLES` (as the running tracekit lists them), with ``month`` the UTC
month of the run's capture time (``run_meta.captured_at``, else its ``ingested_at``), and
``OUT/_tracekit.json`` saying what was exported (schema and tracekit versions, the lake snapshot
read, rows per table, months, columns and the type casts below). A table without rows is one
``OUT/<table>/data_0.parquet`` with its columns and no rows (``month`` a plain column), so a reader
still finds its schema. Spark and Trino skip ``_``-prefixed names, so ``_tracekit.json`` is not read
as data.

One snapshot: every table is read in one read transaction (a lake: one DuckLake snapshot; a store
file: a read-only attach, which a writer cannot take over meanwhile). The files are written into a
temporary directory beside ``OUT`` and renamed onto it only once complete, so ``OUT`` is never a
half export. ``OUT`` must not exist or be empty; ``force`` replaces a previous export (a directory
holding ``_tracekit.json`` and no DuckDB file), nothing else.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb

from tracekit import __version__
from tracekit.errors import ConfigError, OutputError, StoreError
from tracekit.lake.catalog import snapshot_id
from tracekit.lake.url import is_lake, parse_lake_url
from tracekit.limits import memory_limit_setting
from tracekit.outputs import _UMASK, _existing_dir_entries, is_duckdb_file
from tracekit.sql_text import quote
from tracekit.store import (
    RUN_TABLES,
    SCHEMA_VERSION,
    StoreLocation,
    close,
    connect,
    ensure_schema,
    first_line,
    no_progress_bar,
    resolve_store,
)

__all__ = ["MANIFEST", "PARTITION_COLUMN", "SPARK_CASTS", "export_parquet", "exported_type"]

#: The export's own description, beside the table folders.
MANIFEST = "_tracekit.json"

#: The Hive partition column of every table: ``YYYY-MM`` of the run's capture (else ingest) time, UTC.
PARTITION_COLUMN = "month"

#: DuckDB column types that Spark 4 cannot read from DuckDB's Parquet, or reads lossily, and what
#: the export casts them to. Measured with pyspark 4.3.0 on DuckDB 2.0.1's and 1.5.5's Parquet:
#: ``TIMESTAMP_NS`` is refused ("Illegal Parquet type: INT64 (TIMESTAMP(NANOS,false))"),
#: ``HUGEINT`` is written as a DOUBLE (rounded past 2⁵³), ``UBIGINT`` is read as decimal(20,0)
#: (cast explicitly, so Trino and pyiceberg read the same), ``JSON`` as a string (cast, as
#: pyiceberg refuses the Parquet JSON type). The rest have no Spark type. ``TIMESTAMP`` (read as
#: ``timestamp_ntz``), ``MAP``, lists, ``DECIMAL``, ``DATE`` and the signed integers pass unchanged.
SPARK_CASTS: dict[str, str] = {
    "UBIGINT": "DECIMAL(20,0)",   # pc_sample_rows.exec_mask (2⁶⁴ − 1 = all 64 lanes)
    "HUGEINT": "DECIMAL(38,0)",
    "UHUGEINT": "DECIMAL(38,0)",
    "UINTEGER": "BIGINT",
    "USMALLINT": "INTEGER",
    "UTINYINT": "SMALLINT",
    "TIMESTAMP_NS": "TIMESTAMP",  # nanoseconds truncated to microseconds
    "JSON": "VARCHAR",
    "UUID": "VARCHAR",
    "TIME": "VARCHAR",
    "TIME WITH TIME ZONE": "VARCHAR",
    "INTERVAL": "VARCHAR",
    "BIT": "VARCHAR",
    "VARINT": "VARCHAR",
    "BIGNUM": "VARCHAR",
}

#: A type Spark cannot read nested in a STRUCT, MAP, list or UNION: such a column is exported as
#: its JSON text (``to_json``).
_NESTED_UNREADABLE = re.compile(
    r"\b(UBIGINT|U?HUGEINT|TIMESTAMP_NS|UUID|INTERVAL|BIT|VARINT|BIGNUM|UNION)\b|\bTIME\b(?! ZONE)")


def exported_type(duckdb_type: str) -> str | None:
    """What a column of ``duckdb_type`` (as ``DESCRIBE`` names it) is exported as: a DuckDB type
    to cast to, ``"JSON text"`` for a nested type holding one Spark cannot read, or None when
    it is exported unchanged."""
    if duckdb_type in SPARK_CASTS:
        return SPARK_CASTS[duckdb_type]
    if duckdb_type.startswith("UNION(") or (
            ("(" in duckdb_type or duckdb_type.endswith("]")) and _NESTED_UNREADABLE.search(duckdb_type)):
        return "JSON text"
    return None


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _select_list(columns: list[tuple[str, str]]) -> tuple[str, dict[str, str]]:
    """The SELECT list of a table's export (columns of alias ``t``) and the casts it makes."""
    exprs, casts = [], {}
    for name, dtype in columns:
        to = exported_type(dtype)
        col = f"t.{_ident(name)}"
        if to is None:
            exprs.append(col)
            continue
        casts[name] = f"{dtype} -> {to}"
        if to == "JSON text":
            expr = f"CAST(to_json({col}) AS VARCHAR)"
        elif dtype == "TIMESTAMP_NS":  # truncated: a CAST rounds on DuckDB 2, truncates on 1.5
            expr = f"make_timestamp(epoch_ns({col}) // 1000)"
        else:
            expr = f"CAST({col} AS {to})"
        exprs.append(f"{expr} AS {_ident(name)}")
    return ", ".join(exprs), casts


def _parse_since(since: str | dt.date | None) -> dt.date | None:
    if since is None or isinstance(since, dt.date):
        return since.date() if isinstance(since, dt.datetime) else since
    try:
        return dt.date.fromisoformat(since)
    except ValueError:
        raise ConfigError(f"--since {since}", "expected a date YYYY-MM-DD") from None


def _source_paths(loc: StoreLocation) -> list[Path]:
    """The local files and directories of the source: a store file; a lake's SQLite catalog and
    local data directory."""
    if not is_lake(loc):
        return [Path(os.path.realpath(loc))]
    url = parse_lake_url(str(loc))
    paths = [url.catalog_file] if url.catalog_file else []
    return [Path(os.path.realpath(p)) for p in paths + ([] if url.on_s3 else [url.data])]


def _check_out(out: Path, loc: StoreLocation, force: bool) -> bool:
    """Refuse an ``out`` that may not receive the export; True when it holds a previous export
    to replace (``force``). Creates ``out`` (empty) when missing, so the export is renamed onto it."""
    target = Path(os.path.realpath(out))
    for p in _source_paths(loc):
        if p == target or target in p.parents or p in target.parents:
            raise OutputError(out, f"overlaps the source {p}; choose a directory outside it")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(out, f"cannot create its parent directory: {exc.strerror or exc}") from None
    entries = _existing_dir_entries(out, target)
    if not entries:
        return False
    if not force:
        raise OutputError(out, "exists and is not empty; pass --force to replace a previous export")
    if not (target / MANIFEST).is_file():
        raise OutputError(out, f"is not a previous export (no {MANIFEST}); refusing to replace it, even with --force")
    for root, _dirs, files in os.walk(target):
        for f in files:
            if is_duckdb_file(os.path.join(root, f)):
                raise OutputError(out, f"holds a DuckDB database ({os.path.join(root, f)}); refusing to replace it")
    return True


@contextmanager
def _source(loc: StoreLocation, spill: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection whose default database is the store or lake at ``loc``, read-only, that may
    write files (``COPY … TO``). A lake: the reader connection itself. A store file: opened
    read-only by :func:`tracekit.store.connect` (which checks it and waits for a writer), then
    attached read-only to an in-memory DuckDB (a store reader may not write files); the first
    connection stays open, so no writer takes the file meanwhile."""
    con = connect(loc, read_only=True)
    try:
        if is_lake(loc):
            yield con
            return
        config: dict[str, str | bool | int | float | list[str]] = {
            "threads": max(1, os.cpu_count() or 1), "memory_limit": memory_limit_setting(),
            "temp_directory": str(spill)}
        out = duckdb.connect(":memory:", config=config)
        try:
            no_progress_bar(out)
            if con.execute("SELECT current_database()").fetchone() == ("memory",):
                ensure_schema(out)  # a blank store (an interrupted first ingest): no runs
            else:
                out.execute(f"ATTACH {quote(str(loc))} AS src (READ_ONLY)")
                out.execute("USE src")
            yield out
        finally:
            out.close()
    finally:
        close(con)


def _columns(con: duckdb.DuckDBPyConnection, table: str) -> list[tuple[str, str]]:
    rows = con.execute(
        "SELECT column_name, data_type FROM duckdb_columns() WHERE database_name = current_database() "
        "AND schema_name = 'main' AND table_name = ? ORDER BY column_index", [table]).fetchall()
    return [(str(n), str(t)) for n, t in rows]


def _export_table(con: duckdb.DuckDBPyConnection, table: str, dest: Path, since: dt.date | None) -> dict[str, Any]:
    """Write ``table`` under ``dest`` partitioned by month; what was written (rows, months,
    columns as exported, casts)."""
    columns = _columns(con, table)
    if not columns:
        return {"rows": 0, "absent": True, "months": [], "columns": [], "casts": {}}
    if any(n == PARTITION_COLUMN for n, _ in columns):
        raise StoreError(table, f"has a column named {PARTITION_COLUMN!r}, the export's partition column")
    select, casts = _select_list(columns)
    where = "" if since is None else f" WHERE r.at >= DATE {quote(since.isoformat())}"
    query = (f"SELECT {select}, strftime(r.at, '%Y-%m') AS {PARTITION_COLUMN} FROM {_ident(table)} t "
             "JOIN (SELECT run_id, min(coalesce(captured_at, ingested_at)) AS at FROM run_meta GROUP BY run_id) r "
             f"ON t.run_id = r.run_id{where}")
    got = con.execute(f"COPY ({query}) TO {quote(str(dest))} "
                      f"(FORMAT parquet, PARTITION_BY ({PARTITION_COLUMN}), COMPRESSION zstd)").fetchone()
    rows = int(got[0]) if got else 0
    if rows == 0:  # no partition was written: one file with the columns, so readers find the schema
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir()
        con.execute(f"COPY ({query} LIMIT 0) TO {quote(str(dest / 'data_0.parquet'))} (FORMAT parquet)")
    months = sorted(p.name.split("=", 1)[1] for p in dest.glob(f"{PARTITION_COLUMN}=*"))
    exported = [(n, SPARK_CASTS.get(t, "VARCHAR") if n in casts else t) for n, t in columns]
    return {"rows": rows, "months": months, "columns": exported, "casts": casts}


def _schema_version(con: duckdb.DuckDBPyConnection) -> int:
    row = con.execute("SELECT max(version) FROM tracekit_schema").fetchone()
    return int(row[0]) if row and row[0] is not None else SCHEMA_VERSION


def _write_all(con: duckdb.DuckDBPyConnection, loc: StoreLocation, tmp: Path, since: dt.date | None) -> dict[str, Any]:
    """Every run table into ``tmp`` in one read transaction, and the manifest; the manifest."""
    con.execute("BEGIN TRANSACTION")
    try:
        manifest: dict[str, Any] = {
            "format": "tracekit Hive-partitioned Parquet export",
            "schema_version": _schema_version(con),
            "tracekit_version": __version__,
            "duckdb_version": duckdb.__version__,
            "source": str(loc),
            "lake_snapshot": snapshot_id(con) if is_lake(loc) else None,
            "since": since.isoformat() if since else None,
            "exported_at": dt.datetime.now(dt.UTC).replace(tzinfo=None).isoformat(timespec="seconds"),
            "partitioned_by": {PARTITION_COLUMN: "YYYY-MM of coalesce(run_meta.captured_at, run_meta.ingested_at), UTC"},
            "tables": {t: _export_table(con, t, tmp / t, since) for t in RUN_TABLES},
        }
    finally:
        con.execute("ROLLBACK")  # nothing was written to the source; ends the read transaction
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, default=str) + "\n")
    return manifest


def export_parquet(store: str | Path | None, out_dir: str | Path, *, since: str | dt.date | None = None,
                   force: bool = False) -> dict[str, Any]:
    """Export every table of :data:`tracekit.store.RUN_TABLES` of ``store`` (a store file or a
    ``lake:`` URL; None: ``$TRACEKIT_STORE`` or ``./tracekit.duckdb``) to ``out_dir`` as
    Hive-partitioned Parquet (module docstring), for Spark and Trino.

    ``since``: only runs captured (else ingested) on or after this UTC date (``YYYY-MM-DD``).
    ``force``: replace a previous export at ``out_dir``. Column types Spark 4 cannot read are cast
    (:data:`SPARK_CASTS`; the manifest lists each cast). Returns the manifest written to
    ``OUT/_tracekit.json`` plus ``out`` (the directory) and ``seconds`` (wall time, s).

    Raises :class:`~tracekit.errors.OutputError` for an ``out_dir`` that exists and is not empty
    (without ``force``), is not a previous export, overlaps the source, or cannot be written, and
    :class:`~tracekit.errors.StoreError` for a source that cannot be read; ``out_dir`` is then
    as it was.
    """
    started = time.perf_counter()
    loc = resolve_store(store)
    out = Path(out_dir)
    since_date = _parse_since(since)
    created = not os.path.lexists(out)
    replace = _check_out(out, loc, force)
    target = Path(os.path.realpath(out))
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.export-", dir=target.parent))
    try:
        os.chmod(tmp, 0o777 & ~_UMASK)  # mkdtemp's 0700 would hide the export from other readers
        with _source(loc, tmp / ".spill") as con:
            try:
                manifest = _write_all(con, loc, tmp, since_date)
            except duckdb.IOException as exc:
                raise OutputError(out, f"cannot write the export: {first_line(exc)}") from None
            except duckdb.Error as exc:
                raise StoreError(str(loc), f"cannot export: {first_line(exc)}") from None
        shutil.rmtree(tmp / ".spill", ignore_errors=True)
        _swap_in(tmp, target, replace)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if created and target.is_dir() and not any(target.iterdir()):
            target.rmdir()  # made empty by _check_out: leave no trace of a failed export
        raise
    return {**manifest, "out": str(out), "seconds": round(time.perf_counter() - started, 3)}


def _swap_in(tmp: Path, target: Path, replace: bool) -> None:
    """Rename the finished export ``tmp`` onto ``target`` (an empty directory, or with ``replace``
    a previous export, moved aside first and removed after)."""
    old = target.with_name(f".{target.name}.old-{os.getpid()}") if replace else None
    try:
        if old is not None:
            os.rename(target, old)
        os.rename(tmp, target)
    except OSError as exc:
        if old is not None and old.exists() and not target.exists():
            os.rename(old, target)
        raise OutputError(target, f"cannot move the export into place: {exc.strerror or exc}") from None
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
