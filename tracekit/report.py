"""``tracekit report``: one run as a self-contained HTML page (or Markdown), the numbers that
matter first: the headline KPIs, the findings, where the device time went, the top kernels, then
request latency, the class table, the roofline, the run's details and every metric.

Sections and the SQL behind them (numbers through :mod:`tracekit.formatting`, kernel names
through :mod:`tracekit.names`, the full name on hover):

* **Headline** (KPI cards) and **run** details: :func:`tracekit.analysis.overview.run_overview`
  — the catalog device the analyzers costed against (:func:`~tracekit.analysis.hardware.run_device`),
  device busy, step time, decode MBU/MFU and prefill MFU with their coverage, tokens/s, TTFT p95,
  $/1M output tokens, from the ``metrics`` view.
* **Findings / metrics**: the ``findings`` and ``metrics`` views. A run with neither stored is
  analyzed first (:func:`tracekit.api.analyze_runs`, every registered analyzer, on a writer
  connection), so the report always shows the analyzers' verdict; the page says when it did so.
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
  the device the analyzers used (bf16 peak, HBM bandwidth, :func:`ridge_point`); when the device
  is not identified the chart has no roofs and says so (peaks are never guessed). Without a
  costable op the page says so instead of drawing an empty chart. Runs without XLA costs (Kineto)
  get one point per PyTorch op name costed from its recorded shapes — GEMM, attention, elementwise
  and norm ops, timed by the device time of the kernels they launched
  (``memory_bound_decode.run_op_costs``, the analyzer's own cost model); graph-replayed kernels
  carry no shapes and have no point.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from tracekit import formatting as fmt
from tracekit.analysis.categories import category_case_sql
from tracekit.analysis.overview import Overview, run_overview
from tracekit.errors import TraceInputError
from tracekit.names import short_kernel_names
from tracekit.store import default_store_path, open_store

SUFFIXES = {".html": "html", ".htm": "html", ".md": "markdown"}
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
    name: str
    hlo_category: str | None
    calls: int
    flops: float
    bytes: float
    time_ns: int

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes

    @property
    def flops_per_s(self) -> float:
        return self.flops / (self.time_ns * 1e-9)


@dataclass
class Report:
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


def render_report(run_id: str, path: str | Path, store: str | Path | None = None, *, force: bool = False) -> Path:
    """Write the report of ``run_id`` to ``path`` (``.html``/``.htm``: self-contained page with an
    inline Plotly roofline; ``.md``: the same tables, no chart) and return the path.

    The file is written atomically by :func:`tracekit.outputs.write_output`: never onto a store, a
    directory or a device, and onto an existing file only with ``force``; the path is checked
    before the run is analyzed, so a refused path leaves the store untouched.

    Raises :class:`TraceInputError` for an unknown run or an unsupported suffix,
    :class:`tracekit.outputs.OutputError` for a path that may not be written."""
    from tracekit.outputs import check_output, write_output

    out = Path(path)
    store_path = Path(store) if store is not None else default_store_path()
    check_output(out, store=store_path, force=force, make_parents=True)
    kind = SUFFIXES.get(out.suffix.lower())
    if kind is None:
        raise TraceInputError(out, "report must end in .html, .htm or .md")
    from tracekit.api import ensure_analyzed

    run_id, analyzed_now = ensure_analyzed(run_id, store_path)
    with open_store(store_path, read_only=True) as con:
        rep = collect(con, run_id, analyzed_now=analyzed_now)
    text = to_html(rep) if kind == "html" else to_markdown(rep)
    write_output(out, text, store=store_path, force=force, make_parents=True)
    return out


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
    _, mrows = _rows(
        con, "SELECT name, value, unit, analyzer FROM metrics WHERE run_id = ? ORDER BY analyzer, name", [run_id]
    )
    metrics = Table("All metrics", ["metric", "value", "analyzer"],
                    [(str(n), fmt.value(v, u), str(a)) for n, v, u, a in mrows], numeric=frozenset({"value"}),
                    note="Every metric the analyzers stored; — means not measured or not applicable.")

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

    rep = Report(run_id, ov, header, analyzed_now, findings, metrics, categories, top)
    rep.requests = request_latency_table(con, run_id)
    rep.points = roofline_points(con, run_id)
    _roofs(con, run_id, rep)
    return rep


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


# ------------------------------------------------------------------------------------------------
# HTML


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2rem;color:#222;max-width:1200px}
h1{font-size:1.5rem;margin-bottom:.2rem}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #ddd}
.sub{color:#444;margin:.2rem 0 1rem}
table{border-collapse:collapse;font-size:.85rem;margin:.5rem 0}
td,th{border:1px solid #ddd;padding:.25rem .5rem;vertical-align:top;text-align:left}
th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.sev-critical{color:#b00020;font-weight:bold}.sev-warning{color:#a15c00;font-weight:bold}
.note{color:#555;font-size:.85rem}summary{cursor:pointer;color:#3b6ea8;font-size:.8rem}
details{font-size:.82rem;color:#333;max-width:60rem}
.kpis{display:flex;flex-wrap:wrap;gap:.75rem;margin:1rem 0}
.kpi{border:1px solid #ddd;border-radius:6px;padding:.5rem .9rem;min-width:9rem;max-width:18rem}
.kpi .v{font-size:1.6rem;font-weight:600;font-variant-numeric:tabular-nums}
.kpi .l{color:#444;font-size:.85rem}.kpi .c{color:#777;font-size:.75rem}
"""


