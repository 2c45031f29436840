"""``tracekit lake export`` of a lake (a SQLite-catalog DuckLake; ``tests/test_lake.py``'s
fixture): the export reads through DuckLake, so it holds exactly the lake's current rows (a
deleted run is gone, though its Parquet files are still on disk), names the snapshot it read, and
partitions by capture month as for a store file. Runs in ``.venv-lake`` (DuckDB 1.5.5 with the
DuckLake extension packages); skips elsewhere, saying so.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import duckdb
import pytest
from helpers import run_cli
from test_fleet_export import assert_export_matches
from test_lake import SAMPLE_RUNS, _ok, sqlite_lake  # noqa: F401 - sqlite_lake: the fixture

from tracekit.lake.catalog import snapshot_id
from tracekit.lake.export import MANIFEST
from tracekit.store import close, connect

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("duckdb_extension_ducklake") is None,
    reason="needs tracekit[lake] (DuckDB 1.5.5 + the DuckLake extension packages); .ci/run runs these in .venv-lake",
)


def test_a_lake_exports_its_current_rows_by_month(sqlite_lake: str, tmp_path: Path) -> None:  # noqa: F811
    ids = []
    for path, at in zip(SAMPLE_RUNS[:3], ("2026-09-03T10:00:00", "2026-09-30T23:00:00", "2026-10-01T01:00:00"),
                        strict=True):
        ids += [r["run_id"] for r in json.loads(_ok(run_cli("ingest", str(path), "--store", sqlite_lake,
                                                            "--workload", "w", "--captured-at", at, "--json")))]
    _ok(run_cli("analyze", ids[0], "--store", sqlite_lake))
    _ok(run_cli("delete", ids[1], "--store", sqlite_lake))
    out = tmp_path / "export"
    manifest = json.loads(_ok(run_cli("lake", "export", sqlite_lake, str(out), "--json")))
    assert_export_matches(sqlite_lake, out)
    con = connect(sqlite_lake, read_only=True)
    try:
        assert manifest["lake_snapshot"] == snapshot_id(con) is not None
    finally:
        close(con)
    assert json.loads((out / MANIFEST).read_text())["lake_snapshot"] == manifest["lake_snapshot"]
    assert manifest["tables"]["run_meta"]["rows"] == 2 and manifest["tables"]["metric_rows"]["rows"] > 0
    assert manifest["tables"]["run_meta"]["months"] == ["2026-09", "2026-10"]
    # the deleted run is in no exported table (its files are still in the lake's data directory)
    for table in manifest["tables"]:
        got = duckdb.sql(f"SELECT DISTINCT run_id FROM read_parquet('{out}/{table}/**/*.parquet')").fetchall()
        assert {r[0] for r in got} <= {ids[0], ids[2]}, table
    # … while DuckLake's own Parquet files still hold its rows: a reader of those files would see it
    direct = duckdb.sql(f"SELECT count(*) FROM read_parquet('{tmp_path}/data/main/device_activity/*.parquet', "
                        f"union_by_name = true) WHERE run_id = '{ids[1]}'").fetchall()
    assert direct[0][0] > 0
