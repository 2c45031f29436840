"""The CI smoke fuzz of the C modules under ASan + UBSan (``tools/fuzz_smoke.py``, issue 18), run
small: a handful of inputs must pass cleanly, and the same run over a copy of ``_xplane_wire.c``
with a planted one-byte over-read must fail with an AddressSanitizer report and a saved
reproducer. The full run (thousands of inputs, C vs pure-Python files) is the script's own CI
step. Skipped where there is no C compiler or no shared ASan runtime."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "fuzz_smoke.py"


def _smoke(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    p = subprocess.run([sys.executable, str(SCRIPT), "--no-corpus", "--out", str(tmp_path / "failures"), *args],
                       capture_output=True, text=True, timeout=600, check=False)
    if p.returncode == 3:
        pytest.skip(p.stdout.strip())  # "fuzz smoke: unavailable: <why>" (no compiler or ASan runtime)
    return p


def test_a_handful_of_inputs_run_clean_under_the_sanitizers(tmp_path: Path) -> None:
    p = _smoke(tmp_path, "--inputs", "40", "--file-inputs", "1")
    assert p.returncode == 0, p.stdout + p.stderr[-4000:]
    last = p.stdout.strip().splitlines()[-1]
    assert last.startswith("fuzz smoke: 80 inputs + 2 files,") and ", clean (" in last, last
    assert not (tmp_path / "failures").exists()


def test_a_planted_off_by_one_read_is_caught(tmp_path: Path) -> None:
    p = _smoke(tmp_path, "--plant-bug", "--inputs", "400", "--file-inputs", "0")
    assert p.returncode == 1, p.stdout + p.stderr[-4000:]
    assert "ERROR: AddressSanitizer: heap-buffer-overflow" in p.stderr
    assert "in varint" in p.stderr  # the planted read, not some other report
    saved = [line.rsplit(" ", 1)[-1] for line in p.stderr.splitlines() if "input saved to" in line]
    assert saved and Path(saved[0]).is_file() and Path(saved[0]).parent == tmp_path / "failures"
    assert "FAILED in _xplane_wire" in p.stdout.strip().splitlines()[-1]
