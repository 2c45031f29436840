"""Connecting to a lake store: DuckLake over a PostgreSQL or SQLite catalog, Parquet data files.

A lake connection is an in-memory DuckDB with the lake attached as ``lake`` and made the default
database (``USE lake``), so every query, analyzer and dashboard page reads the same table names
as on a store file. The public views (``tracekit/schema/views.sql``) are created as TEMP views
of the connection on every attach, so readers of any tracekit version see their own contract and
the lake holds only base tables (:func:`create_tables`). Readers attach ``READ_ONLY``.

DuckDB's own extensions come from its extension repository (``INSTALL ducklake``), which needs a
network; offline, the ``tracekit[lake]`` extra installs them as PyPI packages
(``duckdb-extension-ducklake`` and friends, a third-party repackaging that pins DuckDB 1.5.5),
which :func:`load_extensions` installs from their files into a private extension directory.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import sqlite3
from contextlib import closing
from pathlib import Path

import duckdb

from tracekit import schema
from tracekit.errors import StoreError
from tracekit.lake.url import LakeURL
from tracekit.sql_text import quote
from tracekit.store import first_line, no_progress_bar

__all__ = ["ALIAS", "READ_KEY_VARIABLE", "connect", "create_tables", "cursor", "lake_tables_sql", "load_extensions",
           "mark_snapshot", "read_key", "snapshot_id", "without_secrets"]

#: The name the lake is attached under.
ALIAS = "lake"

#: Extensions each catalog needs (httpfs is added for S3 data).
_EXTENSIONS = {"postgresql": ("ducklake", "postgres"), "sqlite": ("ducklake", "sqlite")}


def _packaged(name: str) -> Path | None:
    """The extension file of the PyPI package ``duckdb-extension-<name>`` built for this DuckDB."""
    spec = importlib.util.find_spec(f"duckdb_extension_{name}")
    if spec is None or not spec.submodule_search_locations:
        return None
    version = f"v{duckdb.__version__}"
    for root in spec.submodule_search_locations:
        for found in sorted(Path(root).rglob(f"{name}.duckdb_extension")):
            if version in found.parts:
                return found
    return None


def load_extensions(con: duckdb.DuckDBPyConnection, url: LakeURL) -> None:
    """Load what ``url`` needs (DuckLake, the catalog's scanner, httpfs for S3): from the
    ``duckdb-extension-*`` packages when installed, else from DuckDB's repository. A missing one
    is a :class:`StoreError` saying how to get it."""
    names = _EXTENSIONS[url.catalog] + (("httpfs",) if url.on_s3 else ())
    for name in names:
        try:
            con.execute(f"LOAD {name}")  # installed before (DuckDB's extension directory)
            continue
        except duckdb.Error:
            pass
        path = _packaged(name)
        try:
            con.execute(f"INSTALL {quote(str(path))}" if path is not None else f"INSTALL {name}")
            con.execute(f"LOAD {name}")
        except duckdb.Error as exc:
            raise StoreError(url.text, f"DuckDB {duckdb.__version__} cannot load its {name} extension "
                             f"({first_line(exc)[:160]}); "
                             "install tracekit[lake] (offline packages, DuckDB 1.5.5) or let DuckDB "
                             "download it (INSTALL needs extensions.duckdb.org)") from None


def _s3_secret(con: duckdb.DuckDBPyConnection) -> None:
    """An S3 secret from the standard environment: ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
    ``AWS_SESSION_TOKEN``, ``AWS_REGION`` (or ``AWS_DEFAULT_REGION``), and ``AWS_ENDPOINT_URL_S3``
    / ``AWS_ENDPOINT_URL`` for an S3-compatible server (path-style URLs, TLS as its scheme says)."""
    env = os.environ
    parts = ["TYPE s3"]
    for key, var in (("KEY_ID", "AWS_ACCESS_KEY_ID"), ("SECRET", "AWS_SECRET_ACCESS_KEY"),
                     ("SESSION_TOKEN", "AWS_SESSION_TOKEN")):
        if env.get(var):
            parts.append(f"{key} {quote(env[var])}")
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if region:
        parts.append(f"REGION {quote(region)}")
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if endpoint:
        match = re.match(r"^(https?)://([^/]+)/?$", endpoint)
        if match is None:
            raise StoreError("AWS_ENDPOINT_URL", f"{endpoint!r} is not http(s)://HOST[:PORT]")
        parts += [f"ENDPOINT {quote(match.group(2))}", "URL_STYLE 'path'",
                  f"USE_SSL {'true' if match.group(1) == 'https' else 'false'}"]
    try:  # temporary (this connection only); DuckDB never prints a secret's values back
        con.execute(f"CREATE OR REPLACE SECRET tracekit_s3 ({', '.join(parts)})")
    except duckdb.Error as exc:
        raise StoreError("AWS_*", f"cannot use the S3 credentials: {type(exc).__name__}") from None


def attach(con: duckdb.DuckDBPyConnection, url: LakeURL, *, read_only: bool) -> None:
    """Attach the lake of ``url`` to ``con`` as :data:`ALIAS` and make it the default database."""
    if url.catalog == "sqlite" and not Path(url.catalog_file).is_file():
        if read_only:
            raise StoreError(url.text, "no tracekit lake here (create it with `tracekit lake init URL`)")
        try:
            Path(url.catalog_file).parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(url.text, f"cannot create the catalog's directory: {exc.strerror or exc}") from None
    load_extensions(con, url)
    if url.on_s3:
        _s3_secret(con)
    elif not read_only:
        try:
            Path(url.data).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(url.text, f"cannot create the data directory {url.data}: "
                             f"{exc.strerror or exc}") from None
    options = [f"DATA_PATH {quote(url.data)}"]
    if read_only:
        options.append("READ_ONLY")
    try:
        con.execute(f"ATTACH {quote(url.ducklake())} AS {ALIAS} ({', '.join(options)})")
        con.execute(f"USE {ALIAS}")
    except duckdb.Error as exc:
        raise StoreError(url.text, f"cannot attach the lake: {without_secrets(first_line(exc))}") from None
    if url.catalog == "sqlite" and not read_only:
        _sqlite_wal(url.catalog_file)


def _sqlite_wal(path: str) -> None:
    """Put a SQLite catalog in WAL mode (kept in the file; a no-op once set). In SQLite's default
    rollback-journal mode a process that only reads the catalog — a writer polling a run's claim —
    blocks another's commit, and DuckDB's sqlite extension then reported "database is locked" on
    every retry for a minute (measured: 1 of 2 concurrent ``tracekit analyze`` failed after 84 s; in
    WAL mode 3 of 3 finished in 12.8 s). WAL needs the catalog on a local disk, as SQLite says."""
    try:
        with closing(sqlite3.connect(path, timeout=30, isolation_level=None)) as db:
            if str(db.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                db.execute("PRAGMA journal_mode = WAL")
    except sqlite3.Error:
        pass  # busy now: the next writer sets it (a lake works without WAL, only with more retries)


def without_secrets(text: str) -> str:
    """``text`` without a ``password=…`` a driver may quote back."""
    return re.sub(r"(?i)(password\s*=\s*)\S+", r"\1…", text)


def lake_tables_sql() -> str:
    """``tables.sql`` as DuckLake takes it: the same tables and columns, without PRIMARY KEY and
    UNIQUE (DuckLake has neither; run ids are claimed instead, :mod:`tracekit.lake.claims`)."""
    sql = schema.tables_sql()
    sql = re.sub(r"\s+PRIMARY\s+KEY\b(?!\s*\()", "", sql, flags=re.IGNORECASE)
    sql = re.sub(r"\s+UNIQUE\b(?!\s*\()", "", sql, flags=re.IGNORECASE)
    return sql


def _views_sql() -> str:
    """The public views as TEMP views of one connection (the lake keeps base tables only)."""
    return re.sub(r"\bCREATE\s+OR\s+REPLACE\s+VIEW\b", "CREATE OR REPLACE TEMP VIEW", schema.views_sql(),
                  flags=re.IGNORECASE)


def schema_version(con: duckdb.DuckDBPyConnection) -> int | None:
    """The lake's schema version (its ``tracekit_schema`` table), or None for an empty lake."""
    row = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = ? AND table_name = 'tracekit_schema'",
        [ALIAS]).fetchone()
    if not row or not row[0]:
        return None
    got = con.execute(f"SELECT max(version) FROM {ALIAS}.main.tracekit_schema").fetchone()
    return int(got[0]) if got and got[0] is not None else None


