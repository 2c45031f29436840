"""The Dash app: five pages routed from the URL, each rendered on the server from one read-only
connection that is opened for the request and closed after it (so ``tracekit ingest`` can take
the store's write lock between page loads).

URL scheme (every filter and selection is a query parameter, so a view can be pasted into a doc):

* ``/`` — Runs: ``q`` (search text), ``sort`` (a column of :data:`data.RUN_SORT_COLUMNS`),
  ``dir`` (``asc``/``desc``), ``sel`` (up to two selected run ids, comma-separated).
* ``/weekly`` — Weekly review: ``workload``, ``week`` (a Monday, ``YYYY-MM-DD``; default latest).
* ``/run`` — one run: ``run``.
* ``/compare`` — two runs: ``a`` (baseline), ``b``.
* ``/portfolio`` — which hardware serves a model cheapest at a speed (:mod:`tracekit.portfolio`):
  ``model``, ``workload``, ``sweep`` (filters), ``speed`` (the band, output tokens/s per user,
  default 50), ``sheet`` (``rented``/``owned``; default the price sheet file's, else rented).
* ``/download/perfetto/<run>.json`` — the run's Chrome-trace export
  (:func:`tracekit.present.perfetto.write_chrome_trace`).

Unknown pages, unknown run ids and malformed parameters render a one-line message on the page
(``id="page-error"``), never a traceback.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import os
import re
import tempfile
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dash
import duckdb
from dash import Input, Output, State, dash_table, dcc, html
from flask import Response, abort, send_file

from tracekit import formatting as fmt
from tracekit.dashboard import data
from tracekit.errors import StoreLockedError, TracekitError
from tracekit.lake.readers import ReaderPool
from tracekit.lake.url import is_lake
from tracekit.names import short_kernel_names
from tracekit.store import close, connect, open_store, resolve_store

#: Seconds a page waits for the store while an ingest (the one writer) holds it, before it shows
#: :data:`BUSY_MESSAGE` instead of hanging; TRACEKIT_DASHBOARD_LOCK_TIMEOUT overrides it.
PAGE_LOCK_WAIT_S = 2.0

#: What a page says when the store stayed locked by a writer for :data:`PAGE_LOCK_WAIT_S`.
BUSY_MESSAGE = ("The store is being written by an ingest (or another tracekit command that writes it); "
                "reload in a moment.")


def _page_lock_wait_s() -> float:
    try:
        return max(0.0, float(os.environ.get("TRACEKIT_DASHBOARD_LOCK_TIMEOUT", PAGE_LOCK_WAIT_S)))
    except ValueError:
        return PAGE_LOCK_WAIT_S

DataTable: Any = dash_table.DataTable  # type: ignore[attr-defined]  # generated at import time
_RUN_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_GREEN, _RED = "#e3f4e1", "#fbe3e4"
#: Plotly's mode bar only while the pointer is on a chart, so it never covers a title.
_GRAPH_CONFIG: Any = {"displaylogo": False, "displayModeBar": "hover"}

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:0;color:#222}
#nav{background:#1f2a37;padding:.6rem 1.5rem}#nav a{color:#fff;margin-right:1.5rem;text-decoration:none}
#nav .brand{font-weight:bold}#page{padding:1rem 1.5rem;max-width:1400px}
h2{font-size:1.3rem}h3{font-size:1.05rem;margin-top:1.6rem;border-bottom:1px solid #ddd}
.note{color:#555;font-size:.85rem}.tk-error{color:#b00020;font-weight:bold;padding:1rem 0}
.sev-critical{color:#b00020;font-weight:bold}.sev-warning{color:#a15c00;font-weight:bold}.sev-info{color:#555}
details{margin:.3rem 0;padding:.3rem .5rem;border:1px solid #e4e4e4;border-radius:4px}
summary{cursor:pointer}pre{font-size:.75rem;background:#f7f7f7;padding:.5rem;overflow-x:auto}
.better{background:#e3f4e1}.worse{background:#fbe3e4}
.cards{display:flex;flex-wrap:wrap;gap:.6rem}.card{border:1px solid #ddd;border-radius:4px;padding:.4rem .8rem}
.card b{display:block;font-size:1.1rem}th{text-align:left;padding-right:.8rem}
.kpi b{font-size:1.5rem}.kpi small{display:block;color:#777;max-width:16rem}.sub{color:#444;margin-top:-.4rem}
"""


def _index_string() -> str:
    return (
        "<!DOCTYPE html><html><head>{%metas%}<title>{%title%}</title>{%favicon%}{%css%}"
        f"<style>{_CSS}</style></head><body>{{%app_entry%}}<footer>{{%config%}}{{%scripts%}}"
        "{%renderer%}</footer></body></html>"
    )


class PageError(Exception):
    """A bad URL parameter or an unknown run: shown as one line on the page."""


def _one(params: dict[str, list[str]], key: str, default: str = "") -> str:
    values = params.get(key)
    if not values:
        return default
    if len(values) > 1:
        raise PageError(f"parameter {key!r} given {len(values)} times")
    return values[0].strip()


def _run_param(con: duckdb.DuckDBPyConnection, params: dict[str, list[str]], key: str) -> str:
    rid = _one(params, key)
    if not rid:
        raise PageError(f"no run given (add ?{key}=RUN_ID; see the Runs page)")
    if not _RUN_ID.match(rid) or not data.run_exists(con, rid):
        raise PageError(f"no run {rid!r} in the store (see the Runs page)")
    return rid


def _table(id_: str, rows: list[dict[str, Any]], columns: list[str] | None = None, **kw: Any) -> Any:
    cols = columns if columns is not None else (list(rows[0]) if rows else [])
    return DataTable(
        id=id_, data=rows, columns=[{"name": c, "id": c} for c in cols],
        style_cell={"fontFamily": "inherit", "fontSize": ".82rem", "textAlign": "left", "maxWidth": "420px",
                    "overflow": "hidden", "textOverflow": "ellipsis", "padding": "3px 6px"},
        style_header={"fontWeight": "bold", "background": "#f4f4f4"}, page_size=kw.pop("page_size", 25), **kw,
    )


def _note(text: str, id_: str | None = None) -> Any:
    return html.P(text, className="note", id=id_) if id_ else html.P(text, className="note")


