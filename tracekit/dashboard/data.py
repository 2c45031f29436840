"""The queries behind the dashboard pages: read-only SQL over the store's public views.

Every function takes an open read-only connection (:func:`tracekit.store.connect` with
``read_only=True``) and aggregates in DuckDB, returning at most a few hundred rows whatever the
size of the run (a 1M-kernel run yields ≤ 7 category rows, ≤ ``TOP_N`` kernels, one histogram
bin per 1/``HIST_BINS`` of the range). Parameters from the URL are bound (``?``/``$name``),
never spliced into SQL; column names that are spliced come from this module's own constants.
Times are ms unless a name says otherwise; shares are fractions in [0, 1].
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any, NamedTuple

import duckdb

from tracekit import formatting as fmt
from tracekit.analysis.categories import category_case_sql
from tracekit.analysis.hardware import catalog_identity, device_kinds
from tracekit.analysis.overview import HEADLINE_KPIS
from tracekit.lake.catalog import read_key


@dataclass(frozen=True)
class MetricDef:
    """A metric the dashboard plots: ``name`` in the ``metrics`` view and a human label.
    Unit and direction (``better``: lower/higher) come from the ``metrics`` rows themselves."""

    name: str
    label: str


#: The weekly review's key metrics, in display order; only those with values for the workload are
#: shown. The metrics ``tracekit check`` gates by default come first, so a GPU workload is trended by
#: its device and step time, not only by what its captures happen to measure.
KEY_METRICS: tuple[MetricDef, ...] = (
    MetricDef("device_kernel_time_ms", "device kernel time"),  # what `tracekit check` gates, first
    MetricDef("step_device_time", "step time (device)"),
    MetricDef("device_busy_fraction", "device busy"),
    MetricDef("decode_step_time_ms", "decode step time"),
    MetricDef("output_tokens_per_s", "output tokens/s"),
    MetricDef("ttft_p95_ms", "TTFT p95"),
    MetricDef("tpot_p95_ms", "TPOT p95"),
    MetricDef("decode_mbu", "decode MBU"),
    MetricDef("decode_mfu", "decode MFU"),
    MetricDef("prefill_mfu", "prefill MFU"),
    MetricDef("tokens_per_step", "tokens per step"),
    MetricDef("compile_time", "compile time"),
    MetricDef("bucket_padding_fraction", "bucket padding (share of prefill time)"),
    MetricDef("stall_weighted_time_fraction", "wave-stall fraction"),
    MetricDef("usd_per_1m_output_tokens", "$ per 1M output tokens"),
)

@dataclass(frozen=True)
class HeadlineColumn:
    """A headline-KPI column of the Runs table: the first of ``names`` (metrics) a run has a value
    for, shown formatted in that metric's unit (and, when the column has several, which one it
    is: ``labels``); ``id`` is the column id and sort key."""

    id: str
    label: str
    names: tuple[str, ...]
    labels: tuple[str, ...] = ()


#: The Runs table's KPI columns (those of :data:`tracekit.analysis.overview.HEADLINE_KPIS` that
#: fit a row), shown when at least one run has a value.
HEADLINE_METRICS: tuple[HeadlineColumn, ...] = tuple(
    HeadlineColumn(k.names[0], k.label, k.names, tuple(lab for _, lab in k.choices)) for k in HEADLINE_KPIS
    if k.label not in ("decode MFU", "prefill MFU"))

#: Request-level metrics of the ``serving`` analyzer, shown on the Run page when present.
SERVING_METRICS = (
    "ttft_p50_ms", "ttft_p95_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p95_ms", "tpot_p99_ms", "itl_p95_ms",
    "e2e_p95_ms", "output_tokens_per_s", "output_tokens_per_s_per_user", "requests_per_s", "request_error_rate",
    "usd_per_1m_output_tokens",
)

#: Sortable Runs-table columns (URL ``sort=``) → SQL column of the runs query.
RUN_SORT_COLUMNS = ("captured_at", "workload", "label", "vendor", "device", "kernels", "critical", "warning",
                    "info", *(m.id for m in HEADLINE_METRICS))

HIST_BINS = 40
TOP_COMPILES = 200
EVIDENCE_CHARS = 4000


def _fmt_time(v: Any) -> Any:
    return v.strftime("%Y-%m-%d %H:%M") if isinstance(v, dt.datetime) else v


def _dicts(rel: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    cols = [d[0] for d in rel.description] if rel.description else []
    return [{c: _fmt_time(v) for c, v in zip(cols, row)} for row in rel.fetchall()]


def run_exists(con: duckdb.DuckDBPyConnection, run_id: str) -> bool:
    return bool(con.execute("SELECT count(*) FROM runs WHERE run_id = ?", [run_id]).fetchall()[0][0])


def run_choices(con: duckdb.DuckDBPyConnection) -> list[dict[str, str]]:
    """Dropdown options for every run: ``run_id — workload/label, vendor device``."""
    rows = con.execute(
        """SELECT run_id, concat_ws(' · ', run_id, coalesce(workload, label, source), vendor, device_name)
           FROM runs ORDER BY captured_at DESC NULLS LAST, run_id"""
    ).fetchall()
    return [{"value": r, "label": text} for r, text in rows]


#: Which metric a Runs-table KPI cell shows, said briefly after its value.
_SHORT_KPI_LABELS = {"decode step": "decode", "step (all phases)": "all phases"}


def hardware_table(con: duckdb.DuckDBPyConnection) -> None:
    """Create (or replace) the TEMP table ``run_hardware(run_id, hardware, identified)``: per run,
    the hardware-catalog device the analyzers cost against
    (:func:`tracekit.analysis.hardware.device_kinds`: each kind of device identified once), else
    the trace's device name marked as not identified, else the vendor. The Runs and weekly pages
    group and show hardware by it."""
    key = read_key(con)
    if key is not None:
        key_and_catalog = (key, catalog_identity())
        cached = _HARDWARE.get(key_and_catalog)
        if cached is not None:
            con.execute("""CREATE OR REPLACE TEMP TABLE run_hardware AS
                           SELECT unnest($r::VARCHAR[]) AS run_id, unnest($h::VARCHAR[]) AS hardware,
                                  unnest($i::BOOLEAN[]) AS identified""",
                        {"r": cached[0], "h": cached[1], "i": cached[2]})
            return
    kinds = device_kinds(con)
    con.execute(  # the per-run rest in SQL: 10,000 runs in milliseconds
        """CREATE OR REPLACE TEMP TABLE run_hardware AS
           WITH n AS (SELECT unnest($kinds::UBIGINT[]) AS kind, unnest($specs::VARCHAR[]) AS spec_name,
                             unnest($names::VARCHAR[]) AS trace_name),
                d AS (SELECT k.run_id, n.spec_name, n.trace_name FROM run_device_kind k JOIN n USING (kind)),
                t AS (SELECT r.run_id, r.vendor, d.spec_name,
                             CASE WHEN d.run_id IS NULL THEN nullif(r.device_name, '') ELSE d.trace_name END AS name
                      FROM runs r LEFT JOIN d USING (run_id))
           SELECT run_id,
                  CASE WHEN spec_name IS NOT NULL THEN spec_name
                       WHEN vendor = 'cpu' THEN coalesce(name, 'CPU')
                       WHEN name IS NULL THEN 'not stated (' || coalesce(nullif(vendor, ''), 'unknown vendor') || ')'
                       ELSE name || ' (not identified)' END AS hardware,
                  spec_name IS NOT NULL AS identified
           FROM t""",
        {"kinds": [k for k, _row, _spec in kinds],
         "specs": [spec.name if spec is not None else None for _k, _row, spec in kinds],
         "names": [row.get("name") or row.get("device_type") or None for _k, row, _spec in kinds]})
    if key is not None:  # a lake snapshot: the same for every later read of it
        rows = con.execute("SELECT run_id, hardware, identified FROM run_hardware").fetchall()
        _HARDWARE.clear()  # one snapshot kept: the latest read
        _HARDWARE[key_and_catalog] = ([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])


#: hardware_table's rows of the lake snapshot read last, keyed by (read key, catalog identity):
#: (run ids, hardware, identified). On a lake, identifying 10,000 runs' devices reads five tables
#: (55 ms at 10,000 runs); copying them back costs a few.
_HARDWARE: dict[tuple[str, tuple[Any, ...]], tuple[list[str], list[str], list[bool]]] = {}


class RunsPage(NamedTuple):
    """One page of the Runs table: its columns, its rows, and how many runs match in all."""

    columns: list[str]
    rows: list[dict[str, Any]]
    total: int


def runs_table(
    con: duckdb.DuckDBPyConnection, search: str = "", sort: str = "captured_at", descending: bool = True,
    limit: int | None = None, offset: int = 0,
) -> RunsPage:
    """The Runs page: (columns, rows), what a reviewer scans first on the left: run, workload,
    the catalog device, capture time (UTC), findings per severity, then the
    :data:`HEADLINE_METRICS` formatted for people (columns without any value dropped), then label,
    device kernels, vendor, format and trace file. ``search`` keeps runs whose id, workload,
    label, vendor, device, format or source contain it (case-insensitive); ``sort`` is one of
    :data:`RUN_SORT_COLUMNS` (sorted on the raw values). ``limit``/``offset``: one page of the
    sorted runs (the page reads rollups, not events, so a page of 10,000 runs costs what a page of
    50 does); a KPI column is shown when any matching run has it, on any page."""
    if sort not in RUN_SORT_COLUMNS:
        raise ValueError(f"unknown sort column {sort!r}")
    hardware_table(con)
    names = ", ".join(f"'{n}'" for m in HEADLINE_METRICS for n in m.names)

    def first(m: HeadlineColumn, col: str) -> str:
        return "coalesce(" + ", ".join(f"max({col}) FILTER (WHERE name = '{n}')" for n in m.names) + ")"

    def which(m: HeadlineColumn) -> str:
        return "coalesce(" + ", ".join(f"CASE WHEN max(value) FILTER (WHERE name = '{n}') IS NOT NULL THEN {i} END"
                                       for i, n in enumerate(m.names)) + ")"

    pivot = ", ".join(f"{first(m, 'value')} AS {m.id}, {first(m, 'unit')} AS {m.id}__unit, {which(m)} AS {m.id}__which"
                      for m in HEADLINE_METRICS)
    rel = con.execute(
        f"""WITH f AS (SELECT run_id, count(*) FILTER (WHERE severity = 'critical') AS critical,
                              count(*) FILTER (WHERE severity = 'warning') AS warning,
                              count(*) FILTER (WHERE severity NOT IN ('critical', 'warning')) AS info
                       FROM findings GROUP BY run_id),
                 m AS (SELECT run_id, {pivot} FROM metrics WHERE name IN ({names}) AND value IS NOT NULL
                       GROUP BY run_id),
                 k AS (SELECT run_id, n_device_events AS kernels FROM run_device_totals)
            SELECT count(*) OVER () AS total__,
                   {", ".join(f"bool_or(m.{m.id} IS NOT NULL) OVER () AS {m.id}__any" for m in HEADLINE_METRICS)},
                   r.run_id, r.workload, h.hardware AS device, r.captured_at,
                   coalesce(f.critical, 0) AS critical, coalesce(f.warning, 0) AS warning,
                   coalesce(f.info, 0) AS info,
                   {", ".join(f"m.{m.id}, m.{m.id}__unit, m.{m.id}__which" for m in HEADLINE_METRICS)},
                   r.label, coalesce(k.kernels, 0) AS kernels, r.vendor, r.format,
                   regexp_extract(r.source, '[^/]+/?$') AS trace
            FROM runs r LEFT JOIN f USING (run_id) LEFT JOIN m USING (run_id) LEFT JOIN k USING (run_id)
            LEFT JOIN run_hardware h USING (run_id)
            WHERE $q = '' OR contains(lower(concat_ws(' ', r.run_id, r.workload, r.label, r.vendor,
                                                     r.device_name, h.hardware, r.format, r.source)), lower($q))
            ORDER BY {sort} {"DESC" if descending else "ASC"} NULLS LAST, r.run_id
            LIMIT $limit OFFSET $offset""",
        {"q": search, "limit": limit, "offset": offset},
    )
    rows = _dicts(rel)
    total = int(rows[0]["total__"]) if rows else _count_runs(con, search) if offset else 0
    has = {m.id for m in HEADLINE_METRICS if rows and rows[0][f"{m.id}__any"]}
    for r in rows:
        r["kernels"] = fmt.count(r["kernels"])
        for m in HEADLINE_METRICS:
            picked = r.pop(f"{m.id}__which")
            r[m.id] = fmt.value(r[m.id], r.pop(f"{m.id}__unit"))
            if len(m.names) > 1 and picked is not None:  # say which metric the value is
                label = m.labels[int(picked)]
                r[m.id] += f" ({_SHORT_KPI_LABELS.get(label, label)})"
    kpi = {m.id for m in HEADLINE_METRICS}
    cols = [c for c in (d[0] for d in rel.description or [])
            if not c.endswith(("__unit", "__which", "__any", "__")) and (c in has or c not in kpi)]
    return RunsPage(cols, [{c: r[c] for c in cols} for r in rows], total)


def _count_runs(con: duckdb.DuckDBPyConnection, search: str) -> int:
    """How many runs match ``search`` (a page past the last one has no row to say it)."""
    return runs_table(con, search, limit=1).total


# ---------------------------------------------------------------------------------------------
# Weekly review


def workloads(con: duckdb.DuckDBPyConnection) -> list[tuple[str, int]]:
    """(workload, runs with a capture time), most runs first."""
    rows = con.execute(
        """SELECT workload, count(*) FROM runs WHERE workload IS NOT NULL AND captured_at IS NOT NULL
           GROUP BY workload ORDER BY count(*) DESC, workload"""
    ).fetchall()
    return [(str(w), int(n)) for w, n in rows]


#: The workload's runs with their week (Monday) and hardware (the TEMP table of
#: :func:`hardware_table`, which the weekly functions create first).
_WEEK_RUNS = """SELECT r.run_id, r.vendor, coalesce(h.hardware, r.device_name, r.vendor) AS hardware,
                       CAST(date_trunc('week', r.captured_at) AS DATE) AS week
                FROM runs r LEFT JOIN run_hardware h USING (run_id)
                WHERE r.workload = $w AND r.captured_at IS NOT NULL"""


def _ensure_hardware(con: duckdb.DuckDBPyConnection) -> None:
    if not con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'run_hardware' AND temporary"
                       ).fetchall()[0][0]:
        hardware_table(con)


@dataclass(frozen=True)
class TrendPoint:
    """One metric of one hardware in one ISO week (Monday): median over that week's runs."""

    metric: str
    hardware: str
    week: dt.date
    value: float
    runs: int
    unit: str
    better: str  # 'lower' or 'higher' (from the metrics rows)
    prev_week: dt.date | None
    prev_value: float | None

    @property
    def delta_pct(self) -> float | None:
        """Week-over-week change in % of the previous week's value (None without one, or from 0)."""
        if self.prev_value is None or self.prev_value == 0:
            return None
        return 100 * (self.value - self.prev_value) / abs(self.prev_value)

    @property
    def direction(self) -> str:
        """'better', 'worse' or 'same' versus the previous week, by the metric's ``better``."""
        if self.prev_value is None or self.value == self.prev_value:
            return "same"
        up = self.value > self.prev_value
        return "better" if up == (self.better == "higher") else "worse"