def _html_table(t: Table, id_: str) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in t.columns)
    body = []
    for i, r in enumerate(t.rows):
        cells = []
        for j, (c, v) in enumerate(zip(t.columns, r)):
            attrs = ' class="num"' if c in t.numeric else ""
            if c == "severity":
                attrs = f' class="sev-{html.escape(str(v))}"'
            if j == 0 and t.hover is not None and t.hover[i] != v:
                attrs += f' title="{html.escape(t.hover[i])}"'
            cells.append(f"<td{attrs}>{html.escape(str(v))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    note = f'<p class="note">{html.escape(t.note)}</p>' if t.note else ""
    table = f'<table id="{id_}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>' if t.rows else ""
    return f"<h2>{html.escape(t.title)}</h2>{note}{table}"


def _findings_html(t: Table) -> str:
    """The findings, one row each: severity, analyzer, the title with its detail folded under it
    (one click away), and the saving; the first screen then still holds the top kernels."""
    rows = []
    for sev, analyzer, title, detail, saving in t.rows:
        rows.append(f'<tr><td class="sev-{html.escape(sev)}">{html.escape(sev)}</td><td>{html.escape(analyzer)}</td>'
                    f"<td>{html.escape(title)}<details><summary>detail</summary>{html.escape(detail)}</details></td>"
                    f'<td class="num">{html.escape(saving)}</td></tr>')
    note = f'<p class="note">{html.escape(t.note)}</p>' if t.note else ""
    head = "<tr><th>severity</th><th>analyzer</th><th>finding</th><th>a fix would save</th></tr>"
    table = f'<table id="findings"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>' if rows else ""
    return f"<h2>{html.escape(t.title)}</h2>{note}{table}"


def _kpi_html(rep: Report) -> str:
    """The headline KPIs as cards: what a reviewer reads first."""
    cards = []
    for k in rep.overview.kpis:
        cov = (f'<div class="c">covers {html.escape(fmt.percent(k.coverage))} of its phase</div>'
               if k.coverage is not None else "") + (f'<div class="c">{html.escape(k.note)}</div>' if k.note else "")
        cards.append(f'<div class="kpi" data-metric="{html.escape(k.name)}"><div class="v">'
                     f"{html.escape(fmt.value(k.value, k.unit))}</div><div class=\"l\">{html.escape(k.label)}</div>"
                     f"{cov}</div>")
    if not cards:
        return '<p class="note">No headline metric: the analyzers measured none for this run.</p>'
    return f'<div class="kpis" id="kpis">{"".join(cards)}</div>'


def class_figure(rep: Report) -> Any:
    """Device time by kernel class: one horizontal bar per class, longest on top, in ms."""
    import plotly.graph_objects as go

    rows = [(c, t) for c, t, _ in rep.overview.classes if t > 0][::-1]
    total = rep.overview.kernel_time_ns or 1
    top = max((t for _, t in rows), default=0)
    unit, scale = next(((u, k) for u, k in (("min", 60e9), ("s", 1e9), ("ms", 1e6)) if top >= k), ("µs", 1e3))
    fig = go.Figure(go.Bar(
        x=[t / scale for _, t in rows], y=[c for c, _ in rows], orientation="h",
        text=[f"{fmt.duration_ns(t)} · {fmt.percent(t / total)}" for _, t in rows], textposition="auto",
        hovertemplate="%{y}: %{text}<extra></extra>", marker={"color": "#3b6ea8"}))
    fig.update_layout(
        title={"text": "Device time by kernel class", "y": 0.97},
        xaxis={"title": f"device time ({unit}, summed over streams and ranks)", "rangemode": "tozero"},
        height=120 + 32 * len(rows), margin={"l": 110, "r": 30, "t": 50, "b": 50}, template="plotly_white")
    return fig


def roofline_figure(rep: Report) -> Any:
    """The Plotly roofline: trace ``ops`` (one labelled marker per costable op name; x in
    FLOP/byte, y in TFLOP/s) plus the roof lines."""
    import plotly.graph_objects as go

    pts = rep.points
    labels = _point_labels(pts)
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            name="ops",
            x=[p.intensity for p in pts],
            y=[p.flops_per_s / 1e12 for p in pts],
            mode="markers+text" if len(pts) <= 12 else "markers",
            marker={"size": 10, "opacity": 0.8},
            text=[p.name for p in pts],
            texttemplate="%{customdata[3]}",
            textposition="top center",
            customdata=[[p.hlo_category or "", p.calls, fmt.duration_ns(p.time_ns), lab] for p, lab in zip(pts, labels)],
            hovertemplate="%{text}<br>%{customdata[0]}<br>calls %{customdata[1]}<br>time %{customdata[2]}"
            "<br>%{x:.3g} FLOP/byte<br>%{y:.3g} TFLOP/s<extra></extra>",
        )
    )
    xs = [p.intensity for p in pts]
    lo, hi = min(xs) / 10, max(xs) * 10
    if rep.ridge is not None:
        lo, hi = min(lo, rep.ridge / 10), max(hi, rep.ridge * 10)
    peak = rep.peak_flops / 1e12 if rep.peak_flops else None
    hbm = rep.hbm_bps / 1e12 if rep.hbm_bps else None  # TFLOP/s per FLOP/byte
    if hbm and peak and rep.ridge:
        fig.add_trace(
            go.Scatter(name=f"roof ({rep.device_label})", x=[lo, rep.ridge, hi], y=[hbm * lo, peak, peak],
                       mode="lines", line={"color": "#b00020"}, hoverinfo="skip")
        )
    elif peak:
        fig.add_trace(go.Scatter(name="compute peak", x=[lo, hi], y=[peak] * 2, mode="lines", hoverinfo="skip"))
    elif hbm:
        fig.add_trace(go.Scatter(name="HBM roof", x=[lo, hi], y=[hbm * lo, hbm * hi], mode="lines", hoverinfo="skip"))
    source = ("XLA cost model" if all(p.hlo_category != "torch op (shapes)" for p in pts)
              else "PyTorch op shapes")
    fig.update_layout(
        title={"text": f"Roofline: {len(pts)} ops ({source} FLOPs and bytes, device time)", "y": 0.97},
        xaxis={"type": "log", "title": "arithmetic intensity (FLOP/byte)"},
        yaxis={"type": "log", "title": "achieved TFLOP/s", "exponentformat": "power"},
        height=540, template="plotly_white", margin={"t": 70},
        legend={"orientation": "h", "y": -0.18},
    )
    return fig


