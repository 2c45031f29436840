"""The tracekit store: one embedded DuckDB file with one versioned schema.

Base tables hold what the parsers write; the public views are the contract that tests, the
dashboard, CI alerts and outside scripts query. Columns may be added to them; existing names never
change. Both are defined, column by column with units, in the SQL files of :mod:`tracekit.schema`
(``tables.sql``, ``views.sql``, one file per migration step), from which ``docs/schema.md`` is
generated. This module creates and migrates the schema and opens, locks and closes the store.

Concurrency: DuckDB allows one read-write process per file. A second writer waits for the lock
(up to ``lock_timeout_s`` seconds, default 600, or ``TRACEKIT_LOCK_TIMEOUT``) and then fails with
a clear message; it never corrupts the store. Readers open the file read-only.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import sys
import tempfile
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb

from tracekit import schema
from tracekit.errors import ConfigError, StoreError, StoreLockedError, TraceInputError
from tracekit.lake.url import is_lake, parse_lake_url
from tracekit.limits import memory_limit_setting, temp_dir

#: Version of the schema this code writes. Bump it and add a step to ``MIGRATIONS`` together.
SCHEMA_VERSION = 6

DEFAULT_STORE = "tracekit.duckdb"

#: ``MIGRATIONS[v]`` upgrades a store from schema ``v`` to ``v + 1`` inside one transaction.
#: Views are recreated after the last step, so a step only changes base tables.
Migration = Callable[[duckdb.DuckDBPyConnection], None]


def _sql_step(from_version: int) -> Migration:
    """The migration step whose SQL is ``tracekit/schema/migrate_<v>_to_<v+1>.sql``."""

    def apply(con: duckdb.DuckDBPyConnection) -> None:
        con.execute(schema.migration_sql(from_version))

    return apply


MIGRATIONS: dict[int, Migration] = {
    1: lambda con: None,  # 1 → 2: views only (runtime_calls classifies api_kind per distinct name)
    2: _sql_step(2),  # 2 → 3: model_rows (the model a run served)
    3: _sql_step(3),  # 3 → 4: n_invalid_events of rank_meta and run_meta
    4: _sql_step(4),  # 4 → 5: per-run rollups of run_meta (event counts, summed device time)
    5: _sql_step(5),  # 5 → 6: request sessions/turns/cached tokens, server_metric_rows (issue 21)
}

RUN_TABLES = (
    "device_activity", "host_events", "device_meta", "rank_meta", "xla_op_costs", "xla_module_meta",
    "counter_values", "pc_sample_rows", "finding_rows", "metric_rows", "token_length_rows", "request_rows", "server_metric_rows", "model_rows", "run_meta",
)


def utc_now() -> dt.datetime:
    """Current UTC time as a naive datetime (all TIMESTAMP columns of the store are UTC)."""
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def default_store_path() -> Path:
    """The store file used when no ``--store`` is given: ``$TRACEKIT_STORE`` or ``./tracekit.duckdb``
    (see :func:`resolve_store`, which also returns a lake URL)."""
    return Path(os.environ.get("TRACEKIT_STORE") or DEFAULT_STORE)


#: A store as commands name it: a store file, or a lake URL (``lake:…``, kept as a string: a
#: ``Path`` would fold its ``//``).
StoreLocation = Path | str


def resolve_store(store: str | Path | None = None) -> StoreLocation:
    """The store a command uses: ``store`` or ``$TRACEKIT_STORE`` or ``./tracekit.duckdb``; a lake
    URL (:func:`tracekit.lake.url.is_lake`) stays a string, anything else becomes a ``Path``."""
    if store is None:
        store = os.environ.get("TRACEKIT_STORE") or DEFAULT_STORE
    return store if is_lake(store) else Path(store)


def _lock_timeout_s() -> float:
    try:
        return float(os.environ.get("TRACEKIT_LOCK_TIMEOUT", "600"))
    except ValueError:
        return 600.0


def _is_lock_error(exc: Exception) -> bool:
    text = str(exc)
    return "lock" in text.lower() and ("Conflicting" in text or "Could not set lock" in text)


def no_progress_bar(con: duckdb.DuckDBPyConnection) -> None:
    """No DuckDB progress bar on stderr, even when Python runs with -c (DuckDB then thinks it is
    interactive): the CLI draws its own, and --json output must stay clean. In Jupyter without
    ipywidgets DuckDB refuses to change the setting at all (and draws no bar there): left as is."""
    try:
        con.execute("SET enable_progress_bar = false")
    except duckdb.InvalidInputException as exc:
        if "ipywidgets" not in str(exc):
            raise

def connect(
    path: str | Path,
    *,
    read_only: bool = False,
    lock_timeout_s: float | None = None,
    on_wait: Callable[[], None] | None = None,
) -> duckdb.DuckDBPyConnection:
    """Open the store at ``path``, waiting up to ``lock_timeout_s`` seconds for another writer.

    A writable connection creates the file and the schema if needed and migrates an older schema.
    A read-only connection refuses a missing store and runs with external access disabled, so a
    query can neither write files nor attach other databases.
    """
    if is_lake(path):
        return _connect_lake(str(path), read_only=read_only)
    path = Path(path)
    if read_only and not path.exists():
        raise StoreError(path, "no such store (ingest a trace first, or pass --store)")
    timeout = _lock_timeout_s() if lock_timeout_s is None else lock_timeout_s
    # A writer runs DuckDB on one thread: ingest keeps another core busy decompressing and
    # decoding the next chunk, and one thread keeps peak memory low (benchmarks/, 2 cores).
    # Readers (queries, dashboard) use every core.
    # DuckDB holds an uncommitted transaction in memory up to its limit and writes row groups out
    # past it: 512 MB cut the peak RSS of a 1M-dispatch rocpd ingest from 770 to 470 MB, and made
    # it faster (benchmarks/). TRACEKIT_MEMORY_LIMIT overrides it (a DuckDB size, e.g. "2GB").
    config: dict[str, str | bool | int | float | list[str]] = {
        "threads": 1,
        "memory_limit": memory_limit_setting(),
    }
    if not read_only:
        # A writer checkpoints at each COMMIT (threshold 1 KB) rather than at close: the data is
        # written to the file once instead of to the WAL and then the file, the store never needs
        # a WAL replay, and an 837k-event XPlane ingest's commit + close took 57 ms instead of 77.
        config["checkpoint_threshold"] = "1KB"
    else:
        config["threads"] = max(1, os.cpu_count() or 1)
        config["enable_external_access"] = False
        # DuckDB lets a connection write its temp directory even without external access; by
        # default that is `<store>.tmp/`, next to the store. A reader spills into a private
        # directory instead, removed when the connection is closed by open_store or collected.
        config["temp_directory"] = str(_private_spill_dir())
    try:
        if read_only and _is_zero_bytes(path):
            # a 0-byte file: a first ingest of an older tracekit killed before DuckDB wrote its
            # header. Read as a store without runs (_blank_store; the next ingest makes it real).
            con = duckdb.connect(":memory:", config=config)
        else:
            if not read_only:
                _create_store(path, config)
            con = _connect_waiting(path, read_only, config, timeout, on_wait)
    except BaseException:
        if "temp_directory" in config:
            shutil.rmtree(str(config["temp_directory"]), ignore_errors=True)
        raise
    if "temp_directory" in config:
        _SPILL_DIRS[con] = weakref.finalize(con, shutil.rmtree, str(config["temp_directory"]), True)
    try:
        no_progress_bar(con)
        if read_only:
            version = _schema_version(con)
            if version is None:
                if not _is_blank(con):
                    raise StoreError(path, "not a tracekit store (no tracekit_schema table)")
                con = _blank_store(con, config)  # a blank DuckDB file (an interrupted first ingest)
            else:
                _check_version(path, version)
        else:
            ensure_schema(con, path)
    except duckdb.Error as exc:
        close(con)
        raise StoreError(path, f"cannot use the store: {first_line(exc)}") from None
    except BaseException:
        close(con)
        raise
    return con


def _connect_lake(url: str, *, read_only: bool) -> duckdb.DuckDBPyConnection:
    """A connection to the lake of ``url`` (:mod:`tracekit.lake.catalog`); a reader spills into a
    private directory removed by :func:`close`, as for a store file."""
    from tracekit.lake import catalog

    lake = parse_lake_url(url)
    spill = _private_spill_dir()
    config: dict[str, str | bool | int | float | list[str]] = {
        "threads": max(1, os.cpu_count() or 1), "memory_limit": memory_limit_setting(),
        "temp_directory": str(spill)}
    try:
        con = catalog.connect(lake, read_only=read_only, config=config)
    except BaseException:
        shutil.rmtree(spill, ignore_errors=True)
        raise
    _SPILL_DIRS[con] = weakref.finalize(con, shutil.rmtree, str(spill), True)
    return con


def _private_spill_dir() -> Path:
    """A new ``tracekit-query-<pid>-*`` directory in the temp dir, for one reader's spills. Those
    of processes that no longer run (killed before they could remove theirs) are removed first."""
    base = temp_dir()
    try:
        for old in base.glob("tracekit-query-*-*"):
            pid = old.name.split("-")[2]
            if pid.isdigit() and not _alive(int(pid)):
                shutil.rmtree(old, ignore_errors=True)
        return Path(tempfile.mkdtemp(prefix=f"tracekit-query-{os.getpid()}-", dir=base))
    except OSError as exc:
        raise ConfigError("TRACEKIT_TMPDIR" if os.environ.get("TRACEKIT_TMPDIR") else "temp directory",
                          f"{base}: cannot create a private directory for query spills "
                          f"({exc.strerror or exc})") from None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


#: Private spill directories of read-only connections, removed by :func:`close`.
_SPILL_DIRS: weakref.WeakKeyDictionary[duckdb.DuckDBPyConnection, Any] = (
    weakref.WeakKeyDictionary())


def close(con: duckdb.DuckDBPyConnection) -> None:
    """Close a connection from :func:`connect` and remove its private spill directory."""
    con.close()
    fin = _SPILL_DIRS.pop(con, None)
    if fin is not None:
        fin()


def first_line(exc: BaseException) -> str:
    """The first line of an exception's text (DuckDB adds context lines such as ``LINE 1:``)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _connect_waiting(path: Path, read_only: bool, config: dict[str, str | bool | int | float | list[str]],
                     timeout: float, on_wait: Callable[[], None] | None) -> duckdb.DuckDBPyConnection:
    deadline = time.monotonic() + timeout
    warned = False
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only, config=config)
        except duckdb.IOException as exc:
            if not _is_lock_error(exc):
                raise StoreError(path, f"cannot open store: {first_line(exc)}") from None
            if time.monotonic() >= deadline:
                raise StoreLockedError(
                    path,
                    f"store is locked by another tracekit process (waited {timeout:g} s; "
                    "set TRACEKIT_LOCK_TIMEOUT to wait longer)",
                ) from None
            if not warned:
                warned = True
                if on_wait is not None:
                    on_wait()
            time.sleep(0.2)
        except duckdb.Error as exc:
            raise StoreError(path, f"not a tracekit store: {first_line(exc)}") from None