def weekly_trends(con: duckdb.DuckDBPyConnection, workload: str) -> list[TrendPoint]:
    """Every key metric per hardware per week for ``workload``, with the previous week's value."""
    _ensure_hardware(con)
    names = ", ".join(f"'{m.name}'" for m in KEY_METRICS)
    rows = con.execute(
        f"""WITH r AS ({_WEEK_RUNS}),
                 v AS (SELECT m.name, r.hardware, r.week, median(m.value) AS value, count(*) AS runs,
                              any_value(m.unit) AS unit, any_value(m.better) AS better
                       FROM metrics m JOIN r USING (run_id)
                       WHERE m.name IN ({names}) AND m.value IS NOT NULL GROUP BY ALL)
            SELECT name, hardware, week, value, runs, unit, better,
                   lag(week) OVER (PARTITION BY name, hardware ORDER BY week) AS prev_week,
                   lag(value) OVER (PARTITION BY name, hardware ORDER BY week) AS prev_value
            FROM v ORDER BY name, hardware, week""",
        {"w": workload},
    ).fetchall()
    return [TrendPoint(n, h, w, float(v), int(c), u, b, pw, None if pv is None else float(pv))
            for n, h, w, v, c, u, b, pw, pv in rows]


def workload_weeks(con: duckdb.DuckDBPyConnection, workload: str) -> list[dt.date]:
    """The weeks (Mondays) with runs of ``workload``, newest first."""
    _ensure_hardware(con)
    rows = con.execute(f"SELECT DISTINCT week FROM ({_WEEK_RUNS}) ORDER BY week DESC", {"w": workload}).fetchall()
    return [r[0] for r in rows]