def create_tables(con: duckdb.DuckDBPyConnection, version: int, now: object) -> None:
    """Create the base tables in the attached (empty) lake, recording schema ``version``."""
    con.execute("BEGIN")
    try:
        con.execute(lake_tables_sql())
        con.execute(f"INSERT INTO {ALIAS}.main.tracekit_schema VALUES (?, ?)", [version, now])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


def connect(url: LakeURL, *, read_only: bool,
            config: dict[str, str | bool | int | float | list[str]]) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB opened with ``config``, the lake of ``url`` attached (see the module
    docstring) and the public views created. A lake without tracekit's tables is refused (create
    it with ``tracekit lake init URL``); a writer migrates an older lake's schema."""
    from tracekit.store import SCHEMA_VERSION  # the store module imports this one lazily

    con = duckdb.connect(":memory:", config=config)
    try:
        no_progress_bar(con)
        attach(con, url, read_only=read_only)
        version = schema_version(con)
        if version is None:
            raise StoreError(url.text, "no tracekit lake here (create it with `tracekit lake init URL`)")
        if version > SCHEMA_VERSION:
            raise StoreError(url.text, f"lake has schema version {version}, newer than this tracekit's "
                             f"{SCHEMA_VERSION}; upgrade tracekit")
        if version < SCHEMA_VERSION and not read_only:
            _migrate(con, version, SCHEMA_VERSION)
        con.execute(_views_sql())
    except BaseException:
        con.close()
        raise
    return con


