"""``tracekit lake export``: a store's run tables as Hive-partitioned Parquet for Spark and Trino
(:mod:`tracekit.lake.export`). Every table's rows and every column's values are the store's, each
row lies in its run's capture month, types Spark cannot read are cast, and an export is all or
nothing. The Spark side is ``tests/test_spark_fleet.py``; a lake source, ``tests/test_lake_export.py``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import duckdb
import pytest
from conftest import SAMPLES
from helpers import run_cli

import tracekit
from tracekit.lake import export as export_mod
from tracekit.lake.export import MANIFEST, PARTITION_COLUMN, SPARK_CASTS, export_parquet, exported_type
from tracekit.lake.fleet_spark import RUNS_SQL_PORTED_SHA256
from tracekit.store import RUN_TABLES, SCHEMA_VERSION, close, connect

WEEKLY = SAMPLES / "weekly"

#: The fleet store: (sample, workload, captured_at) — 3 workloads over September to November 2026,
#: weeks with 1, 2 and 3 runs (medians of odd and even counts), and two runs captured at the same
#: instant (check's order then falls to ingested_at).
FLEET_RUNS: tuple[tuple[Path, str, dt.datetime | None], ...] = (
    (WEEKLY / "tiny_decoder_bs1_exact", "tiny-decoder-cpu", dt.datetime(2026, 10, 19, 10)),
    (WEEKLY / "tiny_decoder_bs2_exact", "tiny-decoder-cpu", dt.datetime(2026, 10, 21, 9)),
    (WEEKLY / "tiny_decoder_bs4_exact", "tiny-decoder-cpu", dt.datetime(2026, 10, 26, 10)),
    (WEEKLY / "tiny_decoder_bs4_bucket64", "tiny-decoder-cpu", dt.datetime(2026, 11, 2, 10)),
    (WEEKLY / "tiny_decoder_bs8_bucket64", "tiny-decoder-cpu", dt.datetime(2026, 11, 3, 23, 59)),
    (WEEKLY / "tiny_decoder_bs8_exact", "tiny-decoder-cpu", dt.datetime(2026, 11, 8, 23, 59)),
    (SAMPLES / "amd_synthetic.rpd", "amd-synthetic", dt.datetime(2026, 9, 7, 12)),
    (SAMPLES / "amd_synthetic_rocpd", "amd-synthetic", dt.datetime(2026, 9, 7, 12)),
    (SAMPLES / "amd_synthetic_csv", "amd-synthetic", dt.datetime(2026, 9, 14, 12)),
    (SAMPLES / "amd_synthetic_pc_csv", "amd-synthetic", dt.datetime(2026, 9, 30, 23)),
    (SAMPLES / "amd_synthetic_pc_rocpd", "amd-synthetic", dt.datetime(2026, 10, 1, 1)),
    (SAMPLES / "jax_cpu_decode_recompile.xplane.pb.gz", "jax-cpu", None),
    (SAMPLES / "cpu_torch_compile_recompile.pt.trace.json.gz", "jax-cpu", None),
)


def build_fleet_store(store: Path) -> None:
    """Ingest :data:`FLEET_RUNS` into ``store`` and analyze them (findings and metrics). The last
    run's capture time is then cleared, as for a trace that states none: its month is its ingest
    month, and ``check`` orders it first."""
    from tracekit.run_analysis import analyze_runs

    for path, workload, at in FLEET_RUNS:
        tracekit.ingest([path], store, workload=workload, captured_at=at)
    analyze_runs([], store)
    con = duckdb.connect(str(store))
    try:
        con.execute("UPDATE run_meta SET captured_at = NULL WHERE source = ?", [str(FLEET_RUNS[-1][0])])
    finally:
        con.close()


@pytest.fixture(scope="module")
def fleet_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = tmp_path_factory.mktemp("fleet") / "fleet.duckdb"
    build_fleet_store(store)
    return store


@pytest.fixture(scope="module")
def exported(fleet_store: Path) -> tuple[Path, dict[str, Any]]:
    out = fleet_store.parent / "export"
    return out, export_parquet(fleet_store, out)


def _source_rows(store: str | Path, sql: str) -> list[tuple[Any, ...]]:
    con = connect(store, read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        close(con)


def _checksums(columns: list[str]) -> str:
    """Per column: rows, non-NULL values and an order-free checksum of the values as text (the
    export's casts keep the text: DECIMAL(20,0) prints as the UBIGINT did, VARCHAR as the JSON)."""
    return ", ".join(f"count(*), count({c}), sum(hash(CAST({c} AS VARCHAR)))" for c in columns)


def assert_export_matches(store: str | Path, out: Path) -> None:
    """Every table of the export at ``out`` holds the rows of ``store``: the same row count, the
    same column names in the same order (plus ``month``), the same checksum of every column, and
    each row lies in the partition of its run's month (capture time, else ingest time, UTC)."""
    manifest = json.loads((out / MANIFEST).read_text())
    months = dict(_source_rows(store, "SELECT run_id, strftime(coalesce(captured_at, ingested_at), '%Y-%m') FROM run_meta"))
    con = duckdb.connect()
    try:
        con.execute("CREATE TABLE run_month (run_id VARCHAR, month VARCHAR)")
        con.executemany("INSERT INTO run_month VALUES (?, ?)", list(months.items()))
        for table in RUN_TABLES:
            cols = [r[0] for r in _source_rows(store, f"DESCRIBE {table}")]
            quoted = [f'"{c}"' for c in cols]
            files = f"read_parquet('{out}/{table}/**/*.parquet', hive_partitioning = true, union_by_name = true)"
            got_cols = [r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {files}").fetchall()]
            assert got_cols == [*cols, PARTITION_COLUMN], table
            want = _source_rows(store, f"SELECT {_checksums(quoted)} FROM {table}")
            assert con.execute(f"SELECT {_checksums(quoted)} FROM {files}").fetchall() == want, table
            assert manifest["tables"][table]["rows"] == want[0][0], table
            misplaced = con.execute(f"SELECT count(*) FROM {files} e JOIN run_month r USING (run_id) "
                                    "WHERE e.month IS DISTINCT FROM r.month").fetchall()
            assert misplaced == [(0,)], table
    finally:
        con.close()


def test_every_table_and_column_equals_the_store(fleet_store: Path, exported: tuple[Path, dict[str, Any]]) -> None:
    out, manifest = exported
    assert_export_matches(fleet_store, out)
    # the store is a real one: most tables hold rows, so equal checksums are not of empty tables
    assert sum(1 for t in manifest["tables"].values() if t["rows"]) >= 10
    assert manifest["schema_version"] == SCHEMA_VERSION and manifest["lake_snapshot"] is None
    assert manifest["tracekit_version"] == tracekit.__version__


def test_partitions_are_the_runs_capture_months(fleet_store: Path, exported: tuple[Path, dict[str, Any]]) -> None:
    out, manifest = exported
    runs = _source_rows(fleet_store, "SELECT DISTINCT strftime(coalesce(captured_at, ingested_at), '%Y-%m') "
                                     "FROM run_meta ORDER BY 1")
    months = [r[0] for r in runs]
    assert {"2026-09", "2026-10", "2026-11"} <= set(months)
    assert sorted(p.name for p in (out / "run_meta").iterdir()) == [f"{PARTITION_COLUMN}={m}" for m in months]
    assert manifest["tables"]["run_meta"]["months"] == months
    # each partition directory holds DuckDB's Parquet files and nothing else
    for table in RUN_TABLES:
        for p in (out / table).rglob("*"):
            assert p.is_dir() or p.suffix == ".parquet", p
    # a table without rows: one file with its columns, so Spark and Trino still find its schema
    empty = [t for t, v in manifest["tables"].items() if v["rows"] == 0]
    assert empty, "the fleet store has tables without rows (no XLA op costs, lengths or models)"
    for t in empty:
        assert [p.name for p in (out / t).iterdir()] == ["data_0.parquet"]
        assert len(duckdb.sql(f"DESCRIBE SELECT * FROM '{out / t / 'data_0.parquet'}'").fetchall()) == len(
            manifest["tables"][t]["columns"]) + 1


def test_types_spark_cannot_read_are_cast(exported: tuple[Path, dict[str, Any]]) -> None:
    out, manifest = exported
    for table, info in manifest["tables"].items():
        rel = duckdb.sql(f"SELECT * FROM read_parquet('{out}/{table}/**/*.parquet')")
        types = dict(zip(rel.columns, map(str, rel.types), strict=True))
        for name, was_to in info["casts"].items():
            to = was_to.split(" -> ")[1]
            assert types[name] == ("VARCHAR" if to == "JSON text" else to), (table, name)
        assert not set(types.values()) & set(SPARK_CASTS), table
    assert manifest["tables"]["pc_sample_rows"]["casts"] == {"exec_mask": "UBIGINT -> DECIMAL(20,0)"}
    assert manifest["tables"]["rank_meta"]["casts"] == {"trace_metadata": "JSON -> VARCHAR"}


def test_exported_type_of_nested_and_plain_types() -> None:
    assert exported_type("BIGINT") is None
    assert exported_type("MAP(VARCHAR, VARCHAR)") is None
    assert exported_type("BIGINT[]") is None
    assert exported_type("TIMESTAMP WITH TIME ZONE") is None
    assert exported_type("STRUCT(t TIMESTAMP WITH TIME ZONE, j JSON)") is None
    assert exported_type("UBIGINT") == "DECIMAL(20,0)"
    assert exported_type("TIME") == "VARCHAR"
    assert exported_type("STRUCT(a UBIGINT)") == "JSON text"
    assert exported_type("TIMESTAMP_NS[]") == "JSON text"
    assert exported_type("UNION(a INTEGER, b VARCHAR)") == "JSON text"


def export_with_odd_types(store: Path, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A copy of ``store`` with one more run table, ``odd_rows``, of types Spark cannot read
    (UBIGINT, HUGEINT, TIMESTAMP_NS, UUID, INTERVAL, TIME, a STRUCT of UBIGINT), one row for its
    first run, exported with that table added to ``RUN_TABLES`` (as another engineer might add one);
    (the copy, the export)."""
    copy = tmp / "odd.duckdb"
    shutil.copy(store, copy)
    con = duckdb.connect(str(copy))
    try:
        con.execute("""CREATE TABLE odd_rows AS SELECT (SELECT min(run_id) FROM run_meta) AS run_id,
                       18446744073709551615::UBIGINT AS u, (2::HUGEINT ** 100)::HUGEINT AS h,
                       '2026-11-02 10:00:00.123456789'::TIMESTAMP_NS AS tns,
                       '8d0e5c5e-3c1a-4c3e-9a55-0a4f0b8e2b11'::UUID AS id, INTERVAL 90 MINUTE AS span,
                       '10:00:01'::TIME AS t, {'lanes': 18446744073709551615::UBIGINT} AS s""")
    finally:
        con.close()
    monkeypatch.setattr(export_mod, "RUN_TABLES", (*RUN_TABLES, "odd_rows"))
    out = tmp / "odd-export"
    export_parquet(copy, out)
    return copy, out


def test_a_new_table_with_odd_types_is_exported_readably(fleet_store: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    _copy, out = export_with_odd_types(fleet_store, tmp_path, monkeypatch)
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["tables"]["odd_rows"]["rows"] == 1
    rel = duckdb.sql(f"SELECT * EXCLUDE (run_id, month) FROM read_parquet('{out}/odd_rows/**/*.parquet')")
    assert dict(zip(rel.columns, rel.types, strict=True)) == {
        "u": "DECIMAL(20,0)", "h": "DECIMAL(38,0)", "tns": "TIMESTAMP", "id": "VARCHAR", "span": "VARCHAR",
        "t": "VARCHAR", "s": "VARCHAR"}
    row = rel.fetchall()[0]
    assert (int(row[0]), int(row[1])) == (2**64 - 1, 2**100)  # exact, not through a double
    assert row[2] == dt.datetime(2026, 11, 2, 10, 0, 0, 123456)  # ns truncated to µs, as documented
    assert row[3] == "8d0e5c5e-3c1a-4c3e-9a55-0a4f0b8e2b11" and row[5] == "10:00:01"
    assert json.loads(row[6]) == {"lanes": 2**64 - 1}


def test_since_keeps_the_runs_from_that_date(fleet_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "since"
    res = run_cli("lake", "export", str(fleet_store), str(out), "--since", "2026-10-20", "--json")
    assert res.returncode == 0, res.stderr
    manifest = json.loads(res.stdout)
    kept = _source_rows(fleet_store, "SELECT run_id FROM run_meta WHERE coalesce(captured_at, ingested_at) "
                                     ">= DATE '2026-10-20' ORDER BY 1")
    assert 0 < len(kept) < len(FLEET_RUNS)
    got = duckdb.sql(f"SELECT run_id FROM read_parquet('{out}/run_meta/**/*.parquet') ORDER BY 1").fetchall()
    assert got == kept
    assert manifest["since"] == "2026-10-20" and manifest["tables"]["run_meta"]["rows"] == len(kept)
    metric_runs = duckdb.sql(f"SELECT DISTINCT run_id FROM read_parquet('{out}/metric_rows/**/*.parquet')").fetchall()
    assert {r[0] for r in metric_runs} <= {r[0] for r in kept}


def test_an_existing_out_is_refused_unless_it_is_a_previous_export_and_forced(fleet_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    for extra in ([], ["--force"]):
        res = run_cli("lake", "export", str(fleet_store), str(out), *extra)
        assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
        assert res.stderr.startswith(f"error: {out}: ")
        assert [p.name for p in out.iterdir()] == ["notes.txt"]
    assert "--force" in run_cli("lake", "export", str(fleet_store), str(out)).stderr
    # an empty directory is used; a previous export is replaced only with --force
    (out / "notes.txt").unlink()
    assert run_cli("lake", "export", str(fleet_store), str(out), "--since", "2026-11-01").returncode == 0
    first = json.loads((out / MANIFEST).read_text())
    assert run_cli("lake", "export", str(fleet_store), str(out)).returncode == 2
    assert json.loads((out / MANIFEST).read_text()) == first
    res = run_cli("lake", "export", str(fleet_store), str(out), "--force")
    assert res.returncode == 0, res.stderr
    assert json.loads((out / MANIFEST).read_text())["since"] is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporary or old directory left
    # the source itself, or a directory holding it, is never an output
    res = run_cli("lake", "export", str(fleet_store), str(fleet_store.parent))
    assert res.returncode == 2 and "overlaps the source" in res.stderr


def test_a_failed_export_leaves_out_as_it_was(fleet_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = export_mod._export_table
    written: list[str] = []

    def fail_on_the_fourth(con: duckdb.DuckDBPyConnection, table: str, dest: Path, since: dt.date | None) -> dict[str, Any]:
        if len(written) == 3:
            raise duckdb.IOException("disk full (simulated)")
        written.append(table)
        return real(con, table, dest, since)

    monkeypatch.setattr(export_mod, "_export_table", fail_on_the_fourth)
    out = tmp_path / "new"
    with pytest.raises(tracekit.TracekitError, match="disk full"):
        export_parquet(fleet_store, out)
    assert len(written) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no half export, no temporary directory
    # over a previous export with force: the previous one stays whole
    monkeypatch.setattr(export_mod, "_export_table", real)
    export_parquet(fleet_store, out, since="2026-11-01")
    before = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    written.clear()
    monkeypatch.setattr(export_mod, "_export_table", fail_on_the_fourth)
    with pytest.raises(tracekit.TracekitError):
        export_parquet(fleet_store, out, force=True)
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == before
    assert json.loads((out / MANIFEST).read_text())["since"] == "2026-11-01"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new"]


def test_a_bad_since_or_missing_source_is_one_line(tmp_path: Path) -> None:
    res = run_cli("lake", "export", str(tmp_path / "none.duckdb"), str(tmp_path / "out"))
    assert res.returncode == 2 and res.stderr.startswith(f"error: {tmp_path / 'none.duckdb'}: ")
    res = run_cli("lake", "export", str(tmp_path / "none.duckdb"), str(tmp_path / "out"), "--since", "last week")
    assert (res.returncode, res.stderr) == (2, "error: --since last week: expected a date YYYY-MM-DD\n")
    assert list(tmp_path.iterdir()) == []


def test_the_spark_runs_page_was_ported_from_the_current_runs_sql() -> None:
    """The hand-written Spark runs page (``tracekit.lake.fleet_spark.RUNS_PAGE``) is a port of this
    text of ``RUNS_SQL``; when ``RUNS_SQL`` changes, port it again and update ``RUNS_SQL_PORTED_SHA256``
    (``tests/test_spark_fleet.py`` then checks the port's rows against it)."""
    from tracekit.queries import RUNS_SQL

    assert hashlib.sha256(RUNS_SQL.encode()).hexdigest() == RUNS_SQL_PORTED_SHA256, (
        "RUNS_SQL changed: port it to RUNS_PAGE in tracekit/lake/fleet_spark.py")
