"""Creating and compacting a lake: ``tracekit lake init URL`` and ``tracekit lake compact URL``.

Every committed run adds at least one small Parquet file per table it has rows in; read across
thousands of runs, small files cost more than the rows (one file per run per table made the
``check --history`` query 290× slower at 10,000 runs, ``shared/reference/team-store-and-fleet.md``).
:func:`compact` merges adjacent files (``ducklake_merge_adjacent_files``), expires snapshots
older than a retention (``ducklake_expire_snapshots``) and deletes the files no snapshot needs any
more (``ducklake_cleanup_old_files``). Run it nightly (``docs/team-store.md``); it is safe beside
writers (DuckLake commits it as one more snapshot).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import duckdb

from tracekit.errors import StoreError
from tracekit.lake import catalog
from tracekit.lake.claims import claims_for
from tracekit.lake.url import LakeURL, parse_lake_url
from tracekit.sql_text import quote
from tracekit.store import first_line

__all__ = ["CompactResult", "compact", "compact_lake", "init", "init_lake"]


def init(url: LakeURL, version: int, now: object) -> bool:
    """Create tracekit's tables and the claim table in the lake of ``url`` (creating the catalog
    and data directory as needed); True when it was created, False when it existed already."""
    con = duckdb.connect(":memory:")
    try:
        catalog.attach(con, url, read_only=False)
        existing = catalog.schema_version(con)
        if existing is None:
            others = con.execute("SELECT count(*) FROM duckdb_tables() WHERE database_name = ?",
                                 [catalog.ALIAS]).fetchone()
            if others and others[0]:
                raise StoreError(url.text, "this lake has other tables: not a tracekit lake")
            catalog.create_tables(con, version, now)
        claims_for(con, url).create()
        return existing is None
    except duckdb.Error as exc:
        raise StoreError(url.text, f"cannot create the lake: {first_line(exc)}") from None
    finally:
        con.close()


@dataclass(frozen=True)
class CompactResult:
    """What :func:`compact` did.

    Attributes:
        files_before: Data files of the current snapshot before merging.
        files_after: Data files of the current snapshot after merging.
        snapshot: The lake's snapshot id after compaction.
        seconds: Wall time of the whole compaction, s.
    """

    files_before: int
    files_after: int
    snapshot: int | None
    seconds: float


def _n_files(con: duckdb.DuckDBPyConnection) -> int:
    total = 0
    tables = [r[0] for r in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = ?", [catalog.ALIAS]).fetchall()]
    for table in tables:
        row = con.execute(f"SELECT count(*) FROM ducklake_list_files({quote(catalog.ALIAS)}, {quote(table)})"
                          ).fetchone()
        total += int(row[0]) if row else 0
    return total


def compact(url: LakeURL, *, keep_days: float = 7.0) -> CompactResult:
    """Merge the lake's small data files, expire snapshots older than ``keep_days`` days (time
    travel reaches back that far) and delete the files no snapshot needs."""
    started = time.perf_counter()
    con = duckdb.connect(":memory:")
    try:
        catalog.attach(con, url, read_only=False)
        if catalog.schema_version(con) is None:
            raise StoreError(url.text, "no tracekit lake here (create it with `tracekit lake init URL`)")
        before = _n_files(con)
        alias = quote(catalog.ALIAS)
        con.execute(f"CALL ducklake_merge_adjacent_files({alias})")
        con.execute(f"CALL ducklake_expire_snapshots({alias}, older_than => now() - INTERVAL {int(keep_days * 86400)} SECOND)")
        con.execute(f"CALL ducklake_cleanup_old_files({alias}, cleanup_all => true)")
        after = _n_files(con)
        return CompactResult(before, after, catalog.snapshot_id(con), time.perf_counter() - started)
    except duckdb.Error as exc:
        raise StoreError(url.text, f"compaction failed: {first_line(exc)}") from None
    finally:
        con.close()


def init_lake(url: str) -> bool:
    """``tracekit lake init URL``: create the lake of a ``lake:`` URL at this tracekit's schema
    version; True when created, False when it was there already."""
    from tracekit.store import SCHEMA_VERSION, utc_now

    return init(parse_lake_url(url), SCHEMA_VERSION, utc_now())


def compact_lake(url: str, *, keep_days: float = 7.0) -> CompactResult:
    """``tracekit lake compact URL``: :func:`compact` on the lake of a ``lake:`` URL."""
    if not 0 <= keep_days <= 3650:
        raise StoreError(url, f"--keep-days {keep_days:g} is not from 0 to 3650")
    return compact(parse_lake_url(url), keep_days=keep_days)
