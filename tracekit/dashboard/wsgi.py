"""WSGI entry point for production servers::

    TRACEKIT_STORE=/data/tracekit.duckdb gunicorn -w 4 -b 127.0.0.1:8050 tracekit.dashboard.wsgi:application

The store is ``$TRACEKIT_STORE`` (default ``./tracekit.duckdb``), opened read-only per request.
"""

from __future__ import annotations

from tracekit.dashboard import check_store
from tracekit.dashboard.app import create_app
from tracekit.store import default_store_path

application = create_app(check_store(default_store_path())).server