def lock_wait_notice(path: str | Path, timeout_s: float | None = None) -> str:
    """The one line printed (on stderr) when a command starts waiting for the store's lock."""
    timeout = _lock_timeout_s() if timeout_s is None else timeout_s
    return (f"waiting for the lock on {path}: another tracekit process is writing the store "
            f"(waiting up to {timeout:g} s; TRACEKIT_LOCK_TIMEOUT sets how long)")


def _is_zero_bytes(path: Path) -> bool:
    try:
        return path.is_file() and path.stat().st_size == 0
    except OSError:
        return False


def _is_blank(con: duckdb.DuckDBPyConnection) -> bool:
    """True when the database has no table, view, macro or sequence of its own: a DuckDB file a
    first ingest created but did not get to commit the schema to."""
    row = con.execute(
        "SELECT (SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database())"
        " + (SELECT count(*) FROM duckdb_views() WHERE NOT internal AND database_name = current_database())"
    ).fetchone()
    return row is not None and row[0] == 0


def _blank_store(con: duckdb.DuckDBPyConnection,
                 config: dict[str, str | bool | int | float | list[str]]) -> duckdb.DuckDBPyConnection:
    """A store without runs, for a reader of a blank store (a 0-byte file, or a DuckDB file whose
    first ingest was killed before the schema committed): an in-memory database with the current
    schema, opened with the reader's ``config``, taking over ``con``'s spill directory. ``con`` is
    closed (unless it is that in-memory database already)."""
    if con.execute("SELECT current_database()").fetchone() != ("memory",):
        fin = _SPILL_DIRS.pop(con, None)
        cleanup = fin.detach() if fin is not None else None
        con.close()
        con = duckdb.connect(":memory:", config=config)
        if cleanup is not None:
            _obj, func, args, _kwargs = cleanup
            _SPILL_DIRS[con] = weakref.finalize(con, func, *args)
    try:
        ensure_schema(con)
    except BaseException:
        close(con)
        raise
    return con


