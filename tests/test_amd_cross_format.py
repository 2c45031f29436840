"""The same rocprofv3 capture read three ways — rocpd database, CSV folder, results.json — gives the
same run (issue 4 acceptance), and each matches the sample's expected_totals.json."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pytest
from conftest import CORPUS

import tracekit

SAMPLE = CORPUS / "rocprof" / "rocpd-v3-sample"
pytestmark = pytest.mark.skipif(
    not SAMPLE.is_dir(), reason=f"rocpd-v3 sample not found at {SAMPLE} (only in the workspace and CI)"
)

QUERIES = {
    "kernels": """SELECT name, count(*), sum(dur_ns), min(start_ns), max(start_ns + dur_ns)
                  FROM kernels WHERE run_id = ? AND category = 'kernel' GROUP BY name ORDER BY name""",
    "copies": """SELECT kind, count(*), sum(dur_ns) FROM kernels
                 WHERE run_id = ? AND category = 'memcpy' GROUP BY kind ORDER BY kind""",
    "api": """SELECT name, count(*) FROM runtime_calls WHERE run_id = ? GROUP BY name ORDER BY name""",
    "markers": """SELECT name, count(*) FROM annotations WHERE run_id = ? GROUP BY name ORDER BY name""",
    "launch_links": """SELECT api_name, count(*) FROM launches WHERE run_id = ? GROUP BY ALL ORDER BY 1""",
    "counters": """SELECT kernel_name, counter, count(*), sum(value) FROM counters WHERE run_id = ?
                   GROUP BY ALL ORDER BY 1, 2""",
    "dispatch": """SELECT dispatch_id, correlation_id, device, stream, grid_x, block_x FROM kernels
                   WHERE run_id = ? AND category = 'kernel' ORDER BY dispatch_id""",
    "device": """SELECT arch, compute_units, xcc_count, clock_mhz, compute_major, compute_minor, device_type
                 FROM devices d
                 JOIN (SELECT DISTINCT run_id, device FROM kernels) k USING (run_id, device)
                 WHERE run_id = ?""",
}


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    store = tmp_path_factory.mktemp("x") / "s.duckdb"
    csv_dir = tmp_path_factory.mktemp("csv") / "csv"
    shutil.copytree(SAMPLE / "vllm_mi300x_decode_csv", csv_dir)
    res = tracekit.ingest(
        [SAMPLE / "vllm_mi300x_decode_results.db", csv_dir, SAMPLE / "482913_results.json"], store=store
    )
    assert [r.format for r in res] == ["rocpd", "rocprofv3", "rocprofv3"]
    return store, {"rocpd": res[0].run_id, "csv": res[1].run_id, "json": res[2].run_id}


@pytest.mark.parametrize("what", sorted(QUERIES))
def test_three_formats_agree(three_runs: tuple[Path, dict[str, str]], what: str) -> None:
    store, runs = three_runs
    con = duckdb.connect(str(store), read_only=True)
    got = {fmt: con.execute(QUERIES[what], [run]).fetchall() for fmt, run in runs.items()}
    con.close()
    assert got["rocpd"], what
    assert got["rocpd"] == got["csv"] == got["json"], what


def test_totals_match_expected_and_bytes_where_the_format_has_them(three_runs: tuple[Path, dict[str, str]]) -> None:
    store, runs = three_runs
    want = json.loads((SAMPLE / "expected_totals.json").read_text())
    con = duckdb.connect(str(store), read_only=True)
    for fmt, run in runs.items():
        n, total = con.execute(
            "SELECT count(*), sum(dur_ns) FROM kernels WHERE run_id = ? AND category = 'kernel'", [run]
        ).fetchone()
        assert (n, total) == (want["kernel_dispatches"], want["kernel_time_ns"]), fmt
        assert con.execute("SELECT count(*) FROM runtime_calls WHERE run_id = ?", [run]).fetchone() == (
            want["hip_api_calls"],
        ), fmt
        assert con.execute("SELECT count(*) FROM annotations WHERE run_id = ?", [run]).fetchone() == (
            want["marker_ranges"],
        ), fmt
        assert con.execute("SELECT count(*) FROM counters WHERE run_id = ?", [run]).fetchone() == (
            want["counter_collection_csv_rows"],
        ), fmt
        copies = con.execute(
            "SELECT count(*), sum(bytes) FROM kernels WHERE run_id = ? AND category = 'memcpy'", [run]
        ).fetchone()
        # the CSV format has no copy sizes; rocpd and JSON do
        assert copies == (want["memory_copies"], None if fmt == "csv" else want["memory_copy_bytes"]), fmt
    con.close()


def test_one_output_folder_with_all_formats_reads_the_most_complete(tmp_path: Path) -> None:
    """`--output-format rocpd json csv` into one folder: the same capture three times is one run,
    read from the rocpd database (it has copy sizes)."""
    out = tmp_path / "prof"
    out.mkdir()
    shutil.copy(SAMPLE / "vllm_mi300x_decode_results.db", out / "482913_results.db")
    shutil.copy(SAMPLE / "482913_results.json", out / "482913_results.json")
    for f in (SAMPLE / "vllm_mi300x_decode_csv").iterdir():
        shutil.copy(f, out / f.name)
    res = tracekit.ingest([out], store=tmp_path / "s.duckdb")
    assert len(res) == 1 and res[0].format == "rocpd" and res[0].n_files == 1


def test_rocpd_counters_in_a_pass_folder_name_their_pass(tmp_path: Path) -> None:
    folder = tmp_path / "pmc_2"
    folder.mkdir()
    shutil.copy(SAMPLE / "vllm_mi300x_decode_results.db", folder / "482913_results.db")
    tracekit.ingest([folder / "482913_results.db"], store=tmp_path / "s.duckdb")
    con = duckdb.connect(str(tmp_path / "s.duckdb"), read_only=True)
    want = json.loads((SAMPLE / "expected_totals.json").read_text())["counter_collection_csv_rows"]
    assert con.execute("SELECT pass, count(*) FROM counters GROUP BY ALL").fetchall() == [("pmc_2", want)]
    con.close()
