"""The fleet queries written by hand in Spark SQL, over ``tracekit lake export``'s Parquet
(:mod:`tracekit.lake.export`), each paired with the DuckDB statement or function it reproduces.

They are ported by hand, not translated: sqlglot turned DuckDB's ``list(v ORDER BY …)`` into
Spark's ``collect_list(v)``, which drops the order ``tracekit check``'s series depends on, and
passed ``isfinite`` through to Spark, which has no such function
(``shared/reference/team-store-and-fleet.md`` §2.8). So these statements return one row per value
in an explicit order instead of aggregating into lists, and spell out each DuckDB function they
replace. ``tests/test_spark_fleet.py`` runs each in Spark local mode and compares its rows with
DuckDB's answer to the same question on the same store.

Use (pyspark; the session time zone does not matter, every timestamp is ``timestamp_ntz``)::

    for stmt in spark_views_sql("/data/tracekit-export"):
        spark.sql(stmt)
    spark.sql(NO_RUN_HARDWARE)          # or a run_hardware(run_id, hardware) view of your own
    rows = spark.sql(CHECK_HISTORY.spark_sql, args={"workload": "llama3-8b-decode", "window": 50})

The statements read the base tables (``run_meta``, ``metric_rows``, …) that the export holds, so
each spells out the public views it needs (``runs`` is ``run_meta``; ``run_device_totals``
below). Named parameters are Spark's ``:name`` (``spark.sql(sql, args={…})``, Spark ≥ 3.4).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tracekit.store import RUN_TABLES

__all__ = [
    "CHECK_HISTORY", "FLEET_QUERIES", "NO_RUN_HARDWARE", "RUNS_PAGE", "RUNS_SQL_PORTED_SHA256", "WEEKLY_TRENDS",
    "FleetQuery", "spark_views_sql",
]


@dataclass(frozen=True)
class FleetQuery:
    """A fleet question in Spark SQL, and the DuckDB code whose answer it reproduces.

    Attributes:
        name: Short name.
        spark_sql: The Spark SQL statement (named parameters ``:name``).
        params: Its parameters, name → what to pass.
        mirrors: The DuckDB statement or function it reproduces, as ``module.name``.
        columns: The result's columns, in order, with units.
        differences: Where its result may differ from DuckDB's, and why ("" when it may not).
    """

    name: str
    spark_sql: str
    params: dict[str, str]
    mirrors: str
    columns: str
    differences: str


def _spark_string(text: str) -> str:
    """A Spark SQL string literal (backslash escapes are on by default in Spark SQL)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def spark_views_sql(export_dir: str | Path) -> list[str]:
    """``CREATE OR REPLACE TEMPORARY VIEW <table> USING parquet`` for every table of the export
    at ``export_dir`` (a local path or any URL Spark reads, e.g. ``s3a://…``): the names the
    statements below read. ``month`` (the Hive partition) is a column of each."""
    base = str(export_dir).rstrip("/")
    return [f"CREATE OR REPLACE TEMPORARY VIEW {t} USING parquet OPTIONS (path {_spark_string(base + '/' + t)})"
            for t in RUN_TABLES]


#: An empty ``run_hardware(run_id, hardware)`` view, for :data:`WEEKLY_TRENDS` without tracekit's
#: device identification: every run is then grouped by its trace's ``device_name`` (else vendor).
NO_RUN_HARDWARE = ("CREATE OR REPLACE TEMPORARY VIEW run_hardware AS "
                   "SELECT CAST(NULL AS STRING) AS run_id, CAST(NULL AS STRING) AS hardware WHERE false")

CHECK_HISTORY = FleetQuery(
    name="check history",
    spark_sql="""
WITH h AS (
  -- the workload's runs, newest first: the reverse of check's
  -- ORDER BY captured_at NULLS FIRST, ingested_at, run_id
  SELECT run_id,
         row_number() OVER (ORDER BY captured_at DESC NULLS LAST, ingested_at DESC, run_id DESC) AS newest
  FROM run_meta
  WHERE workload = :workload
), w AS (
  -- the newest :window of them, numbered oldest first (ord 1 = oldest considered run)
  SELECT run_id, row_number() OVER (ORDER BY newest DESC) AS ord
  FROM h
  WHERE newest <= :window
)
SELECT m.name, m.analyzer, m.unit, m.better, w.ord, m.run_id, m.value
FROM metric_rows m
JOIN w ON m.run_id = w.run_id
-- DuckDB: value IS NOT NULL AND isfinite(value); Spark has no isfinite
WHERE m.value IS NOT NULL AND NOT isnan(m.value)
  AND m.value NOT IN (CAST('Infinity' AS DOUBLE), CAST('-Infinity' AS DOUBLE))
-- one row per (metric, run) in series order: a list aggregate (collect_list) would not keep it
ORDER BY m.name, m.analyzer, w.ord
""",
    params={"workload": "the workload (runs.workload)",
            "window": "newest runs considered (tracekit.check.gate.CheckConfig.window)"},
    mirrors=("tracekit.check.run_check(history=WORKLOAD): its run list (runs of the workload ORDER BY "
             "captured_at NULLS FIRST, ingested_at, run_id; the newest `window`) and "
             "tracekit.check._series over it (list(value ORDER BY ord) per (name, analyzer))"),
    columns=("name, analyzer, unit, better, ord (1 = oldest run considered), run_id, value (in unit); "
             "one row per finite value, ordered by name, analyzer, ord"),
    differences=("unit and better are each row's own; check takes any_value per (name, analyzer), "
                 "the same when the analyzer's unit did not change"),
)

