"""Shared fixtures. Tests that need the real-trace corpus in ../shared skip, saying why, without it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("TRACEKIT_SHARED", ROOT.parent / "shared"))
CORPUS = SHARED / "corpus"
KINETO = CORPUS / "kineto"
SAMPLES = ROOT / "sample_traces"
TOOLS = ROOT / "tools"
BENCHMARKS = ROOT / "benchmarks"

# The sample generators (tools/make_*.py) and the check simulation (benchmarks/check_simulation.py)
# are scripts beside the package, not in it; tests import them as top-level modules from these two
# folders. This is the one place that puts them on the import path.
for _folder in (TOOLS, BENCHMARKS):
    if str(_folder) not in sys.path:
        sys.path.append(str(_folder))

needs_shared = pytest.mark.skipif(
    not KINETO.is_dir(),
    reason=f"real-trace corpus not found at {KINETO} (only in the project's workspace and CI, "
    "not in a user's clone)",
)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """Path of a store that does not exist yet."""
    return tmp_path / "store.duckdb"