def _remove_stale_creations(path: Path) -> None:
    """Remove what a creator killed between linking its new store into place and removing the
    temporary name left behind (``.<name>.<pid>.<n>.new``, a second link to the store), once its
    process is gone."""
    import glob

    for name in glob.glob(os.path.join(glob.escape(str(path.parent)), f".{glob.escape(path.name)}.*.new")):
        try:
            pid = int(Path(name).name[len(path.name) + 2:].split(".")[0])
            os.kill(pid, 0)
        except ProcessLookupError:
            Path(name).unlink(missing_ok=True)
        except (ValueError, OSError):
            continue


def _create_store(path: Path, config: dict[str, str | bool | int | float | list[str]]) -> None:
    """Create a new store atomically: the schema is written to a temporary file next to ``path``,
    which is then hard-linked into place (or renamed where links are not supported), so a store
    never appears without its schema, whenever the first ingest is killed. A 0-byte file at
    ``path`` (left by an older tracekit) is replaced. Nothing happens when a store exists.
    A concurrent creator that wins the race keeps its store; this one's is discarded."""
    try:
        if path.exists() and path.stat().st_size > 0:
            _remove_stale_creations(path)
            return
        if path.is_symlink() or (path.exists() and not path.is_file()):
            return  # DuckDB says what is wrong with it
    except OSError:
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}.new")
    try:
        con = duckdb.connect(str(tmp), config=config)
        try:
            ensure_schema(con, path)
        finally:
            con.close()
        if path.exists():
            if path.stat().st_size == 0:
                os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass  # another process created the store meanwhile: use theirs
            except OSError:
                if not path.exists():
                    os.replace(tmp, path)
    except OSError as exc:
        raise StoreError(path, f"cannot create the store: {exc.strerror or exc}") from None
    except duckdb.Error as exc:
        raise StoreError(path, f"cannot create the store: {first_line(exc)}") from None
    finally:
        for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
            try:
                leftover.unlink(missing_ok=True)
            except OSError:
                pass


