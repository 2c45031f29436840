"""Reading a lake many times from one long-lived process (the dashboard): attach once, reuse.

Attaching a lake costs 0.3–1.2 s (extensions, catalog, views) and preparing a new cursor on an
attached one 65 ms (its default database and the TEMP views are per connection, and creating a
view binds it against the lake's catalog), against 25–130 ms for the queries of a page at
10,000 runs (docs/performance.md). So a :class:`ReaderPool` keeps, per lake URL, one attached
read-only connection and the cursors pages have used, each prepared once. A read takes an idle
cursor (or prepares one) and runs inside one transaction, so every query of the read sees one
snapshot: the lake's latest when the read began. When the read ends its transaction is rolled
back and its TEMP tables dropped, so the next read starts clean; a cursor whose read raised a
DuckDB error is closed, and with it the attached connection, so that the next read attaches
again (a restarted catalog server, a lost S3 credential).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import duckdb

from tracekit.lake import catalog

__all__ = ["ReaderPool"]


class ReaderPool:
    """Read-only connections to lakes, attached once per URL and reused by :meth:`read`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bases: dict[str, duckdb.DuckDBPyConnection] = {}
        self._idle: dict[str, list[duckdb.DuckDBPyConnection]] = {}

    @contextlib.contextmanager
    def read(self, url: str) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection to the lake of ``url`` for one read (one page), inside one transaction."""
        base, cur = self._take(url)
        try:
            cur.execute("BEGIN TRANSACTION")
            catalog.mark_snapshot(cur, url)
            yield cur
        except duckdb.Error:
            self._drop(url, base, cur)
            raise
        except BaseException:
            self._give_back(url, base, cur)
            raise
        else:
            self._give_back(url, base, cur)

    def attached(self, url: str) -> duckdb.DuckDBPyConnection | None:
        """The connection attached for ``url``, if any (tests check it is reused)."""
        return self._bases.get(url)

    def close(self) -> None:
        """Close every connection (their cursors with them)."""
        from tracekit.store import close

        with self._lock:
            for cursors in self._idle.values():
                for cur in cursors:
                    with contextlib.suppress(duckdb.Error):
                        cur.close()
            for base in self._bases.values():
                with contextlib.suppress(duckdb.Error):
                    close(base)
            self._bases.clear()
            self._idle.clear()

    def _take(self, url: str) -> tuple[duckdb.DuckDBPyConnection, duckdb.DuckDBPyConnection]:
        from tracekit.store import connect

        with self._lock:
            base = self._bases.get(url)
            if base is None:
                base = self._bases[url] = connect(url, read_only=True)
                self._idle[url] = []
            idle = self._idle[url]
            return base, idle.pop() if idle else catalog.cursor(base)

    def _give_back(self, url: str, base: duckdb.DuckDBPyConnection, cur: duckdb.DuckDBPyConnection) -> None:
        try:
            cur.execute("ROLLBACK")
            cur.execute(f"SET VARIABLE {catalog.READ_KEY_VARIABLE} = NULL")
            for (name,) in cur.execute("SELECT table_name FROM duckdb_tables() WHERE temporary").fetchall():
                cur.execute('DROP TABLE temp.main."{}"'.format(name.replace('"', '""')))
        except duckdb.Error:
            self._drop(url, base, cur)
            return
        with self._lock:
            if self._bases.get(url) is base:
                self._idle[url].append(cur)
                return
        cur.close()  # the pool was closed or re-attached meanwhile

    def _drop(self, url: str, base: duckdb.DuckDBPyConnection, cur: duckdb.DuckDBPyConnection) -> None:
        with contextlib.suppress(duckdb.Error):
            cur.close()
        with self._lock:
            if self._bases.get(url) is not base:
                return
            del self._bases[url]
            for idle in self._idle.pop(url, []):
                with contextlib.suppress(duckdb.Error):
                    idle.close()
        # not closed here: another thread may be reading through it; it is closed (and its spill
        # directory removed) when the last read lets it go