def _delta_styles(column: str, better: str = "lower") -> list[dict[str, Any]]:
    """Green where ``column`` moved the good way, red the bad way (``better``: lower/higher)."""
    good, bad = ("< 0", "> 0") if better == "lower" else ("> 0", "< 0")
    return [{"if": {"filter_query": f"{{{column}}} {good}", "column_id": column}, "backgroundColor": _GREEN},
            {"if": {"filter_query": f"{{{column}}} {bad}", "column_id": column}, "backgroundColor": _RED}]


def _figure(traces: list[dict[str, Any]], title: str, height: int, **layout: Any) -> dict[str, Any]:
    """A plotly.js figure as a plain dict (no plotly.py validation: it costs ~10 ms a figure)."""
    axis = {"gridcolor": "#eee", "zerolinecolor": "#ccc"}
    lay: dict[str, Any] = {"title": {"text": title, "font": {"size": 14}}, "height": height,
                           "paper_bgcolor": "white", "plot_bgcolor": "white",
                           "margin": {"l": 50, "r": 10, "t": 40, "b": 40}, "font": {"size": 11}}
    for key, value in layout.items():
        lay[key] = {**axis, **value} if key.startswith(("xaxis", "yaxis")) else value
    lay.setdefault("xaxis", axis)
    lay.setdefault("yaxis", axis)
    return {"data": traces, "layout": lay}


# ---------------------------------------------------------------------------------------------
# Runs