WEEKLY_TRENDS = FleetQuery(
    name="weekly trends",
    spark_sql="""
WITH r AS (
  -- the workload's runs with a capture time, their ISO week (Monday) and hardware
  SELECT r.run_id, coalesce(h.hardware, r.device_name, r.vendor) AS hardware,
         trunc(CAST(r.captured_at AS DATE), 'WEEK') AS week
  FROM run_meta r
  LEFT JOIN run_hardware h ON h.run_id = r.run_id
  WHERE r.workload = :workload AND r.captured_at IS NOT NULL
), v AS (
  SELECT m.name, r.hardware, r.week,
         median(m.value) AS value,            -- exact, as DuckDB's median (quantile_cont 0.5)
         count(*) AS runs,
         any_value(m.unit) AS unit, any_value(m.better) AS better
  FROM metric_rows m
  JOIN r ON m.run_id = r.run_id
  WHERE array_contains(:names, m.name) AND m.value IS NOT NULL
  GROUP BY m.name, r.hardware, r.week
)
SELECT name, hardware, week, value, runs, unit, better,
       lag(week) OVER (PARTITION BY name, hardware ORDER BY week) AS prev_week,
       lag(value) OVER (PARTITION BY name, hardware ORDER BY week) AS prev_value
FROM v
ORDER BY name, hardware, week
""",
    params={"workload": "the workload (runs.workload)",
            "names": "array of metric names: the dashboard's KEY_METRICS names "
                     "(tracekit.dashboard.data.KEY_METRICS)"},
    mirrors=("tracekit.dashboard.data.weekly_trends(con, workload) (the Weekly review page), "
             "with the TEMP table run_hardware of tracekit.dashboard.data.hardware_table"),
    columns=("name, hardware, week (Monday, DATE), value (median over the week's runs, in unit), "
             "runs (count), unit, better, prev_week, prev_value"),
    differences=("hardware comes from a run_hardware(run_id, hardware) view: tracekit's device "
                 "identification is Python (tracekit.analysis.hardware, its catalog) and not in the "
                 "export; with NO_RUN_HARDWARE every run is grouped by its trace's device_name, else "
                 "vendor. Trino has no exact median (approx_percentile only)"),
)

#: SHA-256 of the text of :data:`tracekit.queries.RUNS_SQL` that :data:`RUNS_PAGE` was ported from
#: (the version reading the schema-5 rollups through ``run_device_totals``); a test fails when
#: ``RUNS_SQL`` changes without the port (``tests/test_fleet_export.py``).
RUNS_SQL_PORTED_SHA256 = "e0100d7e6cda2d28198127e00f1c86c935ba18fd0efbc73bffbfa149ffca0abb"

RUNS_PAGE = FleetQuery(
    name="runs page",
    spark_sql="""
WITH t AS (
  -- the view run_device_totals: the per-run rollups of run_meta (schema 5), counted from
  -- device_activity only for a run written without them (a lake writer older than schema 5)
  SELECT m.run_id,
         coalesce(m.n_device_events, c.n, 0) AS n_device_events,
         coalesce(m.device_time_ns, c.t, 0) AS device_time_ns
  FROM run_meta m
  LEFT JOIN (SELECT run_id, count(*) AS n, sum(dur_ns) AS t
             FROM device_activity
             WHERE run_id IN (SELECT run_id FROM run_meta WHERE n_device_events IS NULL)
             GROUP BY run_id) c ON c.run_id = m.run_id
), rk AS (
  SELECT run_id, max(last_ns - first_ns) AS span_ns FROM rank_meta GROUP BY run_id
)
SELECT r.run_id, r.format, r.vendor, r.device_name, r.label, r.workload, r.n_ranks AS ranks,
       t.n_device_events AS device_events,
       round(t.device_time_ns / 1e6, 3) AS device_time_ms,
       round(rk.span_ns / 1e6, 3) AS span_ms,
       r.captured_at, r.ingested_at, r.source
FROM run_meta r
JOIN t ON t.run_id = r.run_id
LEFT JOIN rk ON rk.run_id = r.run_id
ORDER BY r.ingested_at DESC, r.run_id
""",
    params={},
    mirrors="tracekit.queries.RUNS_SQL (tracekit runs, tracekit.api.list_runs), as of RUNS_SQL_PORTED_SHA256",
    columns=("run_id, format, vendor, device_name, label, workload, ranks, device_events (count), "
             "device_time_ms (ms, 3 decimals), span_ms (ms, 3 decimals), captured_at, ingested_at (UTC), source"),
    differences=("device_time_ms and span_ms at an exact tie (the ns value ends in 500): Spark's round "
                 "rounds half up, DuckDB 2.0's rounds the binary double (its 1.5.5 rounds again "
                 "differently); they then differ by 0.001 ms"),
)

#: Every hand-written fleet query.
FLEET_QUERIES: tuple[FleetQuery, ...] = (CHECK_HISTORY, WEEKLY_TRENDS, RUNS_PAGE)
