"""The hand-written Spark SQL fleet queries (:mod:`tracekit.lake.fleet_spark`) give DuckDB's answers.

One Spark session in local mode (``local[2]``, UI off, bound to 127.0.0.1) for the module reads
``tracekit lake export``'s Parquet of a store with several runs in 3 workloads over 4 months
(``test_fleet_export.build_fleet_store``), runs each statement, and compares its rows with what
tracekit computes with DuckDB on the same store: ``tracekit check --history``'s series, the
dashboard's weekly trends and the Runs page query (``RUNS_SQL``). Rows are compared exactly, in
order, after turning Spark's ``Row``s into tuples; the one tolerance is the Runs page's rounded
milliseconds at an exact tie (documented on ``RUNS_PAGE.differences``), checked to be only that.

Slow (about 2 minutes on 2 cores; the JVM starts in 12–26 s), and skipped, saying why, without
Java or pyspark (``pip install 'tracekit[spark]'``). Timings are printed: ``pytest -s`` shows them.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_fleet_export import build_fleet_store, export_with_odd_types

from tracekit.lake.export import export_parquet
from tracekit.lake.fleet_spark import (
    CHECK_HISTORY,
    NO_RUN_HARDWARE,
    RUNS_PAGE,
    WEEKLY_TRENDS,
    spark_views_sql,
)
from tracekit.store import RUN_TABLES, close, connect

pytestmark = [
    pytest.mark.skipif(shutil.which("java") is None, reason="needs Java (a JRE 17+) for Spark local mode"),
    pytest.mark.skipif(importlib.util.find_spec("pyspark") is None,
                       reason="needs pyspark (pip install 'tracekit[spark]')"),
]

WORKLOADS = ("tiny-decoder-cpu", "amd-synthetic", "jax-cpu")


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - started


def _report(what: str, spark_s: tuple[float, float], duckdb_s: float) -> None:
    print(f"\ntiming {what}: spark {spark_s[0]:.2f} s (first), {spark_s[1]:.2f} s (again); "
          f"duckdb {duckdb_s * 1000:.1f} ms")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the store, its export)."""
    tmp = tmp_path_factory.mktemp("spark-fleet")
    store = tmp / "fleet.duckdb"
    build_fleet_store(store)
    export_parquet(store, tmp / "export")
    return store, tmp / "export"


@pytest.fixture(scope="module")
def spark(fleet: tuple[Path, Path]) -> Iterator[Any]:
    """One local Spark session for the module, with the export's tables as temp views. Its time
    zone is deliberately not UTC: the statements must not depend on it."""
    from pyspark.sql import SparkSession

    saved = os.environ.get("SPARK_LOCAL_IP")
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    session, took = _timed(lambda: (
        SparkSession.builder.master("local[2]").appName("tracekit-fleet-test")
        .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "4")  # the default 200 only costs on small data
        .config("spark.sql.session.timeZone", "Asia/Kolkata")
        .getOrCreate()))
    print(f"\ntiming spark session start: {took:.1f} s")
    session.sparkContext.setLogLevel("ERROR")
    try:
        for stmt in spark_views_sql(fleet[1]):
            session.sql(stmt)
        yield session
    finally:
        session.stop()
        if saved is None:
            os.environ.pop("SPARK_LOCAL_IP", None)
        else:
            os.environ["SPARK_LOCAL_IP"] = saved


def _spark_rows(spark: Any, sql: str, args: dict[str, Any] | None = None) -> tuple[list[tuple[Any, ...]], tuple[float, float]]:
    """The statement's rows as tuples, and its time run first and again (s)."""
    first = _timed(lambda: [tuple(r) for r in spark.sql(sql, args=args).collect()])
    again = _timed(lambda: [tuple(r) for r in spark.sql(sql, args=args).collect()])
    assert again[0] == first[0]
    return first[0], (first[1], again[1])


def test_every_exported_table_reads_in_spark_with_readable_types(spark: Any, fleet: tuple[Path, Path],
                                                                  tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, _out = fleet
    con = connect(store, read_only=True)
    try:
        for table in RUN_TABLES:
            want = con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0]
            assert spark.sql(f"SELECT count(*) FROM {table}").collect()[0][0] == want, table
        captured = con.execute("SELECT captured_at FROM run_meta WHERE captured_at IS NOT NULL "
                               "ORDER BY captured_at").fetchall()
    finally:
        close(con)
    types = dict(spark.table("pc_sample_rows").dtypes)
    assert (types["exec_mask"], types["month"]) == ("decimal(20,0)", "string")
    assert dict(spark.table("run_meta").dtypes)["captured_at"] == "timestamp_ntz"
    # wall-clock UTC comes back unchanged under a session time zone that is not UTC
    got = spark.sql("SELECT captured_at FROM run_meta WHERE captured_at IS NOT NULL ORDER BY captured_at").collect()
    assert [(r[0],) for r in got] == captured
    # types DuckDB writes but Spark refuses (TIMESTAMP_NS) or reads lossily (HUGEINT) arrive cast
    _copy, odd = export_with_odd_types(store, tmp_path, monkeypatch)
    row = spark.read.parquet(str(odd / "odd_rows")).collect()[0].asDict()
    assert (int(row["u"]), int(row["h"]), str(row["tns"])) == (2**64 - 1, 2**100, "2026-11-02 10:00:00.123456")


