"""``tracekit --version`` says which native (C) helpers ingest uses: tracekit.parsers.native agrees
with the parsers' own switches, in every state (built, turned off, not built)."""

from __future__ import annotations

import sys

import pytest

from tests.helpers import run_cli
from tracekit.parsers import native
from tracekit.parsers._xplane_read import wire_enabled
from tracekit.parsers.kineto import native_scanner_enabled


def _states() -> dict[str, str]:
    return {h.name: h.state for h in native.native_status()}


def test_status_agrees_with_the_parsers_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    for value in ("", "0", "1", "yes"):
        monkeypatch.setenv("TRACEKIT_PURE_PYTHON", value)
        states = _states()
        assert (states["kineto scanner"] == "active") == native_scanner_enabled(), value
        assert (states["xplane wire reader"] == "active") == wire_enabled(), value


def test_pure_python_switch_reports_disabled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEKIT_PURE_PYTHON", "1")
    helpers = native.native_status()
    built = [h for h in helpers if h.state != "not built"]
    assert all(h.state == "disabled" for h in built)
    line = native.status_line(helpers)
    for h in built:
        assert f"{h.name} (C) disabled by TRACEKIT_PURE_PYTHON" in line
        assert h.name in line.split("pure Python for the", 1)[1]


def test_missing_module_reports_not_built(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRACEKIT_PURE_PYTHON", raising=False)
    monkeypatch.setitem(sys.modules, "tracekit.parsers._kineto_scan", None)  # import raises ImportError
    helpers = {h.name: h for h in native.native_status()}
    assert helpers["kineto scanner"].state == "not built"
    assert helpers["kineto scanner"].reason  # the import error is kept
    line = native.status_line(list(helpers.values()))
    assert "kineto scanner (C) not built" in line
    assert line.endswith(f"pure Python for the kineto scanner ({native.PURE_SLOWDOWN})") == (
        helpers["xplane wire reader"].state == "active")


def test_version_prints_the_native_line() -> None:
    default = run_cli("--version", env={"TRACEKIT_PURE_PYTHON": ""})
    off = run_cli("--version", env={"TRACEKIT_PURE_PYTHON": "1"})
    assert default.returncode == off.returncode == 0, default.stderr + off.stderr
    head, line = default.stdout.splitlines()
    assert head.startswith("tracekit ")
    expected = {h.name: h.state for h in native.native_status()}  # this process: variable unset
    for name, state in expected.items():
        assert f"{name} (C) {state}" in line
    assert off.stdout.splitlines()[0] == head
    assert "disabled by TRACEKIT_PURE_PYTHON" in off.stdout.splitlines()[1] or all(
        s == "not built" for s in expected.values())


def test_version_imports_no_parser() -> None:
    """--version stays fast: neither DuckDB nor a parser module (protobuf, numpy) is imported."""
    import subprocess

    code = ("import sys\nfrom tracekit.cli.main import main\nsys.argv = ['tracekit', '--version']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m in ('duckdb', 'numpy', 'google.protobuf', "
            "'tracekit.parsers.kineto', 'tracekit.parsers._xplane_read')))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-1] == "[]"