def cursor(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """A new connection to the database of ``con`` (a lake connection from :func:`connect`): the
    lake attached once is shared, the default database and the TEMP views are set up again (they
    belong to one connection). For a long-lived process that serves many reads (the dashboard):
    milliseconds instead of the attach's 0.3–1.2 s."""
    cur = con.cursor()
    try:
        no_progress_bar(cur)
        cur.execute(f"USE {ALIAS}")
        cur.execute(_views_sql())
    except BaseException:
        cur.close()
        raise
    return cur


#: The DuckDB variable naming what a read inside one transaction sees (:func:`mark_snapshot`).
READ_KEY_VARIABLE = "tracekit_read_key"


def mark_snapshot(con: duckdb.DuckDBPyConnection, url: str) -> None:
    """Inside a transaction on the lake of ``url``: set the connection's variable
    :data:`READ_KEY_VARIABLE` to ``<hash of url>:<snapshot id>``, which names the data every
    query of the transaction reads, so results derived from it can be cached across reads
    (:func:`read_key`). A lake snapshot never changes once committed. (A lake dropped and made
    again at the same URL restarts its snapshot ids: a process caching by this key must then be
    restarted.)"""
    snapshot = snapshot_id(con)
    key = None if snapshot is None else f"{hashlib.sha256(url.encode()).hexdigest()[:16]}:{snapshot}"
    con.execute(f"SET VARIABLE {READ_KEY_VARIABLE} = ?", [key])


def read_key(con: duckdb.DuckDBPyConnection) -> str | None:
    """The key set by :func:`mark_snapshot` on this connection, or None (a store file, a read
    outside such a transaction: nothing to cache by)."""
    row = con.execute(f"SELECT getvariable('{READ_KEY_VARIABLE}')").fetchone()
    return None if row is None or row[0] is None else str(row[0])


def _migrate(con: duckdb.DuckDBPyConnection, from_version: int, to_version: int) -> None:
    """Additive migration of the lake's base tables (the store's SQL steps; DuckLake runs ``ALTER
    TABLE … ADD COLUMN`` in a transaction), recorded in the lake's ``tracekit_schema``. Views are
    not stored in a lake (each connection creates its own)."""
    from tracekit.store import MIGRATIONS, utc_now

    con.execute("BEGIN")
    try:
        for v in range(from_version, to_version):
            MIGRATIONS[v](con)
            con.execute(f"INSERT INTO {ALIAS}.main.tracekit_schema VALUES (?, ?)", [v + 1, utc_now()])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


def snapshot_id(con: duckdb.DuckDBPyConnection) -> int | None:
    """The lake snapshot a connection reads (inside a transaction: the one it began on; else the
    latest): printed by ``tracekit check`` so an alert can be reproduced with time travel. None
    without a lake attached."""
    try:
        row = con.execute(f"FROM {ALIAS}.current_snapshot()").fetchone()
    except duckdb.Error:
        return None
    return int(row[0]) if row and row[0] is not None else None
