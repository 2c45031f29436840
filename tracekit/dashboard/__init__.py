"""``tracekit dashboard``: a Dash app for weekly performance reviews over a tracekit store.

Pages (see :mod:`tracekit.dashboard.app` for the URL parameters): Runs, Weekly review, Run,
Compare. A store file is opened read-only for each page render, a lake attached once and read one
snapshot per page; no SQL is taken from the user.

    from tracekit.dashboard import create_app
    create_app("tracekit.duckdb").run(host="127.0.0.1", port=8050)

Under a WSGI server use :mod:`tracekit.dashboard.wsgi` (``TRACEKIT_STORE`` names the store).
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import TYPE_CHECKING

from tracekit.errors import StoreError

if TYPE_CHECKING:
    import dash

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8050


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_store(store: str | Path) -> str | Path:
    """The store (a file, or a lake URL), after checking that it opens read-only as a tracekit store."""
    import sys

    from tracekit.store import close, connect, lock_wait_notice, resolve_store

    path = resolve_store(store)
    if isinstance(path, Path) and not path.exists():
        raise StoreError(path, "no such store (ingest a trace first, or pass --store)")
    close(connect(path, read_only=True, on_wait=lambda: print(lock_wait_notice(path), file=sys.stderr)))
    return path


def create_app(store: str | Path, price_sheet: Path | None = None) -> dash.Dash:
    """The Dash app over ``store`` (see :func:`tracekit.dashboard.app.create_app`)."""
    from tracekit.dashboard.app import create_app as _create

    return _create(check_store(store), price_sheet)


__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "check_store", "create_app", "is_loopback"]