def _schema_version(con: duckdb.DuckDBPyConnection) -> int | None:
    # duckdb_tables(), not information_schema: 1 ms instead of 11 on a fresh connection
    row = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'tracekit_schema' "
        "AND schema_name = 'main' AND database_name = current_database()"
    ).fetchone()
    if not row or row[0] == 0:
        return None
    got = con.execute("SELECT max(version) FROM tracekit_schema").fetchone()
    return int(got[0]) if got and got[0] is not None else None


def _check_version(path: Path, version: int) -> None:
    if version > SCHEMA_VERSION:
        raise StoreError(
            path,
            f"store has schema version {version}, newer than this tracekit's "
            f"{SCHEMA_VERSION}; upgrade tracekit",
        )


def ensure_schema(con: duckdb.DuckDBPyConnection, path: str | Path = "<store>") -> int:
    """Create the schema in an empty store or migrate an older one; return the version now held."""
    version = _schema_version(con)
    if version is None:
        n_tables = con.execute(
            "SELECT (SELECT count(*) FROM duckdb_tables() WHERE schema_name = 'main' "
            "AND database_name = current_database()) + (SELECT count(*) FROM duckdb_views() "
            "WHERE NOT internal AND schema_name = 'main' AND database_name = current_database())"
        ).fetchone()
        if n_tables and n_tables[0]:
            raise StoreError(path, "not a tracekit store (a DuckDB file with other tables)")
        con.execute("BEGIN")
        try:
            con.execute(schema.tables_sql())
            con.execute(schema.views_sql())
            con.execute("INSERT INTO tracekit_schema VALUES (?, ?)", [SCHEMA_VERSION, utc_now()])
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        return SCHEMA_VERSION
    _check_version(Path(path), version)
    if version < SCHEMA_VERSION:
        migrate(con, version, SCHEMA_VERSION)
    return SCHEMA_VERSION


def migrate(
    con: duckdb.DuckDBPyConnection,
    from_version: int,
    to_version: int,
    steps: dict[int, Migration] | None = None,
) -> None:
    """Apply ``steps[v]`` for ``v`` in ``[from_version, to_version)`` in one transaction."""
    steps = MIGRATIONS if steps is None else steps
    con.execute("BEGIN")
    try:
        for v in range(from_version, to_version):
            if v not in steps:
                raise StoreError("<store>", f"no migration from schema {v} to {v + 1}")
            steps[v](con)
            con.execute("INSERT INTO tracekit_schema VALUES (?, ?)", [v + 1, utc_now()])
        con.execute(schema.views_sql())
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


