"""A :class:`~tracekit.report_data.Report` as Markdown (``tracekit report run.md``): the same
tables as the HTML page, without charts."""

from __future__ import annotations

from typing import Any

from tracekit import formatting as fmt
from tracekit.report_data import Report, Table


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
    """The report as Markdown: the HTML page's tables, the roofline only named."""
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