def _point_labels(pts: list[RooflinePoint]) -> list[str]:
    """A short label per point; points that land on one spot (within 5 % on both log axes) share
    one label, on the first, that says how many lie there (the hover names each)."""
    import math

    shorts = short_kernel_names([p.name for p in pts], 28)
    labels = list(shorts)
    spots: dict[tuple[int, int], list[int]] = {}
    for i, p in enumerate(pts):
        key = (round(math.log10(p.intensity) / 0.02), round(math.log10(p.flops_per_s) / 0.02))
        spots.setdefault(key, []).append(i)
    for members in spots.values():
        if len(members) > 1:
            labels[members[0]] = f"{shorts[members[0]]} (+{len(members) - 1} here)"
            for i in members[1:]:
                labels[i] = ""
    return labels


#: Plotly's mode bar only on hover, so it never covers a chart's title.
_PLOT_CONFIG = {"displaylogo": False, "displayModeBar": "hover"}


def to_html(rep: Report) -> str:
    ov = rep.overview
    sub = " · ".join(x for x in (ov.workload, ov.label, ov.device_text,
                                 f"{ov.ranks} rank{'s' if ov.ranks != 1 else ''}") if x)
    hdr = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rep.header)
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>tracekit report {html.escape(rep.run_id)}</title><style>{_CSS}</style></head><body>",
        f"<h1>tracekit report: run {html.escape(rep.run_id)}</h1>",
        f'<p class="sub">{html.escape(sub)}</p>',
        _kpi_html(rep),
    ]
    if rep.analyzed_now:
        parts.append('<p class="note">The run had no stored findings; the analyzers were run for this report '
                     "and their results stored.</p>")
    parts.append(_findings_html(rep.findings))
    parts.append(_html_table(rep.top, "top"))
    if ov.classes:
        parts.append("<h2>Where the device time went</h2>")
        parts.append(class_figure(rep).to_html(full_html=False, include_plotlyjs=True, div_id="classes",
                                               config=_PLOT_CONFIG))
    if rep.requests is not None:
        parts.append(_html_table(rep.requests, "requests"))
    parts.append(_html_table(rep.categories, "categories"))
    parts.append("<h2>Roofline</h2>")
    if rep.points:
        parts.append(f'<p class="note">{html.escape(rep.roof_note)} One point per op name: its summed FLOPs '
                     "over its summed bytes (HBM bytes where the cost model states them, else all bytes "
                     "accessed), against its summed FLOPs over its summed device time.</p>")
        parts.append(roofline_figure(rep).to_html(full_html=False, include_plotlyjs=not ov.classes,
                                                  div_id="roofline", config=_PLOT_CONFIG))
    else:
        model = (" The model-based decode MBU/MFU above cost whole steps from the model (--model); this chart "
                 "needs FLOPs and bytes per op." if any(k.name in ("decode_mbu", "prefill_mfu") for k in ov.kpis) else "")
        parts.append('<p class="note" id="roofline-none">No roofline: no op of this run can be costed (no XLA '
                     "FLOP and byte counts, and no PyTorch GEMM/attention/elementwise op with recorded shapes: "
                     f"e.g. graph-replayed kernels, or a trace without record_shapes).{model}</p>")
    parts.append(f'<h2>Run</h2><table id="run-header">{hdr}</table>')
    parts.append(_html_table(rep.metrics, "metrics"))
    parts.append("</body></html>\n")
    return "\n".join(parts)


