"""``tracekit report``: one run as a self-contained HTML page (or Markdown) with its findings,
metrics, time by kernel category, top kernels/ops and a Plotly roofline.

Sections and the SQL behind them:

* **Run header**: ``runs`` (format, vendor, device, captured_at, workload, label, source) and the
  longest rank span ``max(ranks.last_ns - ranks.first_ns)``.
* **Findings / metrics**: the ``findings`` and ``metrics`` views. A run with neither stored is
  analyzed first (:func:`tracekit.api.analyze_runs`, every registered analyzer, on a writer
  connection), so the report always shows the analyzers' verdict; the page says when it did so.
* **Request latency** (load-driven runs only): TTFT, TPOT, ITL and e2e p50/p95/p99 from the
  ``requests`` view (:func:`tracekit.analysis.serving.request_stats`), throughput, errors and the
  stored ``usd_per_1m_output_tokens`` metric.
* **Time by kernel category**: ``kernels`` grouped by
  :func:`tracekit.analysis.categories.category_case_sql` (falls back to
  ``coalesce(hlo_category, category)`` while that module is absent). Time is
  ``coalesce(device_dur_ns, dur_ns)`` (XProf's device clock on TPU, the trace span elsewhere).
  ``xla_async`` rows (TPU async-op spans) overlap other ops: they are listed in rows of their own
  (``<category> (async spans, overlapping)``), outside the percentages.
* **Top 20**: ``kernels`` by summed time per name; ``ops`` (host, inclusive time) when the run has
  no device activity.
* **Roofline** (HTML only): one point per op name among ``kernels`` rows with ``category =
  'kernel'`` whose XLA cost model gives ``flops > 0``, bytes ``coalesce(hbm_bytes,
  bytes_accessed) > 0`` and time ``coalesce(device_dur_ns, dur_ns) > 0``: arithmetic intensity
  ``Σflops / Σbytes`` (FLOP/byte) against achieved ``Σflops / Σtime`` (FLOP/s). Roofs come from
  the identified device (:func:`tracekit.analysis.hardware.identify` on the run's device row;
  bf16 peak, HBM bandwidth, :func:`ridge_point`); when the device is not identified the chart has
  no roofs and says so (peaks are never guessed). Without a costable op the page says so instead
  of drawing an empty chart. Runs without XLA costs (Kineto) get one point per PyTorch op name
  costed from its recorded shapes — GEMM, attention, elementwise and norm ops, timed by the device
  time of the kernels they launched (``memory_bound_decode.run_op_costs``, the analyzer's own
  cost model); graph-replayed kernels carry no shapes and have no point.
"""

from __future__ import annotations

import datetime as dt
import html
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from tracekit.errors import TraceInputError
from tracekit.store import default_store_path, open_store, resolve_run_id

SUFFIXES = {".html": "html", ".htm": "html", ".md": "markdown"}
TOP_N = 20
TIME_SQL = "coalesce(device_dur_ns, dur_ns)"
BYTES_SQL = "coalesce(hbm_bytes, bytes_accessed)"
_SEVERITY_ORDER = "CASE severity WHEN 'critical' THEN 0 WHEN 'warning' THEN 1 ELSE 2 END"


def _fallback_category_case_sql(
    name: str = "name", category: str = "category", hlo_category: str = "hlo_category"
) -> str:
    return f"coalesce({hlo_category}, {category})"


def category_sql() -> tuple[str, str]:
    """(SQL expression over ``kernels`` columns, where it came from)."""
    try:
        mod = importlib.import_module("tracekit.analysis.categories")
    except ImportError:
        return _fallback_category_case_sql(), "coalesce(hlo_category, category) (fallback)"
    fn: Callable[..., str] = mod.category_case_sql
    return fn(name="name", category="category", hlo_category="hlo_category"), "tracekit.analysis.categories"


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[tuple[Any, ...]]
    note: str = ""


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
    header: list[tuple[str, Any]]
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