def finding_changes(
    con: duckdb.DuckDBPyConnection, workload: str, week: dt.date, prev: dt.date
) -> list[dict[str, Any]]:
    """Findings new in ``week`` (absent in ``prev``) and resolved (in ``prev``, gone in ``week``),
    per hardware. A finding is the same across weeks when its analyzer and its title with the
    numbers taken out agree ("pad 36% of …" and "pad 12% of …" are one finding)."""
    _ensure_hardware(con)
    return _dicts(con.execute(
        f"""WITH r AS ({_WEEK_RUNS}),
                 f AS (SELECT r.week, r.hardware, f.analyzer, f.severity, f.title, f.run_id,
                              regexp_replace(f.title, '[0-9][0-9.,]*', '#', 'g') AS key
                       FROM findings f JOIN r USING (run_id) WHERE r.week IN ($cur, $prev)),
                 c AS (SELECT CASE WHEN a.week = $cur THEN 'new' ELSE 'resolved' END AS change,
                              a.hardware, a.analyzer, a.key, arg_max(a.severity, a.run_id) AS severity,
                              arg_max(a.title, a.run_id) AS title, max(a.run_id) AS run_id
                       FROM f a
                       WHERE NOT EXISTS (SELECT 1 FROM f b WHERE b.week <> a.week AND b.hardware = a.hardware
                                         AND b.analyzer = a.analyzer AND b.key = a.key)
                       GROUP BY ALL)
            SELECT change, hardware, severity, analyzer, title, run_id FROM c
            ORDER BY change, CASE severity WHEN 'critical' THEN 0 WHEN 'warning' THEN 1 ELSE 2 END, title""",
        {"w": workload, "cur": week, "prev": prev},
    ))


