"""The data of ``tracekit report`` (and of the dashboard's Run page): :func:`collect` reads one
run into a :class:`Report` of :class:`Table` rows already formatted for people, roofline points and
roofs. Read-only SQL on the public views and the SQL library; rendering is
:mod:`tracekit.present.report_html` / :mod:`~tracekit.present.report_markdown`.

The report puts the numbers that matter first: the headline KPIs, the findings, where the device time
went, the top kernels, then request latency, the class table, the roofline, the run's details and
every metric.

Sections and the SQL behind them (numbers through :mod:`tracekit.formatting`, kernel names
through :mod:`tracekit.names`, the full name on hover):

* **Headline** (KPI cards) and **run** details: :func:`tracekit.analysis.overview.run_overview`
  — the catalog device the analyzers costed against (:func:`~tracekit.analysis.hardware.run_device`),
  device busy, step time, decode MBU/MFU and prefill MFU with their coverage, tokens/s, TTFT p95,
  $/1M output tokens, from the ``metrics`` view.
* **Findings / metrics**: the ``findings`` and ``metrics`` views. A run with neither stored is
  analyzed first by :func:`tracekit.exports.render_report`
  (:func:`tracekit.run_analysis.ensure_analyzed`: every registered analyzer, on a writer connection),
  so the report always shows the analyzers' verdict; the page says when it did so.
* **Where the device time went** (HTML chart) and **top kernels**: the SQL library's
  ``device_work`` grouped by ``kernel_class`` / name; shares are of the run's summed device time.
  A run without device activity lists its top host ops (``ops``, inclusive time) instead.
* **Request latency** (load-driven runs only): TTFT, TPOT, ITL and e2e p50/p95/p99 from the
  ``requests`` view (:func:`tracekit.analysis.serving.request_stats`), throughput, errors and the
  stored ``usd_per_1m_output_tokens`` metric.
* **Device time by kernel class** (table): ``kernels`` grouped by
  :func:`tracekit.analysis.categories.category_case_sql`, time ``coalesce(device_dur_ns, dur_ns)``
  (XProf's device clock on TPU, the trace span elsewhere); ``xla_async`` rows (TPU async-op spans)
  overlap other ops and are listed apart, without a share.
* **Roofline** (HTML only): one labelled point per op name among ``kernels`` rows with ``category =
  'kernel'`` whose XLA cost model gives ``flops > 0``, bytes ``coalesce(hbm_bytes,
  bytes_accessed) > 0`` and time ``coalesce(device_dur_ns, dur_ns) > 0``: arithmetic intensity
  ``Σflops / Σbytes`` (FLOP/byte) against achieved ``Σflops / Σtime`` (in TFLOP/s). Roofs come from
  the device the analyzers used (bf16 peak, HBM bandwidth, :func:`~tracekit.analysis.hardware.ridge_point`); when the device
  is not identified the chart has no roofs and says so (peaks are never guessed). Without a
  costable op the page says so instead of drawing an empty chart. Runs without XLA costs (Kineto)
  get one point per PyTorch op name costed from its recorded shapes — GEMM, attention, elementwise
  and norm ops, timed by the device time of the kernels they launched
  (``memory_bound_decode.run_op_costs``, the analyzer's own cost model); graph-replayed kernels
  carry no shapes and have no point.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import duckdb

from tracekit import formatting as fmt
from tracekit.analysis.categories import category_case_sql
from tracekit.analysis.overview import Overview, run_overview
from tracekit.names import short_kernel_names

TOP_N = 20
TIME_SQL = "coalesce(device_dur_ns, dur_ns)"
BYTES_SQL = "coalesce(hbm_bytes, bytes_accessed)"
_SEVERITY_ORDER = "CASE severity WHEN 'critical' THEN 0 WHEN 'warning' THEN 1 ELSE 2 END"


@dataclass
class Table:
    """A report table: cells already formatted for people (:mod:`tracekit.formatting`)."""

    title: str
    columns: list[str]
    rows: list[tuple[str, ...]]
    note: str = ""
    numeric: frozenset[str] = frozenset()  #: right-aligned columns
    hover: list[str] | None = None  #: per row, the whole text of the first cell (a kernel's full name)


@dataclass
class RooflinePoint:
    """One op name on the roofline: its FLOPs, bytes (B) and device time (ns) summed over ``calls``."""

    name: str
    hlo_category: str | None
    calls: int
    flops: float
    bytes: float
    time_ns: int

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, FLOP/byte."""
        return self.flops / self.bytes

    @property
    def flops_per_s(self) -> float:
        """Achieved FLOP/s."""
        return self.flops / (self.time_ns * 1e-9)