def render_report(run_id: str, path: str | Path, store: str | Path | None = None) -> Path:
    """Write the report of ``run_id`` to ``path`` (``.html``/``.htm``: self-contained page with an
    inline Plotly roofline; ``.md``: the same tables, no chart) and return the path.

    Raises :class:`TraceInputError` for an unknown run or an unsupported suffix."""
    out = Path(path)
    kind = SUFFIXES.get(out.suffix.lower())
    if kind is None:
        raise TraceInputError(out, "report must end in .html, .htm or .md")
    store_path = Path(store) if store is not None else default_store_path()
    with open_store(store_path, read_only=True) as con:
        run_id = resolve_run_id(con, run_id, store_path)
        stored = con.execute(
            "SELECT (SELECT count(*) FROM findings WHERE run_id = $1) + "
            "(SELECT count(*) FROM metrics WHERE run_id = $1)",
            [run_id],
        ).fetchall()[0][0]
    analyzed_now = False
    if not stored:
        from tracekit.api import analyze_runs

        analyze_runs([run_id], store_path)
        analyzed_now = True
    with open_store(store_path, read_only=True) as con:
        rep = collect(con, run_id, analyzed_now=analyzed_now)
    text = to_html(rep) if kind == "html" else to_markdown(rep)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    return out


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: Sequence[Any]) -> tuple[list[str], list[tuple[Any, ...]]]:
    rel = con.execute(sql, list(params))
    cols = [d[0] for d in rel.description] if rel.description else []
    return cols, rel.fetchall()


def collect(con: duckdb.DuckDBPyConnection, run_id: str, *, analyzed_now: bool = False) -> Report:
    """Read everything the report shows from the store (read-only SQL on the public views)."""
    cols, rows = _rows(
        con,
        """SELECT r.format, r.vendor, r.device_name AS device, r.captured_at, r.workload, r.label, r.source,
                  r.n_ranks AS ranks,
                  (SELECT max(last_ns - first_ns) FROM ranks WHERE run_id = r.run_id) AS span_ns
           FROM runs r WHERE r.run_id = ?""",
        [run_id],
    )
    info = dict(zip(cols, rows[0]))
    span = info.pop("span_ns")
    header: list[tuple[str, Any]] = [("run", run_id), *info.items()]
    header.append(("span", f"{span / 1e6:,.3f} ms" if span is not None else None))

    _, frows = _rows(
        con,
        f"""SELECT severity, analyzer, title, detail, saving_ns, saving_fraction FROM findings
            WHERE run_id = ? ORDER BY {_SEVERITY_ORDER}, saving_ns DESC NULLS LAST, analyzer, title""",
        [run_id],
    )
    findings = Table(
        "Findings",
        ["severity", "analyzer", "title", "detail", "saving"],
        [(s, a, t, d, _saving(ns, fr)) for s, a, t, d, ns, fr in frows],
        note="" if frows else "The analyzers found nothing to flag.",
    )
    _, mrows = _rows(
        con, "SELECT name, value, unit, analyzer FROM metrics WHERE run_id = ? ORDER BY analyzer, name", [run_id]
    )
    metrics = Table("Metrics", ["name", "value", "unit", "analyzer"], mrows)

    expr, origin = category_sql()
    # Classified after grouping by the columns the category depends on: the regexes then run
    # once per distinct kernel, not once per row (40 ms instead of 2 s on 1M kernels).
    _, crows = _rows(
        con,
        f"""WITH g AS (SELECT name, category, hlo_category, count(*) AS calls, sum({TIME_SQL}) AS time_ns
                       FROM kernels WHERE run_id = ? GROUP BY ALL)
            SELECT {expr} AS cat, sum(calls) AS calls, sum(time_ns) AS time_ns,
                   category = 'xla_async' AS overlapping
            FROM g GROUP BY cat, overlapping
            ORDER BY overlapping, time_ns DESC NULLS LAST, cat""",
        [run_id],
    )
    busy = sum(int(t or 0) for _, _, t, o in crows if not o)
    categories = Table(
        "Time by kernel category",
        ["category", "calls", "time_ms", "pct"],
        [
            (f"{c} (async spans, overlapping)" if o else c, n, round((t or 0) / 1e6, 3),
             None if o or not busy else round(100 * (t or 0) / busy, 1))
            for c, n, t, o in crows
        ],
        note=(
            f"Device time per category ({TIME_SQL}, categories by {origin}); pct of the total without "
            "xla_async rows (async-op spans that overlap other ops, listed separately with no pct)."
            if crows
            else "No device activity in this run."
        ),
    )

    tcols, trows = _rows(
        con,
        f"""SELECT name, any_value(category) AS category, count(*) AS calls,
                   round(sum({TIME_SQL}) / 1e6, 3) AS total_ms,
                   round(avg({TIME_SQL}) / 1e3, 3) AS mean_us
            FROM kernels WHERE run_id = ? GROUP BY name ORDER BY sum({TIME_SQL}) DESC NULLS LAST, name
            LIMIT {TOP_N}""",
        [run_id],
    )
    if trows:
        top = Table(f"Top {TOP_N} kernels by device time", tcols, trows)
    else:
        tcols, trows = _rows(
            con,
            f"""SELECT name, count(*) AS calls, round(sum(dur_ns) / 1e6, 3) AS total_ms,
                       round(avg(dur_ns) / 1e3, 3) AS mean_us
                FROM ops WHERE run_id = ? GROUP BY name ORDER BY sum(dur_ns) DESC, name LIMIT {TOP_N}""",
            [run_id],
        )
        top = Table(f"Top {TOP_N} host ops by inclusive time", tcols, trows,
                    note="No device activity; host ops instead.")

    rep = Report(run_id, header, analyzed_now, findings, metrics, categories, top)
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
    rows = [(label, *(None if v is None else round(v, 3) for v in st.latency_ms[k])) for k, label in names.items()]
    cost = con.execute(
        "SELECT value FROM metrics WHERE run_id = ? AND name = 'usd_per_1m_output_tokens'", [run_id]
    ).fetchall()
    tps, rps = st.output_tokens_per_s, st.requests_per_s
    note = (f"{st.requests} requests, {st.errors} with an error ({100 * st.error_rate:.1f} %), over "
            f"{st.window_s or 0:.3f} s: {_fmt(None if tps is None else round(tps, 1))} output tokens/s, "
            f"{_fmt(None if rps is None else round(rps, 2))} requests/s; token counts from "
            f"{' and '.join(st.token_count_sources)}. "
            + (f"Cost: ${cost[0][0]:.4f} per 1M output tokens." if cost and cost[0][0] is not None
               else "Cost per token: no device price (see the serving finding).")
            + " Latencies over the requests without error.")
    return Table("Request latency", ["measure", "p50_ms", "p95_ms", "p99_ms"], rows, note=note)


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
    from tracekit.analysis.hardware import identify, ridge_point

    cols, rows = _rows(
        con,
        """SELECT d.* FROM devices d JOIN runs r USING (run_id)
           WHERE d.run_id = ? ORDER BY (d.name IS NOT DISTINCT FROM r.device_name) DESC, d.rank, d.device
           LIMIT 1""",
        [run_id],
    )
    if not rows:
        rep.roof_note = "The run lists no device, so no roofs are drawn."
        return
    spec = identify(dict(zip(cols, rows[0])))
    if spec is None:
        name = rows[0][cols.index("name")]
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