def category_shifts(
    con: duckdb.DuckDBPyConnection, workload: str, week: dt.date, prev: dt.date, limit: int = 8
) -> list[dict[str, Any]]:
    """The kernel categories whose share of device time moved most between ``prev`` and ``week``,
    per hardware (share = category time ÷ all device time of that week's runs; ``xla_async``
    spans left out as in ``compare``). Empty when either week has no device kernels."""
    _ensure_hardware(con)
    return _dicts(con.execute(
        f"""WITH r AS ({_WEEK_RUNS}),
                 g AS (SELECT run_id, name, category, hlo_category, sum(coalesce(device_dur_ns, dur_ns)) AS t
                       FROM kernels WHERE run_id IN (SELECT run_id FROM r WHERE week IN ($cur, $prev))
                         AND category <> 'xla_async' GROUP BY ALL),
                 c AS (SELECT g.run_id, {category_case_sql()} AS cat, sum(g.t) AS t FROM g GROUP BY ALL),
                 w AS (SELECT r.hardware, c.cat, coalesce(sum(c.t) FILTER (WHERE r.week = $cur), 0) AS cur_t,
                              coalesce(sum(c.t) FILTER (WHERE r.week = $prev), 0) AS prev_t
                       FROM c JOIN r USING (run_id) GROUP BY ALL),
                 s AS (SELECT *, cur_t / sum(cur_t) OVER (PARTITION BY hardware) AS cur_share,
                              prev_t / sum(prev_t) OVER (PARTITION BY hardware) AS prev_share FROM w)
            SELECT hardware, cat AS category, round(100 * prev_share, 1) AS prev_pct,
                   round(100 * cur_share, 1) AS cur_pct, round(100 * (cur_share - prev_share), 1) AS delta_pp,
                   round((cur_t - prev_t) / 1e6, 3) AS delta_ms
            FROM s WHERE cur_share IS NOT NULL AND prev_share IS NOT NULL
            ORDER BY abs(cur_share - prev_share) DESC, hardware, category LIMIT {int(limit)}""",
        {"w": workload, "cur": week, "prev": prev},
    ))


