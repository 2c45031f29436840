"""Where a lake store lives: the ``lake:`` URL a user passes as ``--store`` / ``TRACEKIT_STORE``.

Two catalogs, one data location each::

    lake:postgresql://[USER@]HOST[:PORT]/DB?data=PATH_OR_S3_URL   (many writers, many machines)
    lake:sqlite:///CATALOG_FILE?data=PATH                          (one machine, several processes)

``CATALOG_FILE`` is relative to the working directory unless it starts with ``/`` (so an absolute
one reads ``lake:sqlite:////srv/lake/catalog.sqlite``, as in SQLAlchemy's URLs); a local ``data``
directory likewise.

A password never goes in the URL (it would be printed in every error and alert): PostgreSQL's
own ``PGPASSWORD`` or ``~/.pgpass`` supply it, as for ``psql``. S3 data takes its credentials
from the standard ``AWS_*`` environment variables (:mod:`tracekit.lake.catalog`). Anything a
store path can be that is not a ``lake:`` URL is a file store (:func:`is_lake`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import parse_qs, unquote, urlsplit

from tracekit.errors import StoreError

__all__ = ["LakeURL", "is_lake", "parse_lake_url"]

PREFIX = "lake:"

Catalog = Literal["postgresql", "sqlite"]


def is_lake(store: str | Path | None) -> bool:
    """True when ``store`` names a lake (a ``lake:`` URL) rather than a store file."""
    return isinstance(store, str) and store.startswith(PREFIX)


@dataclass(frozen=True)
class LakeURL:
    """A parsed ``lake:`` URL.

    Attributes:
        text: The URL as given (no password can be in it).
        catalog: ``postgresql`` or ``sqlite``.
        data: Where the Parquet files live: a local directory or an ``s3://bucket/prefix`` URL.
        host, port, user, database: The PostgreSQL catalog's connection (port ``None``: 5432).
        catalog_file: The SQLite catalog's file.
    """

    text: str
    catalog: Catalog
    data: str
    host: str = ""
    port: int | None = None
    user: str = ""
    database: str = ""
    catalog_file: str = ""

    def __str__(self) -> str:
        return self.text

    @property
    def on_s3(self) -> bool:
        """True when the data files live on S3 (or an S3-compatible server)."""
        return self.data.startswith("s3://")

    def libpq(self) -> str:
        """The libpq connection string of the PostgreSQL catalog (``dbname=… host=…``)."""
        parts = [f"dbname={self.database}", f"host={self.host}"]
        if self.port is not None:
            parts.append(f"port={self.port}")
        if self.user:
            parts.append(f"user={self.user}")
        return " ".join(parts)

    def ducklake(self) -> str:
        """The DuckLake ``ATTACH`` target: ``ducklake:postgres:…`` or ``ducklake:sqlite:…``."""
        if self.catalog == "postgresql":
            return f"ducklake:postgres:{self.libpq()}"
        return f"ducklake:sqlite:{self.catalog_file}"


def parse_lake_url(text: str) -> LakeURL:
    """Parse a ``lake:`` URL; a malformed one is a :class:`StoreError` naming it (one line)."""
    if not text.startswith(PREFIX):
        raise StoreError(text, "not a lake URL (lake:postgresql://… or lake:sqlite:///…)")
    rest = text[len(PREFIX):]
    parts = urlsplit(rest)
    query = parse_qs(parts.query, keep_blank_values=True)
    unknown = sorted(set(query) - {"data"})
    if unknown:
        raise StoreError(text, f"unknown lake URL parameter {unknown[0]!r} (only data=… is known)")
    data = (query.get("data") or [""])[-1]
    if not data:
        raise StoreError(text, "no data location: add ?data=DIRECTORY or ?data=s3://BUCKET/PREFIX")
    if "://" in data and not data.startswith("s3://"):
        raise StoreError(text, f"data location {data.split('://')[0]}:// is not supported (a directory or s3://)")
    if not data.startswith("s3://"):
        data = str(Path(data).absolute())  # DuckLake records it in the catalog: not the cwd's
    if parts.scheme in ("postgresql", "postgres"):
        return _postgresql(text, parts.netloc, parts.path, data)
    if parts.scheme == "sqlite":
        if parts.netloc:
            raise StoreError(text, "a SQLite catalog is a local file: lake:sqlite:///PATH?data=…")
        # as SQLAlchemy's sqlite:/// URLs: the file follows the third slash, so
        # lake:sqlite:///team/cat.sqlite is relative and lake:sqlite:////srv/cat.sqlite absolute
        path = unquote(parts.path)[1:]
        if not path or path.endswith("/"):
            raise StoreError(text, "no catalog file: lake:sqlite:///PATH/catalog.sqlite?data=…")
        if data.startswith("s3://"):
            raise StoreError(text, "a SQLite catalog serves one machine: its data must be a local directory")
        return LakeURL(text, "sqlite", data, catalog_file=str(Path(path).absolute()))
    scheme = parts.scheme or "(none)"
    raise StoreError(text, f"unknown lake catalog {scheme!r} (postgresql or sqlite)")


def _postgresql(text: str, netloc: str, path: str, data: str) -> LakeURL:
    userinfo, _, hostport = netloc.rpartition("@")
    if ":" in userinfo:
        raise StoreError(PREFIX + "postgresql://…", "a password does not belong in the URL (it would be "
                         "printed); set PGPASSWORD or use ~/.pgpass")
    host, _, port_text = hostport.partition(":")
    if hostport.startswith("["):  # [IPv6]:port
        host, _, port_text = hostport[1:].partition("]")
        port_text = port_text.lstrip(":")
    if not host:
        raise StoreError(text, "no host: lake:postgresql://[USER@]HOST[:PORT]/DB?data=…")
    port: int | None = None
    if port_text:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise StoreError(text, f"port {port_text!r} is not a number from 1 to 65535")
        port = int(port_text)
    database = unquote(path.lstrip("/"))
    if not database or "/" in database:
        raise StoreError(text, "no database name: lake:postgresql://HOST/DB?data=…")
    return LakeURL(text, "postgresql", data, host=host, port=port, user=unquote(userinfo), database=database)
