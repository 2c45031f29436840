"""WSGI entry point for production servers::

    TRACEKIT_STORE=/data/tracekit.duckdb gunicorn -w 4 -b 127.0.0.1:8050 tracekit.dashboard.wsgi:application

The store is ``$TRACEKIT_STORE`` (default ``./tracekit.duckdb``; a lake URL too), opened read-only per request.
"""

from __future__ import annotations

from tracekit.dashboard import check_store
from tracekit.dashboard.app import create_app
from tracekit.store import resolve_store

application = create_app(check_store(resolve_store())).server