# ---------------------------------------------------------------------------------------------
# Run page


def run_findings(con: duckdb.DuckDBPyConnection, run_id: str) -> list[dict[str, Any]]:
    """The run's findings, most severe and largest saving first, evidence as indented JSON
    (cut at :data:`EVIDENCE_CHARS` characters)."""
    rows = _dicts(con.execute(
        """SELECT severity, analyzer, title, detail, evidence::VARCHAR AS evidence, saving_ns, saving_fraction
           FROM findings WHERE run_id = ?
           ORDER BY CASE severity WHEN 'critical' THEN 0 WHEN 'warning' THEN 1 ELSE 2 END,
                    saving_ns DESC NULLS LAST, analyzer, title""",
        [run_id],
    ))
    for r in rows:
        text = json.dumps(json.loads(r["evidence"]), indent=1) if r["evidence"] else ""
        r["evidence"] = text if len(text) <= EVIDENCE_CHARS else text[:EVIDENCE_CHARS] + "\n… (cut)"
    return rows


def serving_metrics(con: duckdb.DuckDBPyConnection, run_id: str) -> list[dict[str, Any]]:
    """The run's request-level metrics (:data:`SERVING_METRICS`) that have a value, in that order."""
    names = ", ".join(f"'{n}'" for n in SERVING_METRICS)
    return _dicts(con.execute(
        f"""SELECT name, value, unit, better FROM metrics
            WHERE run_id = ? AND name IN ({names}) AND value IS NOT NULL
            ORDER BY list_position([{names}], name)""",
        [run_id],
    ))