@dataclass
class Report:
    """Everything one run's report shows (:func:`collect`); the renderers only lay it out."""

    run_id: str
    overview: Overview
    header: list[tuple[str, str]]
    analyzed_now: bool
    findings: Table
    metrics: Table
    categories: Table
    top: Table
    points: list[RooflinePoint] = field(default_factory=list)
    device_label: str = ""
    peak_flops: float | None = None  # FLOP/s
    hbm_bps: float | None = None  # B/s
    ridge: float | None = None  # FLOP/byte
    roof_note: str = ""
    requests: Table | None = None  # request latency of a load-driven run (serving analyzer)


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: Sequence[Any]) -> tuple[list[str], list[tuple[Any, ...]]]:
    rel = con.execute(sql, list(params))
    cols = [d[0] for d in rel.description] if rel.description else []
    return cols, rel.fetchall()


def collect(con: duckdb.DuckDBPyConnection, run_id: str, *, analyzed_now: bool = False) -> Report:
    """Read everything the report shows from the store (read-only SQL on the public views and the
    SQL library, which this installs on ``con``)."""
    from tracekit.analysis import library

    library.install(con)
    ov = run_overview(con, run_id, top=TOP_N, findings=0, width=70)
    rep = Report(run_id, ov, _header(run_id, ov), analyzed_now, _findings_table(con, run_id),
                 _metrics_table(con, run_id), _categories_table(con, run_id), _top_table(con, run_id, ov))
    rep.requests = request_latency_table(con, run_id)
    rep.points = roofline_points(con, run_id)
    _roofs(con, run_id, rep)
    return rep


def _header(run_id: str, ov: Overview) -> list[tuple[str, str]]:
    """The Run table: (field, text) pairs."""
    header: list[tuple[str, str]] = [
        ("run", run_id),
        ("workload", ov.workload or fmt.UNKNOWN),
        ("label", ov.label or fmt.UNKNOWN),
        ("device", ov.device_text),
        ("format", ov.format),
        ("ranks", fmt.count(ov.ranks)),
        ("captured", f"{fmt.value(ov.captured_at)} UTC" if ov.captured_at else "not recorded in the trace"),
        ("span", fmt.duration_ns(ov.span_ns) + " (the longest rank's first to last event)"),
        ("kernel time", fmt.duration_ns(ov.kernel_time_ns) + " (device rows summed over streams and ranks)"),
    ]
    return header


def _findings_table(con: duckdb.DuckDBPyConnection, run_id: str) -> Table:
    """The run's findings, most severe and largest saving first."""
    _, frows = _rows(
        con,
        f"""SELECT severity, analyzer, title, detail, saving_ns, saving_fraction FROM findings
            WHERE run_id = ? ORDER BY {_SEVERITY_ORDER}, saving_ns DESC NULLS LAST, analyzer, title""",
        [run_id],
    )
    findings = Table(
        "Findings",
        ["severity", "analyzer", "title", "detail", "saving"],
        [(s, a, t, d, fmt.saving(ns, fr)) for s, a, t, d, ns, fr in frows],
        note="" if frows else "The analyzers found nothing to flag.",
    )
    return findings


def _metrics_table(con: duckdb.DuckDBPyConnection, run_id: str) -> Table:
    """Every metric the analyzers stored for the run, by analyzer and name."""
    _, mrows = _rows(
        con, "SELECT name, value, unit, analyzer FROM metrics WHERE run_id = ? ORDER BY analyzer, name", [run_id]
    )
    metrics = Table("All metrics", ["metric", "value", "analyzer"],
                    [(str(n), fmt.value(v, u), str(a)) for n, v, u, a in mrows], numeric=frozenset({"value"}),
                    note="Every metric the analyzers stored; — means not measured or not applicable.")
    return metrics