def page_runs(con: duckdb.DuckDBPyConnection, params: dict[str, list[str]]) -> list[Any]:
    q = _one(params, "q")
    sort = _one(params, "sort", "captured_at")
    direction = _one(params, "dir", "desc")
    if sort not in data.RUN_SORT_COLUMNS:
        raise PageError(f"sort={sort!r}: expected one of {', '.join(data.RUN_SORT_COLUMNS)}")
    if direction not in ("asc", "desc"):
        raise PageError(f"dir={direction!r}: expected asc or desc")
    sel = [s for s in _one(params, "sel").split(",") if s][:2]
    page = _page_number(_one(params, "page", "1"))
    cols, rows, total = data.runs_table(con, q, sort, direction == "desc", limit=RUNS_PAGE_SIZE,
                                        offset=(page - 1) * RUNS_PAGE_SIZE)
    n_pages = max(1, -(-total // RUNS_PAGE_SIZE))
    ids = [r["run_id"] for r in rows]
    for r in rows:
        r["run"] = f"[{r['run_id']}](/run?run={r['run_id']})"
    columns = [{"name": "run", "id": "run", "presentation": "markdown"}]
    labels = {m.id: m.label for m in data.HEADLINE_METRICS} | {"captured_at": "captured (UTC)",
                                                                "device": "device (catalog)"}
    columns += [{"name": labels.get(c, c), "id": c} for c in cols if c != "run_id"]
    numeric = ["critical", "warning", "info", "kernels", *(m.id for m in data.HEADLINE_METRICS)]
    if len(sel) == 2 and all(data.run_exists(con, s) for s in sel):
        compare: Any = dcc.Link(f"Compare {sel[0]} (A) with {sel[1]} (B) →", id="compare-link",
                                href=f"/compare?{urllib.parse.urlencode({'a': sel[0], 'b': sel[1]})}")
    else:
        compare = _note("Select two runs (checkboxes) to compare them.", "compare-hint")
    return [
        html.H2("Runs"),
        dcc.Input(id="runs-search", type="search", value=q, debounce=True, placeholder="search workload, label, "
                  "device, run id …", style={"width": "28rem", "marginBottom": ".5rem"}),
        _note(f"{total} runs{f' (page {page} of {n_pages})' if n_pages > 1 else ''}. The device is the hardware-catalog device the analyzers costed against; "
              "findings per severity; headline metrics from the analyzers (— : not measured; a column "
              "appears when a run has it). Click a column header to sort.", "runs-count"),
        DataTable(
            id="runs-table", data=rows, columns=columns, sort_action="custom", sort_mode="single",
            sort_by=[{"column_id": sort, "direction": direction}], row_selectable="multi",
            selected_rows=[ids.index(s) for s in sel if s in ids], markdown_options={"link_target": "_self"},
            # pages come from the server (the store), 50 runs at a time, not every run to the browser
            page_action="custom", page_current=min(page, n_pages) - 1, page_size=RUNS_PAGE_SIZE, page_count=n_pages,
            style_cell={"fontFamily": "inherit", "fontSize": ".82rem", "textAlign": "left", "padding": "3px 6px",
                        "maxWidth": "220px", "overflow": "hidden", "textOverflow": "ellipsis"},
            style_cell_conditional=[{"if": {"column_id": c}, "textAlign": "right"} for c in numeric],
            style_header={"fontWeight": "bold", "background": "#f4f4f4", "whiteSpace": "normal"},
            style_table={"overflowX": "auto"},
            tooltip_data=[{c: {"value": str(r[c]), "type": "text"} for c in ("device", "label", "trace")
                           if r.get(c)} for r in rows], tooltip_duration=None,
            style_data_conditional=[
                {"if": {"filter_query": "{critical} > 0", "column_id": "critical"}, "color": "#b00020",
                 "fontWeight": "bold"},
                {"if": {"filter_query": "{warning} > 0", "column_id": "warning"}, "color": "#a15c00",
                 "fontWeight": "bold"}],
        ),
        html.Div(compare, id="runs-compare", style={"marginTop": ".6rem"}),
    ]


#: Runs per page of the Runs table.
RUNS_PAGE_SIZE = 50


def _page_number(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise PageError(f"page={text!r}: expected a page number from 1")
    return int(text)


def runs_url(search: str | None, sort_by: list[dict[str, str]] | None, selected: list[int] | None,
             page_current: int | None, rows: list[dict[str, Any]] | None, current: str | None) -> str:
    """The Runs page's URL query for the controls' state (raises PreventUpdate when unchanged). A
    new search or sort starts again at page 1."""
    query: dict[str, str] = {}
    if search:
        query["q"] = search
    if sort_by:
        query["sort"] = sort_by[0]["column_id"]
        query["dir"] = sort_by[0]["direction"]
    ids = [rows[i]["run_id"] for i in (selected or []) if rows and 0 <= i < len(rows)]
    if ids:
        query["sel"] = ",".join(ids[-2:])
    before = urllib.parse.parse_qs((current or "").lstrip("?"))
    same_list = all(before.get(k, [""])[0] == query.get(k, "") for k in ("q", "sort", "dir"))
    if page_current and same_list:
        query["page"] = str(page_current + 1)
    new = "?" + urllib.parse.urlencode(query) if query else ""
    if new == (current or ""):
        raise dash.exceptions.PreventUpdate
    return new


# ---------------------------------------------------------------------------------------------
# Weekly review


def _trend_figure(points: list[data.TrendPoint], label: str) -> dict[str, Any]:
    unit, better = points[0].unit, points[0].better
    traces = []
    for hw in sorted({p.hardware for p in points}):
        pts = [p for p in points if p.hardware == hw]
        traces.append({
            "type": "scatter", "name": hw, "x": [p.week.isoformat() for p in pts], "y": [p.value for p in pts],
            "mode": "lines+markers", "customdata": [[p.runs, fmt.value(p.value, unit)] for p in pts],
            "hovertemplate": "week of %{x}<br>%{customdata[1]}<br>median of %{customdata[0]} run(s)<extra>"
                             + hw + "</extra>"})
    weeks = sorted({p.week for p in points})
    # whole weeks on the axis: a one-week chart spans that week ± 4 days, not a millisecond
    lo, hi = weeks[0] - dt.timedelta(days=4), weeks[-1] + dt.timedelta(days=4)
    xaxis = {"type": "date", "range": [lo.isoformat(), hi.isoformat()], "tickformat": "%b %d",
             "dtick": 7 * 86_400_000 * max(1, len(weeks) // 8)}
    yaxis: dict[str, Any] = {"title": {"text": _axis_unit(unit)}}
    if unit == "fraction":
        yaxis |= {"tickformat": ".0%", "title": {"text": ""}}
    return _figure(traces, f"{label} ({better} is better)", 260, xaxis=xaxis, yaxis=yaxis,
                   showlegend=True, legend={"orientation": "h", "y": -0.25},
                   margin={"l": 55, "r": 10, "t": 40, "b": 30})


def _axis_unit(unit: str) -> str:
    return {"us": "µs", "count": "", "x": "×"}.get(unit, unit)


def page_weekly(con: duckdb.DuckDBPyConnection, params: dict[str, list[str]]) -> list[Any]:
    loads = data.workloads(con)
    if not loads:
        return [html.H2("Weekly review"),
                _note("No run has a workload and a capture time yet: ingest with --workload (and "
                      "--captured-at when the trace has no wall-clock time).", "weekly-empty")]
    names = [w for w, _ in loads]
    workload = _one(params, "workload", names[0])
    if workload not in names:
        raise PageError(f"no runs of workload {workload!r} with a capture time (workloads: {', '.join(names)})")
    weeks = data.workload_weeks(con, workload)
    week_text = _one(params, "week", weeks[0].isoformat())
    try:
        week = dt.date.fromisoformat(week_text)
    except ValueError:
        raise PageError(f"week={week_text!r}: expected a date YYYY-MM-DD") from None
    if week not in weeks:
        raise PageError(f"workload {workload!r} has no runs in the week of {week_text} "
                        f"(weeks: {', '.join(w.isoformat() for w in weeks)})")
    prev = next((w for w in weeks if w < week), None)
    trends = [p for p in data.weekly_trends(con, workload) if p.week <= week]
    controls = html.Div([
        html.Label("workload "), dcc.Dropdown(id="weekly-workload", options=names, value=workload, clearable=False,
                                               style={"width": "22rem", "display": "inline-block"}),
        html.Label(" week of ", style={"marginLeft": "1rem"}),
        dcc.Dropdown(id="weekly-week", options=[w.isoformat() for w in weeks], value=week.isoformat(),
                     clearable=False, style={"width": "10rem", "display": "inline-block"}),
    ])
    out: list[Any] = [html.H2(f"Weekly review: {workload}"), controls]
    graphs = []
    for m in data.KEY_METRICS:
        pts = [p for p in trends if p.metric == m.name]
        if pts:
            graphs.append(html.Div(dcc.Graph(id=f"trend-{m.name}", figure=_trend_figure(pts, m.label),
                                             config={"displayModeBar": False}),
                                   style={"width": "49%", "display": "inline-block"}))
    out.append(html.H3("Trends (median per week and hardware)"))
    out.append(html.Div(graphs, id="trends") if graphs else _note("No key metric has values for this workload.",
                                                                  "trends-none"))
    wow = [p for p in trends if p.week == week]
    labels = {m.name: m.label for m in data.KEY_METRICS}
    rows = [{"metric": labels[p.metric], "hardware": p.hardware, "better": p.better,
             "previous": fmt.value(p.prev_value, p.unit), "this week": fmt.value(p.value, p.unit),
             "change": fmt.UNKNOWN if p.delta_pct is None else f"{p.delta_pct:+.1f}%", "verdict": p.direction}
            for p in sorted(wow, key=lambda p: ([m.name for m in data.KEY_METRICS].index(p.metric), p.hardware))]
    out.append(html.H3(f"Week of {week.isoformat()} vs "
                       f"{prev.isoformat() if prev else '(no earlier week)'}"))
    out.append(_table("wow-table", rows, style_data_conditional=[
        {"if": {"filter_query": '{verdict} = "better"'}, "backgroundColor": _GREEN},
        {"if": {"filter_query": '{verdict} = "worse"'}, "backgroundColor": _RED}]))
    out.append(html.H3("What changed this week"))
    if prev is None:
        out.append(_note("No earlier week to compare with.", "changes-none"))
    else:
        changes = data.finding_changes(con, workload, week, prev)
        items = [html.Li([html.Span(f"{c['change']}: ", className="sev-" + c["severity"]),
                          f"[{c['hardware']}] ({c['analyzer']}) {c['title']} — ",
                          dcc.Link(c["run_id"], href=f"/run?run={c['run_id']}")]) for c in changes]
        out.append(html.Ul(items, id="finding-changes") if items else
                   _note("No finding appeared or went away.", "finding-changes-none"))
        shifts = data.category_shifts(con, workload, week, prev)
        out.append(html.H4("Biggest kernel-category shifts (share of device time, percentage points)"))
        out.append(_table("category-shifts", shifts, style_data_conditional=_delta_styles("delta_ms"))
                   if shifts else _note("No device kernels in one of the two weeks' runs (e.g. CPU-only "
                                        "captures), so no category shifts.", "category-shifts-none"))
    hardware = sorted({p.hardware for p in trends})
    if len(hardware) > 1:
        latest: dict[tuple[str, str], data.TrendPoint] = {}
        for p in trends:
            latest[(p.metric, p.hardware)] = p  # trends are ordered by week
        port = [{"metric": labels[m.name], "better": next((p.better for (n, _), p in latest.items()
                                                            if n == m.name), ""),
                 **{hw: (fmt.value(latest[(m.name, hw)].value, latest[(m.name, hw)].unit)
                         if (m.name, hw) in latest else fmt.UNKNOWN) for hw in hardware}}
                for m in data.KEY_METRICS if any(n == m.name for n, _ in latest)]
        out.append(html.H3("Hardware side by side (each one's latest week up to this one)"))
        out.append(_table("portfolio", port))
    return out


# ---------------------------------------------------------------------------------------------
# Run


def _bar(x: list[Any], y: list[Any], title: str, ylabel: str) -> dict[str, Any]:
    return _figure([{"type": "bar", "x": x, "y": y, "marker": {"color": "#4c78a8"}}], title, 300,
                   yaxis={"title": {"text": ylabel}})


def page_run(con: duckdb.DuckDBPyConnection, params: dict[str, list[str]]) -> list[Any]:
    from tracekit.present.figures import roofline_figure
    from tracekit.report_data import collect

    rid = _run_param(con, params, "run")
    rep = collect(con, rid)
    ov = rep.overview
    kpis = [html.Div([html.B(fmt.value(k.value, k.unit)), html.Span(k.label),
                      *([html.Small(f"covers {fmt.percent(k.coverage)} of its phase")] if k.coverage is not None
                        else []), *([html.Small(k.note)] if k.note else [])],
                     className="card kpi", id=f"kpi-{k.name}") for k in ov.kpis]
    sub = " · ".join(x for x in (ov.workload, ov.label, ov.device_text,
                                 f"{ov.ranks} rank{'s' if ov.ranks != 1 else ''}") if x)
    links: list[Any] = [html.A("Download the Perfetto trace (Chrome JSON)", id="perfetto-link",
                               href=f"/download/perfetto/{rid}.json"),
                        " · open it in ui.perfetto.dev · ",
                        dcc.Link("compare with another run", href=f"/compare?a={rid}")]
    if ov.format == "xplane":  # XProf on the run's own files (trace viewer, memory profile, HLO graphs)
        links += [" · ", html.A("Open in XProf", id="xprof-link", href=f"/xprof/{rid}", target="_blank",
                                title="starts XProf on this run's profile directory, on 127.0.0.1 "
                                      "(pip install 'tracekit[xprof]')")]
    out: list[Any] = [
        html.H2(f"Run {rid}"),
        html.P(sub, className="sub", id="run-sub"),
        html.Div(kpis, className="cards", id="run-kpis") if kpis else
        _note("No headline metric for this run (not analyzed, or nothing measurable).", "run-kpis-none"),
        html.P(links),
    ]
    serving = data.serving_metrics(con, rid)
    if serving:
        out.append(html.H3("Requests"))
        out.append(html.Div([html.Div([html.Span(fmt.label(s["name"])), html.B(fmt.value(s["value"], s["unit"]))],
                                      className="card", title=f"{s['better']} is better") for s in serving],
                            className="cards", id="serving-metrics"))
    findings = data.run_findings(con, rid)
    out.append(html.H3(f"Findings ({len(findings)})"))
    if not findings:
        analyzed = bool(rep.metrics.rows)
        out.append(_note("The analyzers found nothing to flag." if analyzed else
                         f"Not analyzed yet: run `tracekit analyze {rid}`.", "findings-none"))
    for f in findings:
        saving = " · ".join(x for x in (
            f"saves ≈{fmt.duration_ns(f['saving_ns'])}" if f["saving_ns"] is not None else "",
            f"{fmt.percent(f['saving_fraction'])} of the run" if f["saving_fraction"] is not None else "") if x)
        out.append(html.Details([
            html.Summary([html.Span(f["severity"], className="sev-" + f["severity"]), f" {f['title']} ",
                          html.Span(f"({f['analyzer']}{'; ' + saving if saving else ''})", className="note")],
                         className="finding-title"),
            html.P(f["detail"]), html.Pre(f["evidence"] or "(no evidence)")], className="finding"))
    out.append(html.H3(rep.top.title))
    if rep.top.note:
        out.append(_note(rep.top.note))
    top_rows = [dict(zip(rep.top.columns, r)) for r in rep.top.rows]
    out.append(_table("top-table", top_rows, page_size=20,
                      tooltip_data=[{rep.top.columns[0]: {"value": full, "type": "text"}} for full in rep.top.hover or []],
                      tooltip_duration=None,
                      style_cell_conditional=[{"if": {"column_id": c}, "textAlign": "right"} for c in rep.top.numeric]))
    out.append(html.H3("Where the device time went"))
    if ov.classes:
        from tracekit.present.figures import class_figure

        out.append(dcc.Graph(id="run-categories", figure=class_figure(rep), config=_GRAPH_CONFIG))
    out.append(_note(rep.categories.note))
    out.append(_table("run-categories-table", [dict(zip(rep.categories.columns, r)) for r in rep.categories.rows]))
    hists = data.request_histograms(con, rid)
    if hists:
        out.append(html.H3("Request latency distribution"))
        for h in hists:
            fig = _figure([{"type": "bar", "x": [(a + b) / 2 for a, b in zip(h.edges_ms, h.edges_ms[1:])],
                            "y": h.counts, "width": [b - a for a, b in zip(h.edges_ms, h.edges_ms[1:])],
                            "marker": {"color": "#4c78a8"}}],
                          f"{h.label}: {h.n} requests", 280, xaxis={"title": {"text": "ms"}},
                          yaxis={"title": {"text": "requests"}}, bargap=0.02)
            out.append(dcc.Graph(id=f"hist-{h.column}", figure=fig))
    out.append(html.H3("Roofline"))
    source = ("XLA cost model: one point per op name, its summed FLOPs over its summed bytes (HBM bytes where "
              "stated) against its summed FLOPs over its summed device time")
    if rep.points and rep.points[0].hlo_category == "torch op (shapes)":
        source = ("PyTorch GEMM / attention / elementwise / norm ops, one point per op name, FLOPs and bytes from "
                  "their recorded shapes, time from the op's kernels (CPU-only run: the op itself) — the "
                  "analyzer's cost model (memory_bound_decode.run_op_costs)")
    if rep.points:
        out.append(_note(f"{rep.roof_note} Points: {source}."))
        out.append(dcc.Graph(id="roofline", figure=roofline_figure(rep), config=_GRAPH_CONFIG))
    else:
        out.append(_note("No costable ops: no XLA FLOP and byte counts and no PyTorch op with recorded shapes "
                         "(graph-replayed kernels, or a trace without record_shapes), so there is no roofline.",
                         "roofline-none"))
    compiles = data.compile_timeline(con, rid)
    out.append(html.H3(f"Compiles ({len(compiles)}{'+' if len(compiles) == data.TOP_COMPILES else ''})"))
    if compiles:
        fig = _figure([{
            "type": "bar", "orientation": "h", "y": [f"{c['function']} #{i}" for i, c in enumerate(compiles)],
            "x": [c["dur_ms"] for c in compiles], "base": [c["start_ms"] for c in compiles],
            "marker": {"color": "#e45756"}, "customdata": [[c["backend"], c["compile_id"] or ""] for c in compiles],
            "hovertemplate": "%{y}<br>%{customdata[0]} %{customdata[1]}<br>start %{base:.1f} ms, %{x:.1f} ms"
                             "<extra></extra>"}],
            "compile timeline (ms from the rank's first event)", max(220, 40 + 22 * len(compiles)),
            xaxis={"title": {"text": "ms"}}, yaxis={"autorange": "reversed"},
            margin={"l": 160, "r": 10, "t": 40, "b": 40})
        out.append(dcc.Graph(id="compile-timeline", figure=fig))
    else:
        out.append(_note("No compilations in this capture.", "compiles-none"))
    out.append(html.H3("Run"))
    out.append(html.Table([html.Tr([html.Th(k), html.Td(v)]) for k, v in rep.header], id="run-header"))
    out.append(html.H3("Metrics"))
    out.append(_table("metrics-table", [{"metric": fmt.label(r[0]), "name": r[0], "value": r[1], "analyzer": r[2]}
                                        for r in rep.metrics.rows],
                      style_cell_conditional=[{"if": {"column_id": "value"}, "textAlign": "right"}]))
    return out


# ---------------------------------------------------------------------------------------------
# Compare


def page_compare(con: duckdb.DuckDBPyConnection, params: dict[str, list[str]], store: str | Path) -> list[Any]:
    from tracekit.compare import compare_runs

    choices = data.run_choices(con)
    a_text, b_text = _one(params, "a"), _one(params, "b")
    a = _run_param(con, params, "a") if a_text else None
    b = _run_param(con, params, "b") if b_text else None
    out: list[Any] = [html.H2("Compare two runs"), html.Div([
        html.Label("A (baseline) "), dcc.Dropdown(id="compare-a", options=choices, value=a,
                                                  style={"width": "34rem"}),
        html.Label("B "), dcc.Dropdown(id="compare-b", options=choices, value=b, style={"width": "34rem"})])]
    if a is None or b is None:
        out.append(_note("Pick run A and run B.", "compare-pick"))
        return out
    res = compare_runs(a, b, store, con=con)
    data.hardware_table(con)
    info = {r[0]: r[1:] for r in con.execute(
        """SELECT r.run_id, r.vendor, h.hardware, r.workload, r.label, r.captured_at,
                  regexp_extract(r.source, '[^/]+/?$') AS trace FROM runs r
           LEFT JOIN run_hardware h USING (run_id) WHERE r.run_id IN (?, ?)""", [a, b]).fetchall()}
    head = ["vendor", "device (catalog)", "workload", "label", "captured"]
    out.append(html.Table([html.Tr([html.Th(""), html.Th(dcc.Link(f"A {a}", href=f"/run?run={a}")),
                                    html.Th(dcc.Link(f"B {b}", href=f"/run?run={b}"))])]
                          + [html.Tr([html.Th(h), html.Td(fmt.value(info[a][i])), html.Td(fmt.value(info[b][i]))])
                             for i, h in enumerate(head)], id="compare-header"))

    def legend(side: str, rid: str) -> str:  # a person's name for a run: workload, label or file, and device
        _, hw, workload, label, _, trace = info[rid]
        return f"{side}: {' · '.join(x for x in (workload or label or trace or rid, hw) if x)}"

    cat_cols, cat_rows = res["categories"]
    cats = [dict(zip(cat_cols, r)) for r in cat_rows]
    fig = _figure([{"type": "bar", "name": legend("A", a), "x": [c["category"] for c in cats],
                    "y": [c["a_ms"] for c in cats]},
                   {"type": "bar", "name": legend("B", b), "x": [c["category"] for c in cats],
                    "y": [c["b_ms"] for c in cats]}], "device time by kernel class", 320, barmode="group",
                  yaxis={"title": {"text": "ms"}}, legend={"orientation": "h", "y": -0.2})
    ta, tb = sum(c["a_ms"] for c in cats), sum(c["b_ms"] for c in cats)
    total = {"category": "total", "a_kernels": sum(c["a_kernels"] for c in cats), "a_ms": round(ta, 3),
             "a_pct": 100.0 if ta else None, "b_kernels": sum(c["b_kernels"] for c in cats), "b_ms": round(tb, 3),
             "b_pct": 100.0 if tb else None, "delta_ms": round(tb - ta, 3),
             "delta_pct": round(100 * (tb - ta) / ta, 1) if ta else None}
    out += [html.H3("By kernel class"), dcc.Graph(id="compare-categories", figure=fig, config=_GRAPH_CONFIG),
            _note("delta = B − A; green: B spends less time, red: more. The last row is the total."),
            _table("compare-categories-table", [*cats, total], style_data_conditional=[
                *_delta_styles("delta_ms"), *_delta_styles("delta_pct"),
                {"if": {"filter_query": '{category} = "total"'}, "fontWeight": "bold"}])]
    metrics = data.compare_metrics(con, a, b)
    if metrics:
        out += [html.H3("Metrics"),
                _note("Green: B is better by the metric's own direction; red: worse; — : not measured."),
                _table("compare-metrics-table", metrics, columns=["metric", "a", "b", "change"], page_size=40,
                       style_data_conditional=[
                           {"if": {"filter_query": '{tone} = "better"'}, "backgroundColor": _GREEN},
                           {"if": {"filter_query": '{tone} = "worse"'}, "backgroundColor": _RED}],
                       style_cell_conditional=[{"if": {"column_id": c}, "textAlign": "right"}
                                               for c in ("a", "b", "change")])]
    s_cols, s_rows = res.get("serving", ([], []))
    if s_rows:  # request-level metrics of the serving analyzer, when either run was load-driven
        out.append(html.H3("Requests (serving metrics)"))
        out.append(_table("compare-serving-table", [dict(zip(s_cols, r)) for r in s_rows]))
    k_cols, k_rows = res["top_kernels"]
    kernels = [dict(zip(k_cols, r)) for r in k_rows]
    for k, short in zip(kernels, short_kernel_names([k["name"] for k in kernels])):
        k["kernel"] = short
    out.append(html.H3("Kernels that moved most, per class"))
    out.append(_table("compare-kernels-table", kernels,
                      columns=["category", "kernel", "a_kernels", "a_ms", "b_kernels", "b_ms", "delta_ms"],
                      tooltip_data=[{"kernel": {"value": k["name"], "type": "text"}} for k in kernels],
                      tooltip_duration=None, style_data_conditional=_delta_styles("delta_ms")) if k_rows else
               _note("The two runs share no kernel name (e.g. different vendors), so only categories compare.",
                     "compare-kernels-none"))
    return out


# ---------------------------------------------------------------------------------------------
# Portfolio

#: One colour per series of the portfolio plots (plotly's default sequence).
_SERIES_COLOURS = ("#636efa", "#ef553b", "#00cc96", "#ab63fa", "#ffa15a", "#19d3f3", "#ff6692", "#b6e880")


def _portfolio_figure(pf: Any, y: str, title: str, ylabel: str, band: float, ylog: bool = False) -> dict[str, Any]:
    """Per series: every point (markers) and its Pareto frontier (a line through the frontier's
    points); a dashed line at the band. ``customdata`` is the run id (a click opens the run)."""
    traces: list[dict[str, Any]] = []
    flag = "on_throughput_frontier" if y == "per_device" else "on_cost_frontier"
    for i, (name, pts) in enumerate(pf.series().items()):
        pts = [p for p in pts if p.per_user is not None and getattr(p, y) is not None]
        colour = _SERIES_COLOURS[i % len(_SERIES_COLOURS)]
        text = [f"run {p.run_id}<br>{p.sweep_param or 'load'} {fmt.value(p.sweep_value, '')}" for p in pts]
        traces.append({"type": "scatter", "mode": "markers", "name": f"{name} (points)", "legendgroup": name,
                       "x": [p.per_user for p in pts], "y": [getattr(p, y) for p in pts], "text": text,
                       "customdata": [p.run_id for p in pts], "marker": {"color": colour, "opacity": 0.45, "size": 8},
                       "showlegend": False, "hovertemplate": "%{text}<br>%{x:.1f} tok/s/user<br>%{y:.4g}<extra></extra>"})
        front = [p for p in pts if getattr(p, flag)]
        traces.append({"type": "scatter", "mode": "lines+markers", "name": name, "legendgroup": name,
                       "x": [p.per_user for p in front], "y": [getattr(p, y) for p in front],
                       "customdata": [p.run_id for p in front], "text": [f"run {p.run_id}" for p in front],
                       "line": {"color": colour, "width": 2}, "marker": {"color": colour, "size": 10},
                       "hovertemplate": "%{text}<br>%{x:.1f} tok/s/user<br>%{y:.4g}<extra>frontier</extra>"})
    layout: dict[str, Any] = {
        "xaxis": {"title": {"text": "output tokens/s per user (1000 ÷ TPOT p50)"}},
        "yaxis": {"title": {"text": ylabel}, **({"type": "log"} if ylog else {})},
        "shapes": [{"type": "line", "xref": "x", "yref": "paper", "x0": band, "x1": band, "y0": 0, "y1": 1,
                    "line": {"dash": "dash", "color": "#888"}}],
        "legend": {"orientation": "h", "y": -0.25},
    }
    return _figure(traces, title, 380, **layout)


def page_portfolio(con: duckdb.DuckDBPyConnection, params: dict[str, list[str]], price_sheet: Path | None) -> list[Any]:
    from tracekit.portfolio import DEFAULT_MIN_SPEED, PriceSheet, portfolio, read_price_sheet

    speed_text = _one(params, "speed", f"{DEFAULT_MIN_SPEED:g}")
    try:
        speed = float(speed_text)
    except ValueError:
        raise PageError(f"speed={speed_text!r}: expected a number (output tokens/s per user)") from None
    if not speed >= 0:
        raise PageError(f"speed={speed_text!r}: expected a number ≥ 0")
    prices = read_price_sheet(price_sheet) if price_sheet is not None else PriceSheet()
    sheet = _one(params, "sheet", prices.sheet)
    if sheet not in ("rented", "owned"):
        raise PageError(f"sheet={sheet!r}: expected rented or owned")
    if sheet != prices.sheet:
        prices = read_price_sheet(price_sheet, sheet) if price_sheet is not None else PriceSheet(sheet)  # type: ignore[arg-type]
    model = _one(params, "model") or None
    workload = _one(params, "workload") or None
    sweep = _one(params, "sweep") or None
    pf = portfolio(con=con, model=model, workload=workload, sweep=sweep, prices=prices, min_speed=speed)
    models = [m for (m,) in con.execute("SELECT DISTINCT model FROM portfolio_runs WHERE model IS NOT NULL "
                                        "ORDER BY model").fetchall()]
    controls = html.Div([
        html.Label("model "),
        dcc.Dropdown(id="portfolio-model", options=models, value=model, placeholder="every model",
                     style={"width": "18rem", "display": "inline-block"}),
        html.Label(" at least ", style={"marginLeft": "1rem"}),
        dcc.Input(id="portfolio-speed", type="number", value=speed, min=0, debounce=True, style={"width": "6rem"}),
        html.Label(" tokens/s per user · prices ", style={"marginLeft": ".3rem"}),
        dcc.Dropdown(id="portfolio-sheet", options=["rented", "owned"], value=sheet, clearable=False,
                     style={"width": "8rem", "display": "inline-block"}),
    ])
    out: list[Any] = [html.H2("Portfolio: which hardware serves it cheapest at a speed"), controls]
    if not pf.points:
        out.append(_note("No load-driven runs match: capture with --load (and --sweep for a curve); "
                         "see docs/portfolio.md.", "portfolio-empty"))
        return out
    out.append(html.P(pf.answer.sentence(), id="portfolio-answer", className="answer"))
    out.append(html.Div([
        html.Div(dcc.Graph(id="portfolio-throughput", config={"displayModeBar": False},
                           figure=_portfolio_figure(pf, "per_device", "Throughput per device vs speed per user",
                                                    "output tokens/s per device", speed)),
                 style={"width": "49%", "display": "inline-block"}),
        html.Div(dcc.Graph(id="portfolio-cost", config={"displayModeBar": False},
                           figure=_portfolio_figure(pf, "usd_per_1m", f"USD per 1M output tokens ({sheet} prices)",
                                                    "USD per 1M output tokens", speed, ylog=True)),
                 style={"width": "49%", "display": "inline-block"}),
    ]))
    rows = []
    for name, pts in pf.series().items():
        for p in pts:
            rows.append({
                "series": name, "run": f"[{p.run_id}](/run?run={p.run_id})",
                "point": (f"{p.sweep_param} {fmt.value(p.sweep_value, '')}" if p.sweep_param
                          else f"{p.load_profile or 'load'} (no sweep)"),
                "in/out tokens": (fmt.UNKNOWN if p.prompt_tokens_mean is None or p.output_tokens_mean is None
                                  else f"{p.prompt_tokens_mean:.0f}/{p.output_tokens_mean:.0f}"),
                "tok/s/user": fmt.value(p.per_user, ""), "tok/s/device": fmt.value(p.per_device, ""),
                "$/1M tokens": fmt.UNKNOWN if p.usd_per_1m is None else f"{p.usd_per_1m:.2f}",
                "frontier": "".join(x for x, on in (("T", p.on_throughput_frontier), ("C", p.on_cost_frontier))
                                    if on) or "-",
                "TTFT p95 ms": fmt.value(p.ttft_p95_ms, ""),
                "prefix hit": fmt.UNKNOWN if p.prefix_cache_hit_rate is None else f"{100 * p.prefix_cache_hit_rate:.0f}%",
                "MBU": fmt.UNKNOWN if p.mbu is None else f"{100 * p.mbu:.0f}%",
                "MFU": fmt.UNKNOWN if p.mfu is None else f"{100 * p.mfu:.0f}%",
                "limit": p.top_finding["title"] if p.top_finding else "",
                "excluded": p.excluded() or "",  # why it answers no speed band
            })
    cols = list(rows[0])
    out.append(html.H3("Points (T: on the throughput frontier, C: on the cost frontier)"))
    out.append(DataTable(
        id="portfolio-points", data=rows,
        columns=[{"name": c, "id": c, **({"presentation": "markdown"} if c == "run" else {})} for c in cols],
        style_cell={"fontFamily": "inherit", "fontSize": ".82rem", "textAlign": "left", "maxWidth": "420px",
                    "overflow": "hidden", "textOverflow": "ellipsis", "padding": "3px 6px"},
        style_header={"fontWeight": "bold", "background": "#f4f4f4"}, page_size=50,
        markdown_options={"link_target": "_self"}))
    return out


def _portfolio_click(throughput: dict[str, Any] | None, cost: dict[str, Any] | None) -> str:
    """A click on a point of either plot opens its run."""
    trigger = dash.callback_context.triggered_id
    click = throughput if trigger == "portfolio-throughput" else cost
    points = (click or {}).get("points") or []
    rid = points[0].get("customdata") if points else None
    if not rid or not _RUN_ID.match(str(rid)):
        raise dash.exceptions.PreventUpdate
    return f"/run?run={rid}"


# ---------------------------------------------------------------------------------------------
# Routing and the app


PAGES = {"/": "Runs", "/weekly": "Weekly review", "/run": "Run", "/compare": "Compare", "/portfolio": "Portfolio"}


#: The lakes this process reads, each attached once (:class:`tracekit.lake.readers.ReaderPool`).
LAKE_READERS = ReaderPool()


@contextlib.contextmanager
def _page_connection(store: str | Path) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-only connection for one page render. A store file is opened for the page and
    closed after it: while a reader holds a DuckDB file no other process can write it (an ingest
    waits, then the page says the store is busy). A lake has no such lock and costs 0.3–1.2 s to
    attach, so it is attached once and each page reads one snapshot through a reused cursor
    (:mod:`tracekit.lake.readers`)."""
    if is_lake(store):
        with LAKE_READERS.read(str(store)) as cur:
            yield cur
        return
    # one writer at a time: while an ingest holds the store, wait briefly, then say so
    con = connect(store, read_only=True, lock_timeout_s=_page_lock_wait_s())
    try:
        yield con
    finally:
        close(con)


def render_page(store: str | Path, pathname: str | None, search: str | None,
                price_sheet: Path | None = None) -> list[Any]:
    """The components of the page at ``pathname`` + ``search`` (what the router callback returns);
    ``price_sheet``: the portfolio's price sheet file."""
    path = pathname or "/"
    if path not in PAGES:
        return [html.Div(f"No page {path!r}: the pages are {', '.join(PAGES)}.", className="tk-error",
                         id="page-error")]
    try:
        params = urllib.parse.parse_qs((search or "").lstrip("?"), keep_blank_values=False, strict_parsing=False)
        with _page_connection(store) as con:
            if path == "/":
                return page_runs(con, params)
            if path == "/weekly":
                return page_weekly(con, params)
            if path == "/run":
                return page_run(con, params)
            if path == "/portfolio":
                from tracekit.analysis import library

                library.install(con)
                return page_portfolio(con, params, price_sheet)
            return page_compare(con, params, store)
    except StoreLockedError:
        return [html.Div(BUSY_MESSAGE, className="tk-error", id="page-busy")]
    except (PageError, TracekitError) as exc:
        return [html.Div(str(exc), className="tk-error", id="page-error")]


def _to_url(keys: tuple[str, ...]) -> Callable[..., str]:
    def update(*values: Any) -> str:
        *vals, current = values
        query = {k: v for k, v in zip(keys, vals) if v}
        new = "?" + urllib.parse.urlencode(query) if query else ""
        if new == (current or ""):
            raise dash.exceptions.PreventUpdate
        return new

    return update


def create_app(store: str | Path, price_sheet: Path | None = None) -> dash.Dash:
    """The dashboard over the store at ``store``: a file opened read-only for each page render, or
    a lake URL attached once and read one snapshot per page (:func:`_page_connection`).
    ``price_sheet``: the Portfolio page's price sheet file (default ``$TRACEKIT_PRICE_SHEET``;
    checked here, so a bad file fails at start-up)."""
    from tracekit.portfolio import PRICE_SHEET_ENV, read_price_sheet

    store_path = resolve_store(store)
    if price_sheet is None and os.environ.get(PRICE_SHEET_ENV):
        price_sheet = Path(os.environ[PRICE_SHEET_ENV])
    if price_sheet is not None:
        read_price_sheet(price_sheet)
    app = dash.Dash(__name__, title="tracekit", update_title="", suppress_callback_exceptions=True,
                    serve_locally=True)
    app.index_string = _index_string()
    app.layout = html.Div([
        dcc.Location(id="url", refresh="callback-nav"),
        html.Div([html.Span("tracekit", className="brand", style={"color": "#fff", "marginRight": "1.5rem"}),
                  dcc.Link("Runs", href="/", id="nav-runs"), dcc.Link("Weekly review", href="/weekly",
                                                                       id="nav-weekly"),
                  dcc.Link("Compare", href="/compare", id="nav-compare"),
                  dcc.Link("Portfolio", href="/portfolio", id="nav-portfolio")], id="nav"),
        dcc.Loading(html.Div(id="page"), delay_show=300),
    ])
    app.callback(Output("page", "children"), Input("url", "pathname"), Input("url", "search"))(
        lambda pathname, search: render_page(store_path, pathname, search, price_sheet))
    app.callback(Output("url", "search", allow_duplicate=True), Input("runs-search", "value"),
                 Input("runs-table", "sort_by"), Input("runs-table", "selected_rows"),
                 Input("runs-table", "page_current"), State("runs-table", "data"),
                 State("url", "search"), prevent_initial_call=True)(runs_url)
    app.callback(Output("url", "search", allow_duplicate=True), Input("weekly-workload", "value"),
                 Input("weekly-week", "value"), State("url", "search"), prevent_initial_call=True)(
        _weekly_url)
    app.callback(Output("url", "search", allow_duplicate=True), Input("compare-a", "value"),
                 Input("compare-b", "value"), State("url", "search"), prevent_initial_call=True)(
        _to_url(("a", "b")))
    app.callback(Output("url", "search", allow_duplicate=True), Input("portfolio-model", "value"),
                 Input("portfolio-speed", "value"), Input("portfolio-sheet", "value"), State("url", "search"),
                 prevent_initial_call=True)(_portfolio_url)
    app.callback(Output("url", "href", allow_duplicate=True), Input("portfolio-throughput", "clickData"),
                 Input("portfolio-cost", "clickData"), prevent_initial_call=True)(_portfolio_click)

    def perfetto(run_id: str) -> Response:
        from tracekit.present.perfetto import write_chrome_trace

        if not _RUN_ID.match(run_id):
            abort(404)
        fd, tmp = tempfile.mkstemp(prefix="tracekit-perfetto-", suffix=".json")
        os.close(fd)
        try:
            with open_store(store_path, read_only=True) as con:  # into our own empty temp file
                write_chrome_trace(con, run_id, functools.partial(open, tmp, "w", encoding="utf-8"),
                                   store_path=store_path)
            fh = open(tmp, "rb")  # noqa: SIM115 - handed to the response, closed by it
        except TracekitError:
            abort(404)
        finally:
            os.unlink(tmp)  # the open handle keeps the data until the response is sent
        return send_file(fh, mimetype="application/json", as_attachment=True,
                         download_name=f"tracekit-{run_id}.perfetto.json")

    app.server.add_url_rule("/download/perfetto/<run_id>.json", "perfetto", perfetto)
    app.server.add_url_rule("/xprof/<run_id>", "xprof", _xprof_route(store_path))
    return app


def _xprof_route(store_path: str | Path) -> Callable[[str], Any]:
    """``/xprof/<run_id>``: start XProf on the run's profile directory (once per run, bound to
    127.0.0.1, stopped when the dashboard exits) and redirect to it; 503 with the install line
    when the ``xprof`` package is absent, 404 for a run that is not an XPlane run."""
    import atexit
    import threading

    from flask import redirect

    from tracekit.xprof import INSTALL, XProfServer, has_xprof, start_xprof

    servers: dict[str, XProfServer] = {}
    lock = threading.Lock()

    def stop_all() -> None:
        for server in servers.values():
            server.stop()

    atexit.register(stop_all)

    def xprof(run_id: str) -> Any:
        if not _RUN_ID.match(run_id):
            abort(404)
        if not has_xprof():
            return Response(f"XProf is not installed here: {INSTALL}, then restart the dashboard\n", status=503,
                            mimetype="text/plain")
        with lock:
            server = servers.get(run_id)
            if server is None or server.process.poll() is not None:
                try:
                    server = servers[run_id] = start_xprof(run_id, store_path)
                except TracekitError as exc:
                    return Response(f"{exc}\n", status=404, mimetype="text/plain")
        return redirect(server.url)

    return xprof


def _weekly_url(workload: str | None, week: str | None, current: str | None) -> str:
    # a new workload starts at its latest week
    params = urllib.parse.parse_qs((current or "").lstrip("?"))
    if workload and params.get("workload", [None])[0] not in (None, workload):
        week = None
    return _to_url(("workload", "week"))(workload, week, current)


def _portfolio_url(model: str | None, speed: float | None, sheet: str | None, current: str | None) -> str:
    # the sweep and workload filters (set in the URL) are kept
    params = urllib.parse.parse_qs((current or "").lstrip("?"))
    keep = {k: params[k][0] for k in ("workload", "sweep") if params.get(k)}
    query = {**keep, **{k: v for k, v in (("model", model), ("speed", None if speed is None else f"{speed:g}"),
                                           ("sheet", sheet)) if v}}
    new = "?" + urllib.parse.urlencode(query) if query else ""
    if new == (current or ""):
        raise dash.exceptions.PreventUpdate
    return new
