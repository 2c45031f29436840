"""Reading a lake many times from one long-lived process (the dashboard): attach once, reuse.

Attaching a lake costs 0.3–1.2 s (extensions, catalog, views) and preparing a new cursor on an
attached one 65 ms (its default database and the TEMP views are per connection, and creating a
view binds it against the lake's catalog), against 25–130 ms for the queries of a page at
10,000 runs (docs/performance.md). So a :class:`ReaderPool` keeps, per lake URL, one attached
read-only connection and the cursors pages have used, each prepared once. A read takes an idle
cursor (or prepares one) and runs inside one transaction, so every query of the read sees one
snapshot: the lake's latest when the read began. When the read ends its transaction is rolled
back, which drops the TEMP tables it made, so the next read starts clean.

Failures: a connection that cannot start a read (a restarted catalog server, a lost S3
credential) is dropped and the read retried once on a new attach; if that fails too the read
raises :class:`~tracekit.errors.StoreError`. A read whose queries raise a connection-level DuckDB
error (connection, I/O, fatal) drops the connection so the next read attaches again; any other
error (a bad query, the memory limit) keeps it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import duckdb

from tracekit.errors import StoreError
from tracekit.lake import catalog

__all__ = ["ReaderPool"]

#: DuckDB errors after which a connection is not trusted for the next read.
_CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    duckdb.ConnectionException, duckdb.IOException, duckdb.FatalException, duckdb.InternalException)


class _Lake:
    """One lake's attached connection and its idle cursors."""

    def __init__(self, base: duckdb.DuckDBPyConnection) -> None:
        self.base = base
        self.idle: list[duckdb.DuckDBPyConnection] = []


class ReaderPool:
    """Read-only connections to lakes, attached once per URL and reused by :meth:`read`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards the two dicts; held for no I/O
        self._lakes: dict[str, _Lake] = {}
        self._attach_locks: dict[str, threading.Lock] = {}

    @contextlib.contextmanager
    def read(self, url: str) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection to the lake of ``url`` for one read (one page), inside one transaction
        that reads one snapshot. Raises :class:`StoreError` when the lake cannot be read."""
        lake, cur = self._begin(url)
        try:
            yield cur
        except _CONNECTION_ERRORS:
            self._drop(url, lake, cur)
            raise
        except BaseException:
            self._give_back(url, lake, cur)
            raise
        else:
            self._give_back(url, lake, cur)

    def attached(self, url: str) -> duckdb.DuckDBPyConnection | None:
        """The connection attached for ``url``, if any (tests check it is reused)."""
        lake = self._lakes.get(url)
        return None if lake is None else lake.base

    def close(self) -> None:
        """Close every connection and its cursors (only when no read is in progress: closing a
        connection closes the cursors other threads may be reading through)."""
        from tracekit.store import close

        with self._lock:
            lakes = list(self._lakes.values())
            self._lakes.clear()
        for lake in lakes:
            for cur in lake.idle:
                with contextlib.suppress(duckdb.Error):
                    cur.close()
            with contextlib.suppress(duckdb.Error):
                close(lake.base)

    def _begin(self, url: str) -> tuple[_Lake, duckdb.DuckDBPyConnection]:
        """An idle or new cursor of the lake's connection, inside a new transaction; a connection
        that fails here is dropped and the lake attached again, once."""
        from tracekit.store import first_line

        for attempt in (1, 2):
            lake = self._lake(url)
            cur = None
            try:
                cur = self._cursor(lake)
                cur.execute("BEGIN TRANSACTION")
                catalog.mark_snapshot(cur, url)
                return lake, cur
            except duckdb.Error as exc:
                self._drop(url, lake, cur)
                if attempt == 2:
                    reason = catalog.without_secrets(first_line(exc))
                    raise StoreError(url, f"cannot read the lake: {reason}") from None
        raise AssertionError("unreachable")

    def _lake(self, url: str) -> _Lake:
        """The lake's attached connection, attaching it (outside the pool's lock) if needed."""
        from tracekit.store import connect

        with self._lock:
            lake = self._lakes.get(url)
            if lake is not None:
                return lake
            attach_lock = self._attach_locks.setdefault(url, threading.Lock())
        with attach_lock:  # one attach per lake at a time; other lakes' reads go on
            with self._lock:
                lake = self._lakes.get(url)
            if lake is None:
                lake = _Lake(connect(url, read_only=True))
                with self._lock:
                    self._lakes[url] = lake
            return lake

    def _cursor(self, lake: _Lake) -> duckdb.DuckDBPyConnection:
        with self._lock:
            if lake.idle:
                return lake.idle.pop()
        return catalog.cursor(lake.base)  # 65 ms: outside the lock

    def _give_back(self, url: str, lake: _Lake, cur: duckdb.DuckDBPyConnection) -> None:
        try:
            cur.execute("ROLLBACK")  # also drops the TEMP tables the read made
            cur.execute(f"SET VARIABLE {catalog.READ_KEY_VARIABLE} = NULL")
        except duckdb.Error:
            self._drop(url, lake, cur)
            return
        with self._lock:
            if self._lakes.get(url) is lake:
                lake.idle.append(cur)
                return
        with contextlib.suppress(duckdb.Error):
            cur.close()  # the pool was closed or the lake attached again meanwhile

    def _drop(self, url: str, lake: _Lake, cur: duckdb.DuckDBPyConnection | None) -> None:
        """Forget ``lake``'s connection: its idle cursors are closed; the connection itself is
        not (another thread may be reading through it) and goes, with its spill directory, when
        the last read lets it go."""
        if cur is not None:
            with contextlib.suppress(duckdb.Error):
                cur.close()
        with self._lock:
            if self._lakes.get(url) is not lake:
                return
            del self._lakes[url]
            idle, lake.idle = lake.idle, []
        for other in idle:
            with contextlib.suppress(duckdb.Error):
                other.close()

