"""Run-id claims: what keeps concurrent writers from storing one run twice in a lake.

DuckLake has no PRIMARY KEY or UNIQUE, so two writers ingesting the same trace at once would both
insert it (measured: 47 ``run_meta`` rows for 33 runs, ``shared/reference/team-store-and-fleet.md``).
Run ids are content addresses, so the catalog database (PostgreSQL or SQLite, which do have
unique keys) holds a small table ``tracekit_claims(run_id PRIMARY KEY, state, writer,
claimed_at)``: a writer claims a run id with ``INSERT … ON CONFLICT DO NOTHING`` before writing
the run, and marks it ``committed`` after the lake transaction commits. A claim whose writer died
(``claimed`` for longer than the stale timeout, ``TRACEKIT_LAKE_CLAIM_TIMEOUT`` seconds, default
600) is taken over. Times are the catalog server's clock, so writers' clocks need not agree.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from typing import Literal, Protocol

import duckdb

from tracekit.errors import ConfigError
from tracekit.lake.retry import with_retries
from tracekit.lake.url import LakeURL
from tracekit.sql_text import quote

__all__ = ["ANALYSIS_PREFIX", "Claims", "Verdict", "claims_for", "held_while", "stale_after_s", "wait_for", "writer_id"]

#: The claim key of a run's analysis (``analysis:<run id>``): held while one process analyzes the
#: run and stores its findings and metrics, dropped after (never ``committed``). DuckLake inserts
#: do not conflict, so two ``tracekit analyze`` of one run at once would each replace the run's
#: rows "before the other's" and store them twice; holding this key serializes them.
ANALYSIS_PREFIX = "analysis:"

#: ``mine``: this writer holds the claim and writes the run; ``committed``: the run is in the lake;
#: ``busy``: another live writer is writing it now.
Verdict = Literal["mine", "committed", "busy"]

_TABLE = """CREATE TABLE IF NOT EXISTS tracekit_claims (
    run_id TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    writer TEXT NOT NULL,
    claimed_at DOUBLE PRECISION NOT NULL
)"""


def writer_id() -> str:
    """Who holds a claim: ``host:pid:random`` (unique per command)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def stale_after_s() -> float:
    """Seconds after which a ``claimed`` run id is taken over (``TRACEKIT_LAKE_CLAIM_TIMEOUT``)."""
    text = os.environ.get("TRACEKIT_LAKE_CLAIM_TIMEOUT", "600")
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 1 <= value <= 7 * 86400:
        raise ConfigError("TRACEKIT_LAKE_CLAIM_TIMEOUT", f"{text!r} is not a number of seconds from 1 to 604800")
    return value


class Claims(Protocol):
    """The claim table of one lake's catalog."""

    def create(self) -> None:
        """Create the claim table if it is not there."""

    def claim(self, run_id: str, writer: str, stale_s: float) -> Verdict:
        """Claim ``run_id`` for ``writer`` (taking over a claim older than ``stale_s``)."""

    def finish(self, run_id: str, writer: str, committed: bool) -> None:
        """Mark ``writer``'s claim committed, or drop it (the write failed: others may retry)."""

    def forget(self, run_ids: list[str]) -> None:
        """Drop the claims of deleted runs, so they can be ingested again."""


def _verdict(row: tuple[object, ...] | None, writer: str) -> Verdict:
    if row is None:
        return "busy"  # dropped between our statements: the caller asks again
    state, holder = row
    if state == "committed":
        return "committed"
    return "mine" if holder == writer else "busy"


def _concurrent_update(exc: duckdb.Error) -> bool:
    """Whether PostgreSQL refused a claim statement because of another writer's transaction
    (serialization failure or deadlock, SQLSTATE 40001/40P01). Only PostgreSQL's message is read:
    the extension's text quotes the statement first (``Failed to execute query "…": ERROR: …``),
    and its ``ON CONFLICT`` or a writer id must not make a real error (permission, a missing
    table, a lost connection) retried."""
    detail = str(exc).split('": ERROR:', 1)[-1].lower()
    return "could not serialize access" in detail or "deadlock detected" in detail