def _saving(ns: int | None, frac: float | None) -> str:
    parts = []
    if ns is not None:
        parts.append(f"{ns / 1e6:,.3f} ms")
    if frac is not None:
        parts.append(f"{100 * frac:.1f}%")
    return " / ".join(parts)


def _fmt(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, dt.datetime):
        return v.strftime("%Y-%m-%d %H:%M:%S UTC")
    if isinstance(v, float):
        return f"{v:,.3f}" if 1 <= abs(v) < 1e9 else f"{v:.6g}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


# ------------------------------------------------------------------------------------------------
# HTML


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2rem;color:#222;max-width:1200px}
h1{font-size:1.5rem}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:.85rem;margin:.5rem 0}
td,th{border:1px solid #ddd;padding:.25rem .5rem;vertical-align:top;text-align:left}
th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
.sev-critical{color:#b00020;font-weight:bold}.sev-warning{color:#a15c00;font-weight:bold}
.note{color:#555;font-size:.85rem}
"""


def _html_table(t: Table, id_: str) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in t.columns)
    body = []
    for r in t.rows:
        cells = []
        for c, v in zip(t.columns, r):
            cls = ' class="num"' if isinstance(v, (int, float)) and not isinstance(v, bool) else ""
            if c == "severity":
                cls = f' class="sev-{html.escape(str(v))}"'
            cells.append(f"<td{cls}>{html.escape(_fmt(v))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    note = f'<p class="note">{html.escape(t.note)}</p>' if t.note else ""
    table = f'<table id="{id_}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>' if t.rows else ""
    return f"<h2>{html.escape(t.title)}</h2>{note}{table}"


def roofline_figure(rep: Report) -> Any:
    """The Plotly figure: trace ``ops`` (one marker per costable op name) plus roof lines."""
    import plotly.graph_objects as go

    pts = rep.points
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            name="ops",
            x=[p.intensity for p in pts],
            y=[p.flops_per_s for p in pts],
            mode="markers",
            marker={"size": 9},
            text=[p.name for p in pts],
            customdata=[[p.hlo_category or "", p.calls, p.time_ns / 1e6] for p in pts],
            hovertemplate="%{text}<br>%{customdata[0]}<br>calls %{customdata[1]}<br>time %{customdata[2]:.3f} ms"
            "<br>%{x:.3g} FLOP/byte<br>%{y:.3g} FLOP/s<extra></extra>",
        )
    )
    xs = [p.intensity for p in pts]
    lo, hi = min(xs) / 10, max(xs) * 10
    if rep.ridge is not None:
        lo, hi = min(lo, rep.ridge / 10), max(hi, rep.ridge * 10)
    if rep.hbm_bps and rep.peak_flops and rep.ridge:
        fig.add_trace(
            go.Scatter(name=f"roof ({rep.device_label})", x=[lo, rep.ridge, hi],
                       y=[rep.hbm_bps * lo, rep.peak_flops, rep.peak_flops], mode="lines",
                       line={"color": "#b00020"}, hoverinfo="skip")
        )
    elif rep.peak_flops:
        fig.add_trace(go.Scatter(name="compute peak", x=[lo, hi], y=[rep.peak_flops] * 2, mode="lines",
                                 hoverinfo="skip"))
    elif rep.hbm_bps:
        fig.add_trace(go.Scatter(name="HBM roof", x=[lo, hi], y=[rep.hbm_bps * lo, rep.hbm_bps * hi],
                                 mode="lines", hoverinfo="skip"))
    fig.update_layout(
        title=f"Roofline: {len(pts)} ops (XLA cost model FLOPs and bytes, device time)",
        xaxis={"type": "log", "title": "arithmetic intensity (FLOP/byte)"},
        yaxis={"type": "log", "title": "achieved FLOP/s"},
        height=520, template="plotly_white",
    )
    return fig


def to_html(rep: Report) -> str:
    hdr = "".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(_fmt(v))}</td></tr>" for k, v in rep.header
    )
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>tracekit report {html.escape(rep.run_id)}</title><style>{_CSS}</style></head><body>",
        f"<h1>tracekit report: run {html.escape(rep.run_id)}</h1>",
        f'<table id="run-header">{hdr}</table>',
    ]
    if rep.analyzed_now:
        parts.append('<p class="note">The run had no stored findings; the analyzers were run for this report '
                     "and their results stored.</p>")
    parts.append(_html_table(rep.findings, "findings"))
    parts.append(_html_table(rep.metrics, "metrics"))
    if rep.requests is not None:
        parts.append(_html_table(rep.requests, "requests"))
    parts.append(_html_table(rep.categories, "categories"))
    parts.append(_html_table(rep.top, "top"))
    parts.append("<h2>Roofline</h2>")
    if rep.points:
        parts.append(f'<p class="note">{html.escape(rep.roof_note)} One point per op name: Σflops/Σbytes '
                     f"({BYTES_SQL}) against Σflops/Σ{TIME_SQL}.</p>")
        parts.append(roofline_figure(rep).to_html(full_html=False, include_plotlyjs=True, div_id="roofline"))
    else:
        parts.append('<p class="note" id="roofline-none">No chart: no op of this run can be costed (no XLA FLOP '
                     "and byte counts, and no PyTorch GEMM/attention/elementwise op with recorded shapes: e.g. "
                     "graph-replayed kernels, or a trace without record_shapes).</p>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


# ------------------------------------------------------------------------------------------------
# Markdown


def _md_cell(v: Any) -> str:
    return _fmt(v).replace("|", "\\|").replace("\n", " ")


def _md_table(t: Table) -> str:
    lines = [f"## {t.title}", ""]
    if t.note:
        lines += [t.note, ""]
    if t.rows:
        lines.append("| " + " | ".join(t.columns) + " |")
        lines.append("|" + "---|" * len(t.columns))
        lines += ["| " + " | ".join(_md_cell(v) for v in r) + " |" for r in t.rows]
        lines.append("")
    return "\n".join(lines)


def to_markdown(rep: Report) -> str:
    lines = [f"# tracekit report: run {rep.run_id}", "", "| | |", "|---|---|"]
    lines += [f"| {k} | {_md_cell(v)} |" for k, v in rep.header]
    lines.append("")
    if rep.analyzed_now:
        lines += [("The run had no stored findings; the analyzers were run for this report and their results "
                  "stored."), ""]
    for t in (rep.findings, rep.metrics, rep.requests, rep.categories, rep.top):
        if t is not None:
            lines.append(_md_table(t))
    lines += ["## Roofline", "",
              (f"Not drawn in Markdown (use an .html report): {len(rep.points)} ops with XLA costs (ops costed "
               f"from PyTorch shapes are in the memory_bound_decode finding). {rep.roof_note}"), ""]
    return "\n".join(lines)