def compile_timeline(con: duckdb.DuckDBPyConnection, run_id: str) -> list[dict[str, Any]]:
    """The first :data:`TOP_COMPILES` compiles (``compiles`` view): function, backend, start (ms
    from the rank's first event) and duration (ms)."""
    return _dicts(con.execute(
        f"""SELECT c.rank, coalesce(c.function, c.name) AS function, c.backend, c.compile_id,
                   (c.start_ns - rk.first_ns) / 1e6 AS start_ms, c.dur_ns / 1e6 AS dur_ms
            FROM compiles c
            LEFT JOIN (SELECT rank, min(first_ns) AS first_ns FROM ranks WHERE run_id = $r GROUP BY rank) rk
              USING (rank)
            WHERE c.run_id = $r ORDER BY c.start_ns LIMIT {TOP_COMPILES}""",
        {"r": run_id},
    ))


#: Columns of the ``requests`` view plotted as latency distributions, when present (ns → ms).
REQUEST_LATENCIES = (("ttft_ns", "time to first token"), ("e2e_ns", "end-to-end latency"))


def has_view(con: duckdb.DuckDBPyConnection, name: str) -> list[str]:
    """The columns of view/table ``name`` in the store (empty when it does not exist)."""
    rows = con.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = 'main' AND table_name = ?",
        [name],
    ).fetchall()
    return [r[0] for r in rows]


