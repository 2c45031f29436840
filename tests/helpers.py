"""Small helpers for tests: run the real CLI in a subprocess, hash files, query with the SQL library."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``tracekit ARGS`` as a separate process (the console script's entry point)."""
    full_env = dict(os.environ)
    full_env.pop("TRACEKIT_STORE", None)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", "from tracekit.cli.main import main; main()", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        check=False,
    )


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def library_query(store: Path, sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
    """Run ``sql`` on a read-only connection to ``store`` with the analysis SQL library installed."""
    import tracekit
    from tracekit.analysis import library

    con = tracekit.connect(store, read_only=True)
    try:
        library.install(con)
        return con.execute(sql, params).fetchall()
    finally:
        con.close()
