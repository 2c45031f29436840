"""Small helpers for tests: run the real CLI in a subprocess, hash files, query with the SQL library."""

from __future__ import annotations

import gzip
import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
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


def peak_rss_of_python(code: str, *args: str, env: dict[str, str] | None = None) -> tuple[int, int, str]:
    """Run ``python -c code ARGS``; return (its peak RSS in bytes, its exit code, its stderr).

    The peak is the child's own ``VmHWM`` (Linux), written at exit: ``ru_maxrss`` of a child
    (``os.wait4``) starts from the RSS of the process that forked it, so under a pytest process
    grown to 700 MB every child would read at least 700 MB."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        report = Path(d) / "vmhwm"
        wrapper = (
            "import atexit\n"
            "def _tracekit_test_peak():\n"
            "    for line in open('/proc/self/status'):\n"
            "        if line.startswith('VmHWM:'):\n"
            f"            open({str(report)!r}, 'w').write(line.split()[1])\n"
            "atexit.register(_tracekit_test_peak)\n"
        ) + code
        res = subprocess.run([sys.executable, "-c", wrapper, *args], capture_output=True, text=True,
                             env={**os.environ, **(env or {})}, timeout=900, check=False)
        return int(report.read_text()) * 1024, res.returncode, res.stderr


#: The bundled CPU trace (real, PyTorch 2.x profiler): small, so tests copy it into many runs.
CPU_SAMPLE = Path(__file__).resolve().parent.parent / "sample_traces" / "cpu_tiny_decoder_prefill_decode.pt.trace.json.gz"


def distinct_copies(tmp: Path, n: int, source: Path = CPU_SAMPLE, stem: str = "copy") -> list[Path]:
    """``n`` byte-distinct gzip copies of a real trace (only the gzip header's time differs), so
    each ingests as its own run with the same events."""
    raw = gzip.decompress(source.read_bytes())
    out = []
    for i in range(n):
        p = tmp / f"{stem}{i:03d}.pt.trace.json.gz"
        p.write_bytes(gzip.compress(raw, mtime=1_700_000_000 + i))
        out.append(p)
    return out


EXAMPLE_SERVER = Path(__file__).resolve().parent.parent / "examples" / "serve_tiny_decoder.py"


def serve_example(*args: str, env: dict[str, str] | None = None, stop_timeout: float = 120) -> Iterator[str]:
    """Run the bundled example server (examples/serve_tiny_decoder.py, ``--port 0``) with ``args``;
    yield its base URL once it listens; stop it with SIGTERM after, which must end it cleanly."""
    proc = subprocess.Popen([sys.executable, str(EXAMPLE_SERVER), "--port", "0", *args],
                            env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until the model is built and the port bound
        assert line.startswith("listening on http://127.0.0.1:"), (line, proc.stderr and proc.stderr.read())
        yield line.split()[-1]
    finally:
        proc.terminate()
        rc = proc.wait(timeout=stop_timeout)
        assert rc == 0, (rc, proc.stderr and proc.stderr.read()[-2000:])  # SIGTERM stops it cleanly



def undo_schema_6(con: Any) -> None:
    """Make a store file (a plain DuckDB connection to it) look as schema 5 wrote it: no request
    sessions or cached tokens, no server metrics (the views are recreated by the migration)."""
    con.execute("DROP VIEW IF EXISTS requests")
    con.execute("DROP VIEW IF EXISTS server_metrics")
    con.execute("DROP TABLE server_metric_rows")
    for column in ("session_id", "turn", "cached_tokens"):
        con.execute(f"ALTER TABLE request_rows DROP COLUMN {column}")