def test_check_history_series_equal_duckdbs(spark: Any, fleet: tuple[Path, Path]) -> None:
    from tracekit.check import CheckConfig, _series, run_check

    store, _out = fleet
    compared = 0
    for workload in WORKLOADS:
        for window in (CheckConfig().window, 3):
            res = run_check(store, history=workload, config=CheckConfig(window=window), analyze_missing=False)
            runs = res.history["runs"]
            con = connect(store, read_only=True)
            try:
                series, duck_s = _timed(lambda c=con, r=runs: _series(c, r))
            finally:
                close(con)
            ord_of = {r: i + 1 for i, r in enumerate(runs)}
            want = [(name, analyzer, s.unit, s.better, ord_of[rid], rid, value)
                    for (name, analyzer), s in sorted(series.items())
                    for rid, value in zip(s.runs, s.values, strict=True)]
            got, spark_s = _spark_rows(spark, CHECK_HISTORY.spark_sql, {"workload": workload, "window": window})
            assert got == want, (workload, window)
            compared += len(got)
            if window == 3 and workload == WORKLOADS[0]:
                _report("check history (duckdb: the series query of check._series)", spark_s, duck_s)
    assert compared > 200  # real series were compared, not empty ones


def test_weekly_trends_equal_the_dashboards(spark: Any, fleet: tuple[Path, Path]) -> None:
    from tracekit.dashboard.data import KEY_METRICS, weekly_trends

    store, _out = fleet
    names = [m.name for m in KEY_METRICS]
    con = connect(store, read_only=True)
    try:
        weekly_trends(con, WORKLOADS[0])  # creates run_hardware, as the dashboard does
        hardware = con.execute("SELECT run_id, hardware FROM run_hardware").fetchall()
        spark.createDataFrame(hardware, "run_id string, hardware string").createOrReplaceTempView("run_hardware")
        compared = 0
        for workload in WORKLOADS:
            points, duck_s = _timed(lambda w=workload: weekly_trends(con, w))
            want = [(p.metric, p.hardware, p.week, p.value, p.runs, p.unit, p.better, p.prev_week, p.prev_value)
                    for p in points]
            got, spark_s = _spark_rows(spark, WEEKLY_TRENDS.spark_sql, {"workload": workload, "names": names})
            assert got == want, workload
            compared += len(got)
            if workload == WORKLOADS[0]:
                assert any(p.runs == 2 for p in points) and any(p.runs == 3 for p in points)  # real medians
                assert len({p.week for p in points}) >= 3
                _report("weekly trends (duckdb: dashboard weekly_trends)", spark_s, duck_s)
        assert compared > 30
        # without tracekit's device identification: grouped by the trace's device name, on both sides
        con.execute("CREATE OR REPLACE TEMP TABLE run_hardware (run_id VARCHAR, hardware VARCHAR)")
        want = [(p.metric, p.hardware, p.week, p.value, p.runs, p.unit, p.better, p.prev_week, p.prev_value)
                for p in weekly_trends(con, "amd-synthetic")]
    finally:
        close(con)
    spark.sql(NO_RUN_HARDWARE)
    got, _ = _spark_rows(spark, WEEKLY_TRENDS.spark_sql, {"workload": "amd-synthetic", "names": names})
    assert got == want
    assert len({r[1] for r in got}) == 2  # the RPD run names its GPU differently


def test_runs_page_equals_runs_sql(spark: Any, fleet: tuple[Path, Path]) -> None:
    from tracekit.queries import RUNS_SQL

    store, _out = fleet
    con = connect(store, read_only=True)
    try:
        rel, duck_s = _timed(lambda: con.execute(RUNS_SQL))
        columns = [d[0] for d in rel.description]
        want = rel.fetchall()
        raw = dict(con.execute("""SELECT run_id, [t.device_time_ns, rk.span_ns] FROM run_device_totals t
                                  LEFT JOIN (SELECT run_id, max(last_ns - first_ns) AS span_ns FROM ranks
                                             GROUP BY run_id) rk USING (run_id)""").fetchall())
    finally:
        close(con)
    df = spark.sql(RUNS_PAGE.spark_sql)
    assert df.columns == columns
    got, spark_s = _spark_rows(spark, RUNS_PAGE.spark_sql)
    _report("runs page (duckdb: RUNS_SQL)", spark_s, duck_s)
    assert len(got) == len(want) > 10
    ms = [columns.index("device_time_ms"), columns.index("span_ms")]
    for g, w in zip(got, want, strict=True):
        assert [v for i, v in enumerate(g) if i not in ms] == [v for i, v in enumerate(w) if i not in ms]
        for k, i in enumerate(ms):
            if g[i] != w[i]:  # only at an exact tie of the rounding, by one unit of the last decimal
                assert raw[w[0]][k] % 1000 == 500 and abs(g[i] - w[i]) == pytest.approx(0.001), (w[0], g[i], w[i])
