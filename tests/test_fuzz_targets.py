"""The coverage-guided targets of the C modules (``benchmarks/fuzz_targets/fuzz_kineto_scan.py``,
``benchmarks/fuzz_targets/fuzz_xplane_wire.py``) run briefly: a few hundred inputs each, through the in-repo
mutation loop (always) and under atheris/libFuzzer (when atheris is installed). A long run is
``python benchmarks/fuzz_targets/<target>.py -max_total_time=SECONDS`` (or ``--fallback --seconds SECONDS``)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TARGETS = ("fuzz_kineto_scan", "fuzz_xplane_wire")

pytest.importorskip("tracekit.parsers._kineto_scan", reason="the C scanner is not built here")
pytest.importorskip("tracekit.parsers._xplane_wire", reason="the C wire reader is not built here")


@pytest.mark.parametrize("target", TARGETS)
def test_target_survives_a_few_hundred_mutated_inputs(target: str, tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fuzz_targets" / f"{target}.py"), "--fallback", "--runs", "300",
                        "--seed", "17", "--out", str(tmp_path)], capture_output=True, text=True, timeout=600,
                       check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"{target}: 300 inputs or more, 0 failures" in p.stdout
    assert not list(tmp_path.iterdir()), "inputs were saved as failures"


@pytest.mark.skipif(importlib.util.find_spec("atheris") is None,
                    reason="atheris is not installed (pip install atheris: the coverage-guided runs)")
@pytest.mark.parametrize("target", TARGETS)
def test_target_runs_under_atheris(target: str, tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fuzz_targets" / f"{target}.py"), "-runs=300", "--seed", "17",
                        "--out", str(tmp_path)], capture_output=True, text=True, timeout=600, check=False)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "Done 300 runs" in p.stderr
