"""A :class:`~tracekit.report_data.Report` as one self-contained HTML page (``tracekit report
run.html``): the headline KPI cards, the findings (detail folded), the top kernels, device time by
kernel class (chart and table), request latency, the roofline, the run's details and every metric.
Plotly's JavaScript is inlined once, with the first chart."""

from __future__ import annotations

import html

from tracekit import formatting as fmt
from tracekit.present.figures import class_figure, roofline_figure
from tracekit.report_data import Report, Table

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


#: Plotly's mode bar only on hover, so it never covers a chart's title.
_PLOT_CONFIG = {"displaylogo": False, "displayModeBar": "hover"}


def to_html(rep: Report) -> str:
    """The report as one self-contained HTML page (Plotly inlined with the first chart)."""
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