@dataclass(frozen=True)
class Histogram:
    """Counts per equal-width bin: ``edges_ms`` has one more entry than ``counts``."""

    column: str
    label: str
    edges_ms: list[float]
    counts: list[int]
    n: int


def request_histograms(con: duckdb.DuckDBPyConnection, run_id: str) -> list[Histogram]:
    """:data:`HIST_BINS`-bin histograms of the run's request latencies from the ``requests`` view
    (binned in DuckDB); empty when the view, the columns or the run's requests are absent."""
    cols = set(has_view(con, "requests"))
    out = []
    for col, label in REQUEST_LATENCIES:
        if col not in cols or "run_id" not in cols:
            continue
        rows = con.execute(
            f"""WITH v AS (SELECT {col} / 1e6 AS x FROM requests WHERE run_id = $r AND {col} IS NOT NULL),
                     b AS (SELECT min(x) AS lo, max(x) AS hi FROM v)
                SELECT CASE WHEN b.hi = b.lo THEN 0
                            ELSE least(CAST(floor((v.x - b.lo) / (b.hi - b.lo) * {HIST_BINS}) AS INTEGER),
                                       {HIST_BINS - 1}) END AS i,
                       count(*) AS n, any_value(b.lo) AS lo, any_value(b.hi) AS hi
                FROM v, b GROUP BY i ORDER BY i""",
            {"r": run_id},
        ).fetchall()
        if not rows:
            continue
        lo, hi = float(rows[0][2]), float(rows[0][3])
        nbins = 1 if hi == lo else HIST_BINS
        width = (hi - lo) / nbins if hi > lo else 1.0
        counts = [0] * nbins
        for i, n, _, _ in rows:
            counts[int(i)] = int(n)
        out.append(Histogram(col, label, [lo + width * j for j in range(nbins + 1)], counts, sum(counts)))
    return out



# ---------------------------------------------------------------------------------------------
# Compare page


def compare_metrics(con: duckdb.DuckDBPyConnection, a: str, b: str) -> list[dict[str, Any]]:
    """Every metric either run has, side by side and formatted: ``metric`` (words), ``name``,
    ``a``, ``b``, ``change`` (B − A in % of A) and ``tone``: ``better``/``worse`` by the
    metric's own direction (``better`` column of ``metrics``), ``same``, or empty when one side is
    missing. Ordered as the headline KPIs first, then by analyzer and name."""
    first = [n for k in HEADLINE_KPIS for n in k.names]
    rows = con.execute(
        """SELECT name, any_value(analyzer), any_value(unit), any_value(better),
                  max(value) FILTER (WHERE run_id = $a), max(value) FILTER (WHERE run_id = $b)
           FROM metrics WHERE run_id IN ($a, $b) AND value IS NOT NULL GROUP BY name""",
        {"a": a, "b": b}).fetchall()
    rows.sort(key=lambda r: (first.index(r[0]) if r[0] in first else len(first), r[1], r[0]))
    out = []
    for name, _, unit, better, va, vb in rows:
        tone, change = "", fmt.UNKNOWN
        if va is not None and vb is not None:
            if va != 0:
                change = f"{100 * (vb - va) / abs(va):+.1f}%"
            tone = "same" if va == vb else ("better" if (vb > va) == (better == "higher") else "worse")
        out.append({"metric": fmt.label(name), "name": name, "a": fmt.value(va, unit), "b": fmt.value(vb, unit),
                    "change": change, "tone": tone})
    return out