@contextmanager
def open_store(
    path: str | Path | None = None, *, read_only: bool = False
) -> Iterator[duckdb.DuckDBPyConnection]:
    """Context manager around :func:`connect` that prints a notice while waiting for a lock."""
    p = resolve_store(path)

    def notice() -> None:
        print(lock_wait_notice(p), file=sys.stderr)

    con = connect(p, read_only=read_only, on_wait=notice)
    try:
        yield con
    finally:
        close(con)


#: A run id prefix must have at least this many characters to name a run.
MIN_RUN_PREFIX = 4


def match_run_id(known: Iterable[str], run_id: str, path: str | Path) -> str:
    """The stored run id that ``run_id`` names among ``known``: itself, or the one id it is a
    prefix of (at least :data:`MIN_RUN_PREFIX` characters). No match, or a prefix of several ids,
    is a :class:`TraceInputError` that says which runs match."""
    ids = sorted(k for k in known if k == run_id or (len(run_id) >= MIN_RUN_PREFIX and k.startswith(run_id)))
    if run_id in ids:
        return run_id
    if len(ids) == 1:
        return ids[0]
    if not ids:
        short = f" (a prefix needs at least {MIN_RUN_PREFIX} characters)" if len(run_id) < MIN_RUN_PREFIX else ""
        raise TraceInputError(Path(path), f"no run {run_id!r} in the store{short} (see `tracekit runs`)")
    more = f" and {len(ids) - 5} more" if len(ids) > 5 else ""
    raise TraceInputError(Path(path), f"run id prefix {run_id!r} is ambiguous: it matches {', '.join(ids[:5])}{more}")


def resolve_run_id(con: duckdb.DuckDBPyConnection, run_id: str, path: str | Path) -> str:
    """:func:`match_run_id` against the runs of the store open on ``con``."""
    rows = con.execute("SELECT run_id FROM run_meta WHERE starts_with(run_id, ?)", [run_id]).fetchall()
    return match_run_id([r[0] for r in rows], run_id, path)


def update_run_meta(
    con: duckdb.DuckDBPyConnection, run_id: str, *, label: str | None = None, workload: str | None = None,
    tags: dict[str, str] | None = None,
) -> list[str]:
    """Set a run's label and workload and merge ``tags`` into its tags (a key given replaces its
    value), inside the caller's transaction; return the fields that changed (``label``,
    ``workload``, ``tags``)."""
    row = con.execute("SELECT label, workload, tags FROM run_meta WHERE run_id = ?", [run_id]).fetchone()
    if row is None:
        return []
    old_label, old_workload, old_tags = row
    merged = {**(dict(old_tags) if old_tags else {}), **(tags or {})}
    changed = [name for name, new, old in (("label", label, old_label), ("workload", workload, old_workload))
               if new is not None and new != old]
    if tags and merged != (dict(old_tags) if old_tags else {}):
        changed.append("tags")
    if changed:
        con.execute(
            "UPDATE run_meta SET label = ?, workload = ?, tags = MAP(?::VARCHAR[], ?::VARCHAR[]) WHERE run_id = ?",
            [label if label is not None else old_label, workload if workload is not None else old_workload,
             list(merged), list(merged.values()), run_id])
    return changed


def delete_runs(con: duckdb.DuckDBPyConnection, run_ids: Iterable[str]) -> int:
    """Remove runs from every base table in one transaction; return how many were removed."""
    ids = [r[0] for r in con.execute("SELECT run_id FROM run_meta WHERE run_id IN (SELECT unnest(?::VARCHAR[]))",
                                     [list(run_ids)]).fetchall()]
    if not ids:
        return 0
    con.execute("BEGIN")
    try:
        for table in RUN_TABLES:
            con.execute(f"DELETE FROM {table} WHERE run_id IN (SELECT unnest(?::VARCHAR[]))", [ids])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return len(ids)


def delete_run(con: duckdb.DuckDBPyConnection, run_id: str) -> int:
    """Remove one run from every base table; return how many runs were removed (0 or 1)."""
    return delete_runs(con, [run_id])
