"""``tracekit ingest --ray``: one Ray task per run stores what a sequential ingest and analysis
store; into a lake every run lands exactly once; a bad input is one line.

One local Ray instance (2 CPUs, no dashboard, session files in a temp directory, a token in the
environment rather than under the home directory) serves the whole module: Ray takes 7-21 s to
start on 2 cores. The commands run as separate processes that join it by its address, as a user's
``--ray HOST:PORT`` would. Tests needing Ray skip, saying so, without it (``tracekit[ray]``;
``tools/test_lake.sh`` installs it in ``.venv-lake``); the lake tests need ``tracekit[lake]`` too.
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import store_rows
from helpers import CPU_SAMPLE, distinct_copies, run_cli, sha256

from tracekit.store import RUN_TABLES

HAS_RAY = importlib.util.find_spec("ray") is not None
HAS_LAKE = importlib.util.find_spec("duckdb_extension_ducklake") is not None
needs_ray = pytest.mark.skipif(not HAS_RAY, reason="needs tracekit[ray] (pip install 'tracekit[ray]'); "
                               "tools/test_lake.sh installs it in .venv-lake")
needs_lake = pytest.mark.skipif(not HAS_LAKE, reason="needs tracekit[lake] (DuckDB 1.5.5 + the DuckLake extension "
                                "packages); .ci/run runs these in .venv-lake")

if HAS_LAKE:  # the lake tests' own fixture and helpers
    from test_lake import SAMPLE_RUNS, _ok, _rows, sqlite_lake  # noqa: F401 - sqlite_lake is a fixture
else:
    from test_lake import SAMPLE_RUNS

REPO = Path(__file__).resolve().parent.parent
MISSING_RAY = "error: ingest --ray: needs the ray extra: pip install 'tracekit[ray]'\n"


@pytest.fixture(scope="module")
def ray_address() -> Iterator[str]:
    """The address of the module's one local Ray instance."""
    session = tempfile.mkdtemp(prefix="tkray", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_AUTH_MODE", "token")  # read by Ray on import; the commands started below inherit both
        mp.setenv("RAY_AUTH_TOKEN", secrets.token_hex(32))
        import ray

        try:
            context = ray.init(num_cpus=2, include_dashboard=False, _temp_dir=session, log_to_driver=False)
            yield str(context.address_info["gcs_address"])
        finally:
            ray.shutdown()
            shutil.rmtree(session, ignore_errors=True)


def _ingest(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("ingest", *args, timeout=600)


def _errors(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("error:")]


def _run_table_digests(store: Path) -> dict[str, list[object]]:
    """tools/store_rows.py's fingerprint (row count, hash of every non-volatile column) per run table."""
    return {t: d for t, d in store_rows.digest(store).items() if t in RUN_TABLES}


@needs_ray
def test_ray_stores_what_a_sequential_ingest_and_analysis_store(ray_address: str, tmp_path: Path) -> None:
    from tracekit.api import analyze_runs
    from tracekit.ingest import ingest

    paths = [str(p) for p in SAMPLE_RUNS]
    seq, par = tmp_path / "seq.duckdb", tmp_path / "ray.duckdb"
    ingest(paths, seq)
    analyze_runs([], seq)
    res = _ingest(*paths, "--store", str(par), "--ray", ray_address, "--json")
    assert res.returncode == 0, res.stderr
    assert res.stderr.startswith(f"ray: connected to Ray at {ray_address} in ")  # the start-up notice
    got = json.loads(res.stdout)
    assert [r["source"] for r in got] == paths and all(r["created"] for r in got)
    want, have = _run_table_digests(seq), _run_table_digests(par)
    assert have == want
    assert want["host_events"][0] > 10_000 and want["metric_rows"][0] > 0 and want["finding_rows"][0] > 0


@needs_ray
def test_a_bad_input_leaves_the_store_file_unchanged(ray_address: str, tmp_path: Path) -> None:
    store = tmp_path / "s.duckdb"
    first = _ingest(str(SAMPLE_RUNS[0]), "--store", str(store))
    assert first.returncode == 0, first.stderr
    before = sha256(store)
    bad = tmp_path / "broken.pt.trace.json.gz"
    bad.write_bytes(CPU_SAMPLE.read_bytes()[:5000])  # a truncated gzip stream: found bad only by its task
    res = _ingest(*map(str, SAMPLE_RUNS[1:3]), str(bad), "--store", str(store), "--ray", ray_address)
    assert res.returncode == 2
    assert [e.split(":")[1].strip() for e in _errors(res.stderr)] == [str(bad)]
    assert "Traceback" not in res.stderr
    assert sha256(store) == before


@needs_ray
@needs_lake
def test_ray_into_a_lake_stores_every_run_once(ray_address: str, sqlite_lake: str, tmp_path: Path) -> None:
    paths = [str(p) for p in SAMPLE_RUNS]
    first = json.loads(_ok(_ingest(*paths, paths[0], "--store", sqlite_lake, "--ray", ray_address, "--json")))
    ids = [r["run_id"] for r in first]
    assert ids[-1] == ids[0] and len(set(ids)) == len(paths)  # the same trace twice is one run
    new = distinct_copies(tmp_path, 1)[0]
    again = json.loads(_ok(_ingest(paths[1], str(new), "--store", sqlite_lake, "--ray", ray_address, "--json")))
    assert [r["created"] for r in again] == [False, True]
    stored = dict(_rows(sqlite_lake, "SELECT run_id, count(*) FROM run_meta GROUP BY ALL"))
    assert stored == {rid: 1 for rid in {*ids, again[1]["run_id"]}}
    analyzed = {r[0] for r in _rows(sqlite_lake, "SELECT DISTINCT run_id FROM metric_rows")}
    assert analyzed == set(stored)  # each task analyzed its run, and each metric is there once:
    assert _rows(sqlite_lake, "SELECT count(*) FROM (SELECT run_id, analyzer, name FROM metric_rows "
                 "GROUP BY ALL HAVING count(*) > 1)") == [(0,)]


@needs_ray
@needs_lake
def test_a_bad_input_into_a_lake_fails_only_its_own_run(ray_address: str, sqlite_lake: str, tmp_path: Path) -> None:
    """Lake commits are per run: the good runs of the command stay, the bad one is the one line."""
    good = [str(p) for p in distinct_copies(tmp_path, 2)]
    bad = tmp_path / "broken.pt.trace.json.gz"
    bad.write_bytes(Path(good[0]).read_bytes()[:5000])
    res = _ingest(good[0], str(bad), good[1], "--store", sqlite_lake, "--ray", ray_address)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert [e.split(":")[1].strip() for e in _errors(res.stderr)] == [str(bad)]
    assert _rows(sqlite_lake, "SELECT count(*), count(DISTINCT run_id) FROM run_meta") == [(2, 2)]
    again = json.loads(_ok(_ingest(*good, "--store", sqlite_lake, "--ray", ray_address, "--json")))
    assert [r["created"] for r in again] == [False, False]  # committed before the error was reported


def _without_ray(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``tracekit ARGS`` in a process where ``import ray`` fails, as where the extra is absent."""
    env = {k: v for k, v in os.environ.items() if k != "TRACEKIT_STORE"}
    code = "import sys; sys.modules['ray'] = None; from tracekit.cli.main import main; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=120, check=False)


def test_without_ray_the_extra_is_named_in_one_line(tmp_path: Path) -> None:
    store = tmp_path / "s.duckdb"
    res = _without_ray("ingest", str(SAMPLE_RUNS[0]), "--store", str(store), "--ray", "local", cwd=tmp_path)
    assert (res.returncode, res.stderr) == (2, MISSING_RAY)
    assert not store.exists()


def test_a_remote_cluster_cannot_fill_a_store_file(tmp_path: Path) -> None:
    store = tmp_path / "s.duckdb"
    res = _without_ray("ingest", str(SAMPLE_RUNS[0]), "--store", str(store), "--ray", "ray://10.0.0.9:10001",
                       cwd=tmp_path)  # refused before Ray is needed
    assert res.returncode == 2 and res.stderr.count("\n") == 1
    assert res.stderr.startswith("error: --ray: ray://10.0.0.9:10001: ") and "lake" in res.stderr
    assert not store.exists()


def test_ray_and_jobs_are_one_or_the_other(tmp_path: Path) -> None:
    store = tmp_path / "s.duckdb"
    res = _without_ray("ingest", *map(str, SAMPLE_RUNS[:2]), "--store", str(store), "--ray", "local", "--jobs", "2",
                       cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "--ray" in res.stderr
    assert not store.exists()
