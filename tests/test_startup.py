"""The CLI's start-up tricks (tracekit/cli/startup.py): the read-ahead of ``tracekit ingest FILE``
is started by the entry point and handed down explicitly (Typer's context → the ingest command →
``tracekit.ingest(read_ahead=...)`` → the Kineto parser), never through a module global."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SAMPLES

from tracekit.cli.startup import Startup, start
from tracekit.parsers import kineto
from tracekit.parsers.native import built

TRACE = SAMPLES / "cpu_tiny_decoder_prefill_decode.pt.trace.json.gz"
scanner_built = pytest.mark.skipif(built("_kineto_scan") is None, reason="the C scanner is not built here")


def test_nothing_is_started_for_other_commands_or_files(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRACEKIT_PURE_PYTHON", raising=False)
    assert start(["summary", str(TRACE)]) == Startup()
    assert start(["ingest"]) == Startup()
    assert start(["ingest", "profile.xplane.pb"]) == Startup(is_ingest=True)
    assert start(["ingest", "--format", "xplane", str(TRACE)]) == Startup(is_ingest=True)
    monkeypatch.setenv("TRACEKIT_PURE_PYTHON", "1")
    assert start(["ingest", str(TRACE)]) == Startup(is_ingest=True)  # no C scanner: no read-ahead


@scanner_built
def test_ingest_starts_reading_its_kineto_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRACEKIT_PURE_PYTHON", raising=False)
    started = start(["ingest", "--python-events", str(TRACE), "--store", "x.duckdb"])
    assert started.is_ingest and started.read_ahead is not None
    try:
        assert started.read_ahead.file.path == TRACE and started.read_ahead.file.keep_python
        assert not kineto.__dict__.get("_READ_AHEAD")  # no module-level registry holds it
    finally:
        started.read_ahead.cancel()


# Runs the console script's entry point, recording what ReadAhead.claim answers (the ingest asks
# when it is handed the read-ahead the entry point started).
_ENTRY = """
import sys
from tracekit.parsers import kineto
real = kineto.ReadAhead.claim
def claim(self, *args):
    ok = real(self, *args)
    sys.stderr.write(f"claim {ok}\\n")
    return ok
kineto.ReadAhead.claim = claim
from tracekit.cli import entry
entry()
"""


@scanner_built
@pytest.mark.parametrize("entry", ["tracekit.cli.entry", "tracekit.cli.main.main"])
def test_the_cli_hands_its_read_ahead_to_the_ingest(tmp_path: Path, entry: str) -> None:
    code = _ENTRY if entry == "tracekit.cli.entry" else _ENTRY.replace(
        "from tracekit.cli import entry\nentry()", "from tracekit.cli.main import main\nmain()")
    env = {k: v for k, v in os.environ.items() if k != "TRACEKIT_PURE_PYTHON"}
    store = tmp_path / "s.duckdb"
    res = subprocess.run([sys.executable, "-c", code, "ingest", str(TRACE), "--store", str(store), "--json"],
                         capture_output=True, text=True, env=env, timeout=300, check=False)
    assert res.returncode == 0, res.stderr
    assert res.stderr.splitlines() == ["claim True"]  # asked once, and the read-ahead was used
    assert '"run_id"' in res.stdout