def _categories_table(con: duckdb.DuckDBPyConnection, run_id: str) -> Table:
    """Device time (ns, shown for people) by kernel class; ``xla_async`` spans apart, without a share."""
    # Classified after grouping by the columns the category depends on: the regexes then run
    # once per distinct kernel, not once per row (40 ms instead of 2 s on 1M kernels).
    _, crows = _rows(
        con,
        f"""WITH g AS (SELECT name, category, hlo_category, count(*) AS calls, sum({TIME_SQL}) AS time_ns
                       FROM kernels WHERE run_id = ? GROUP BY ALL)
            SELECT {category_case_sql()} AS cat, sum(calls) AS calls, sum(time_ns) AS time_ns,
                   category = 'xla_async' AS overlapping
            FROM g GROUP BY cat, overlapping
            ORDER BY overlapping, time_ns DESC NULLS LAST, cat""",
        [run_id],
    )
    busy = sum(int(t or 0) for _, _, t, o in crows if not o)
    categories = Table(
        "Device time by kernel class",
        ["class", "calls", "time", "share"],
        [
            (f"{c} (async spans, overlapping)" if o else str(c), fmt.count(n), fmt.duration_ns(t),
             fmt.UNKNOWN if o or not busy else fmt.percent((t or 0) / busy))
            for c, n, t, o in crows
        ],
        numeric=frozenset({"calls", "time", "share"}),
        note=(
            "Device time of each kernel class (XProf's device clock on TPU, the traced duration elsewhere), "
            "summed over streams and ranks; the share is of all device time. TPU async-op spans overlap the "
            "ops that run meanwhile: they are listed apart, without a share."
            if crows
            else "No device activity in this run."
        ),
    )
    return categories


def _top_table(con: duckdb.DuckDBPyConnection, run_id: str, ov: Overview) -> Table:
    """The overview's top kernels by device time, else the top host ops by inclusive time."""
    if ov.kernels:
        top = Table(
            f"Top {len(ov.kernels)} kernels by device time",
            ["kernel", "class", "calls", "time", "mean", "share"],
            [(k.short, k.kernel_class, fmt.count(k.calls), fmt.duration_ns(k.time_ns),
              fmt.duration_ns(k.time_ns / k.calls if k.calls else None), fmt.percent(k.share)) for k in ov.kernels],
            numeric=frozenset({"calls", "time", "mean", "share"}),
            hover=[k.name for k in ov.kernels],
            note="Names shortened (template arguments and namespaces elided); hover for the full name.",
        )
    else:
        _, trows = _rows(
            con,
            f"""SELECT name, count(*) AS calls, sum(dur_ns) AS t
                FROM ops WHERE run_id = ? GROUP BY name ORDER BY sum(dur_ns) DESC, name LIMIT {TOP_N}""",
            [run_id],
        )
        names = short_kernel_names([str(r[0]) for r in trows], 70)
        top = Table(f"Top {TOP_N} host ops by inclusive time", ["op", "calls", "time", "mean"],
                    [(n, fmt.count(c), fmt.duration_ns(t), fmt.duration_ns(t / c if c else None))
                     for n, (_, c, t) in zip(names, trows)],
                    numeric=frozenset({"calls", "time", "mean"}), hover=[str(r[0]) for r in trows],
                    note="No device activity; host ops instead.")
    return top


