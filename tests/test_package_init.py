"""``import tracekit`` stays light (names imported on first use, PEP 562) and ``tracekit.ingest``
stays the function even after the submodule of the same name is imported (which makes the import
system set the package attribute to the module: why tracekit/__init__.py swaps its module class
instead of relying on a module ``__getattr__`` alone)."""

from __future__ import annotations

import subprocess
import sys


def _run(code: str) -> str:
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def test_import_tracekit_loads_no_duckdb() -> None:
    assert _run("import sys, tracekit; print('duckdb' in sys.modules, 'tracekit.ingest' in sys.modules)") == (
        "False False")


def test_ingest_stays_the_function_after_its_module_is_imported() -> None:
    code = ("import tracekit, tracekit.ingest, types\n"
            "from tracekit.ingest import RunOptions\n"
            "print(isinstance(tracekit.ingest, types.FunctionType), tracekit.ingest.__module__)")
    assert _run(code) == "True tracekit.ingest"