# ------------------------------------------------------------------------------------------------
# Markdown


def _md_cell(v: Any) -> str:
    return str(v).replace("|", "\\|").replace("\n", " ")


def _md_table(t: Table) -> str:
    lines = [f"## {t.title}", ""]
    if t.note:
        lines += [t.note, ""]
    if t.rows:
        lines.append("| " + " | ".join(t.columns) + " |")
        lines.append("|" + "".join("---:|" if c in t.numeric else "---|" for c in t.columns))
        lines += ["| " + " | ".join(_md_cell(v) for v in r) + " |" for r in t.rows]
        lines.append("")
    return "\n".join(lines)


def to_markdown(rep: Report) -> str:
    ov = rep.overview
    lines = [f"# tracekit report: run {rep.run_id}", ""]
    lines += [" · ".join(x for x in (ov.workload, ov.label, ov.device_text) if x), ""]
    if ov.kpis:
        lines += ["| " + " | ".join(k.label for k in ov.kpis) + " |", "|" + "---:|" * len(ov.kpis),
                  "| " + " | ".join(fmt.value(k.value, k.unit) + (f" (covers {fmt.percent(k.coverage)})"
                                                                  if k.coverage is not None else "")
                                    for k in ov.kpis) + " |", ""]
    if rep.analyzed_now:
        lines += [("The run had no stored findings; the analyzers were run for this report and their results "
                  "stored."), ""]
    for t in (rep.findings, rep.top, rep.requests, rep.categories):
        if t is not None:
            lines.append(_md_table(t))
    lines += ["## Roofline", "",
              (f"Not drawn in Markdown (use an .html report): {len(rep.points)} costed ops. {rep.roof_note}"), ""]
    lines += ["## Run", "", "| | |", "|---|---|", *(f"| {k} | {_md_cell(v)} |" for k, v in rep.header), ""]
    lines.append(_md_table(rep.metrics))
    return "\n".join(lines)