class PostgresClaims:
    """Claims in the PostgreSQL catalog database, through DuckDB's postgres extension."""

    _NOW = "extract(epoch from clock_timestamp())"

    def __init__(self, con: duckdb.DuckDBPyConnection, url: LakeURL) -> None:
        self.con = con
        con.execute(f"ATTACH IF NOT EXISTS {quote(url.libpq())} AS tracekit_pg (TYPE postgres)")

    def _run(self, sql: str) -> None:
        """Run ``sql`` in the catalog database, again while it fails retryably. DuckDB's postgres
        extension runs each statement in its own REPEATABLE READ transaction, in which an
        ``INSERT … ON CONFLICT`` or ``UPDATE`` that meets a row another writer committed after the
        statement's snapshot fails with "could not serialize access" (seen in CI with 4 writers):
        every statement here is idempotent, so running it again is the documented remedy."""
        with_retries(lambda: self.con.execute(f"CALL postgres_execute('tracekit_pg', {quote(sql)})"),
                     _concurrent_update)

    def create(self) -> None:
        self._run(_TABLE)

    def claim(self, run_id: str, writer: str, stale_s: float) -> Verdict:
        rid, who = quote(run_id), quote(writer)
        self._run(f"INSERT INTO tracekit_claims VALUES ({rid}, 'claimed', {who}, {self._NOW}) "
                  "ON CONFLICT (run_id) DO NOTHING")
        self._run(f"UPDATE tracekit_claims SET writer = {who}, claimed_at = {self._NOW} WHERE run_id = {rid} "
                  f"AND state = 'claimed' AND writer <> {who} AND claimed_at < {self._NOW} - {float(stale_s)}")
        row = self.con.execute(
            "SELECT state, writer FROM postgres_query('tracekit_pg', "
            f"{quote(f'SELECT state, writer FROM tracekit_claims WHERE run_id = {rid}')})").fetchone()
        return _verdict(row, writer)

    def finish(self, run_id: str, writer: str, committed: bool) -> None:
        rid, who = quote(run_id), quote(writer)
        if committed:
            self._run(f"UPDATE tracekit_claims SET state = 'committed' WHERE run_id = {rid} AND writer = {who}")
        else:
            self._run(f"DELETE FROM tracekit_claims WHERE run_id = {rid} AND writer = {who} AND state = 'claimed'")

    def forget(self, run_ids: list[str]) -> None:
        if run_ids:
            self._run(f"DELETE FROM tracekit_claims WHERE run_id IN ({', '.join(quote(r) for r in run_ids)})")


class SqliteClaims:
    """Claims in the SQLite catalog file, through the standard library (busy waits retried)."""

    _NOW = "((julianday('now') - 2440587.5) * 86400.0)"

    def __init__(self, url: LakeURL) -> None:
        self.path = url.catalog_file

    def _run(self, fn: Callable[[sqlite3.Connection], object]) -> object:
        with closing(sqlite3.connect(self.path, timeout=30, isolation_level=None)) as db:
            return fn(db)

    def create(self) -> None:
        self._run(lambda db: db.execute(_TABLE))

    def claim(self, run_id: str, writer: str, stale_s: float) -> Verdict:
        def go(db: sqlite3.Connection) -> tuple[object, ...] | None:
            db.execute("BEGIN IMMEDIATE")
            db.execute(f"INSERT INTO tracekit_claims VALUES (?, 'claimed', ?, {self._NOW}) "
                       "ON CONFLICT (run_id) DO NOTHING", (run_id, writer))
            db.execute(f"UPDATE tracekit_claims SET writer = ?, claimed_at = {self._NOW} WHERE run_id = ? "
                       f"AND state = 'claimed' AND writer <> ? AND claimed_at < {self._NOW} - ?",
                       (writer, run_id, writer, stale_s))
            row = db.execute("SELECT state, writer FROM tracekit_claims WHERE run_id = ?", (run_id,)).fetchone()
            db.execute("COMMIT")
            return tuple(row) if row is not None else None

        row = self._run(go)
        return _verdict(row if isinstance(row, tuple) else None, writer)

    def finish(self, run_id: str, writer: str, committed: bool) -> None:
        if committed:
            self._run(lambda db: db.execute(
                "UPDATE tracekit_claims SET state = 'committed' WHERE run_id = ? AND writer = ?", (run_id, writer)))
        else:
            self._run(lambda db: db.execute(
                "DELETE FROM tracekit_claims WHERE run_id = ? AND writer = ? AND state = 'claimed'",
                (run_id, writer)))

    def forget(self, run_ids: list[str]) -> None:
        self._run(lambda db: db.executemany("DELETE FROM tracekit_claims WHERE run_id = ?",
                                            [(r,) for r in run_ids]))


def claims_for(con: duckdb.DuckDBPyConnection, url: LakeURL) -> Claims:
    """The claim table of ``url``'s catalog (``con`` has the lake's extensions loaded)."""
    if url.catalog == "postgresql":
        return PostgresClaims(con, url)
    return SqliteClaims(url)


@contextmanager
def held_while(claims: Claims, key: str, writer: str, stale_s: float) -> Iterator[None]:
    """Hold the claim ``key`` (waiting while another live writer holds it) for the ``with`` body,
    then drop it: a lock across processes and machines, in the catalog database."""
    wait_for(claims, key, writer, stale_s)
    try:
        yield
    finally:
        claims.finish(key, writer, committed=False)


def wait_for(claims: Claims, run_id: str, writer: str, stale_s: float, poll_s: float = 0.5) -> Verdict:
    """Claim ``run_id``, waiting while another live writer holds it: ``mine`` or ``committed``."""
    while True:
        verdict = claims.claim(run_id, writer, stale_s)
        if verdict != "busy":
            return verdict
        time.sleep(poll_s)