def request_latency_table(con: duckdb.DuckDBPyConnection, run_id: str) -> Table | None:
    """The request-latency section: TTFT, TPOT, ITL and e2e p50/p95/p99 (ms) from ``requests``
    (:func:`tracekit.analysis.serving.request_stats`), throughput, errors and the stored cost
    per token; None for a run without requests."""
    from tracekit.analysis.serving import request_stats

    st = request_stats(con, run_id)
    if st is None:
        return None
    names = {"ttft": "time to first token", "tpot": "time per output token", "itl": "inter-token latency",
             "e2e": "end-to-end latency"}
    rows = [(label, *(fmt.duration(v, "ms") for v in st.latency_ms[k])) for k, label in names.items()]
    cost = con.execute(
        "SELECT value FROM metrics WHERE run_id = ? AND name = 'usd_per_1m_output_tokens'", [run_id]
    ).fetchall()
    tps, rps = st.output_tokens_per_s, st.requests_per_s
    note = (f"{fmt.count(st.requests)} requests, {fmt.count(st.errors)} with an error "
            f"({fmt.percent(st.error_rate)}), over {fmt.duration(st.window_s, 's')}: "
            f"{fmt.value(tps, 'tokens/s')} output, {fmt.value(rps, 'requests/s')}; token counts from "
            f"{' and '.join(st.token_count_sources)}. "
            + (f"Cost: {fmt.usd(cost[0][0])} per 1M output tokens." if cost and cost[0][0] is not None
               else "Cost per token: no device price (see the serving finding).")
            + " Latencies over the requests without error.")
    return Table("Request latency", ["measure", "p50", "p95", "p99"], rows, note=note,
                 numeric=frozenset({"p50", "p95", "p99"}))


def roofline_points(con: duckdb.DuckDBPyConnection, run_id: str) -> list[RooflinePoint]:
    """One point per costable op name (see the module docstring)."""
    _, rows = _rows(
        con,
        f"""SELECT name, any_value(hlo_category), count(*), sum(flops), sum({BYTES_SQL}), sum({TIME_SQL})
            FROM kernels
            WHERE run_id = ? AND category = 'kernel' AND flops > 0 AND {BYTES_SQL} > 0 AND {TIME_SQL} > 0
            GROUP BY name ORDER BY sum({TIME_SQL}) DESC, name""",
        [run_id],
    )
    points = [RooflinePoint(n, h, int(c), float(f), float(b), int(t)) for n, h, c, f, b, t in rows]
    if points:
        return points
    # no XLA costs: PyTorch ops costed from their recorded shapes (the analyzer's cost model), one
    # point per op name
    from tracekit.analysis.memory_bound_decode import run_op_costs

    by_name: dict[str, list[float]] = {}
    for c in run_op_costs(con, run_id):
        if c.flops > 0 and c.nbytes > 0 and c.time_ns > 0:
            acc = by_name.setdefault(c.name, [0.0, 0.0, 0.0, 0.0])
            acc[0] += c.count
            acc[1] += c.flops
            acc[2] += c.nbytes
            acc[3] += c.time_ns
    return sorted((RooflinePoint(n, "torch op (shapes)", int(a[0]), a[1], a[2], int(a[3]))
                   for n, a in by_name.items()), key=lambda p: (-p.time_ns, p.name))


def _roofs(con: duckdb.DuckDBPyConnection, run_id: str, rep: Report) -> None:
    from tracekit.analysis.hardware import ridge_point, run_device

    row, spec = run_device(con, run_id)  # the device the analyzers costed against
    if row is None:
        rep.roof_note = "The run lists no device, so no roofs are drawn."
        return
    if spec is None:
        name = row.get("name") or row.get("device_type")
        rep.roof_note = f"Device {name!r} is not identified in the hardware catalog: no roofs (peaks are not guessed)."
        return
    rep.device_label = spec.name
    peak = spec.peak_tflops.get("bf16")
    rep.peak_flops = peak * 1e12 if peak else None
    rep.hbm_bps = spec.hbm_gbps * 1e9 if spec.hbm_gbps else None
    rep.ridge = ridge_point(spec, "bf16")
    sources = ", ".join(f"{k}: {v}" for k, v in sorted(spec.sources.items()) if k in ("peak_tflops.bf16", "hbm_gbps"))
    rep.roof_note = (
        f"Roofs of {spec.name} (bf16 peak {peak} TFLOP/s, HBM {spec.hbm_gbps} GB/s, ridge "
        f"{rep.ridge:.1f} FLOP/byte; sources {sources})." if rep.ridge is not None
        else f"{spec.name}: the catalog lacks its bf16 peak or HBM bandwidth, so roofs are partial."
    )
