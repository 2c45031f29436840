"""Text the CLI prints for people: plain aligned tables (logs, pipes, files) and the one-screen
run summary. Numbers go through :mod:`tracekit.formatting`, kernel names through
:mod:`tracekit.names`; machine formats (``--format csv|json``) never come here."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

from tracekit import formatting as fmt
from tracekit.analysis.overview import Overview
from tracekit.names import short_kernel_names

#: Width of the summary, columns.
SUMMARY_WIDTH = 80


def text_table(columns: Sequence[str], rows: Sequence[Sequence[str]], *, right: set[str] | frozenset[str] = frozenset(),
               title: str | None = None, indent: str = "") -> str:
    """Rows of already formatted cells as aligned plain text, two spaces between columns, a rule
    under the header; nothing is wrapped or cut (a log keeps every character)."""
    widths = [max([len(c), *(len(r[i]) for r in rows)]) for i, c in enumerate(columns)]

    def line(cells: Sequence[str]) -> str:
        return indent + "  ".join(
            v.rjust(w) if c in right else v.ljust(w) for c, v, w in zip(columns, cells, widths)).rstrip()

    text = ([title] if title else []) + [line(columns), line(["-" * w for w in widths]), *(line(r) for r in rows)]
    return "\n".join(text) + "\n"


def cell(v: Any) -> str:
    """A query result value as a table cell: floats to six significant digits (no trailing
    zeros), integers whole, NULL as ``—``."""
    if v is None:
        return fmt.UNKNOWN
    if isinstance(v, float):
        return fmt.significant(v, 6, trim=True)
    if isinstance(v, (dict, list, tuple)):
        import json

        return json.dumps(v, default=str)
    return str(v)


def summary_text(ov: Overview, *, full_names: bool = False) -> str:
    """The one-screen overview: at most 40 lines of at most :data:`SUMMARY_WIDTH` columns (with
    ``full_names`` the kernel names are whole and may run longer)."""
    w = SUMMARY_WIDTH
    out: list[str] = []
    what = " · ".join(x for x in (ov.workload, ov.label) if x)
    out.append(_fit(f"run {ov.run_id}" + (f"  {what}" if what else ""), w))
    device = ov.device_text
    out.append(_fit(f"{ov.format} · {device} · {ov.ranks} rank{'s' if ov.ranks != 1 else ''}", w))
    when = f"captured {fmt.value(ov.captured_at)} UTC" if ov.captured_at else "capture time not recorded"
    out.append(_fit(f"{when} · span {fmt.duration_ns(ov.span_ns)} · kernel time "
                    f"{fmt.duration_ns(ov.kernel_time_ns)}", w))
    out.append("")
    if ov.kpis:
        lw = max(len(k.label) for k in ov.kpis)
        for k in ov.kpis:
            notes = [f"covers {fmt.percent(k.coverage)} of its phase's kernel time"] if k.coverage is not None else []
            notes += [k.note] if k.note else []
            head = f"  {k.label.ljust(lw)}  {fmt.value(k.value, k.unit)}"
            out += textwrap.wrap(head + (f"  ({'; '.join(notes)})" if notes else ""), w,
                                 subsequent_indent=" " * (lw + 4), max_lines=2, placeholder=" …)")
    elif not ov.analyzed:
        out.append("  no metrics: run `tracekit analyze` on this run")
    if ov.classes:
        out.append("")
        shown = [f"{c} {fmt.percent(s)}" for c, _, s in ov.classes if s >= 0.005][:6]
        out += textwrap.wrap("kernel time by class: " + ", ".join(shown), w, subsequent_indent="  ")
    if ov.kernels:
        out.append("")
        rows = [("", k.kernel_class, fmt.count(k.calls), fmt.duration_ns(k.time_ns), fmt.percent(k.share))
                for k in ov.kernels]
        # the name gets what the other columns leave of the 80 (whole with --full-names)
        rest = sum(max(len(h), *(len(r[i]) for r in rows)) + 2 for i, h in enumerate(
            ["", "class", "calls", "time", "share"]) if i)
        width = max(24, w - rest)
        names = [k.name for k in ov.kernels] if full_names else short_kernel_names(
            [k.name for k in ov.kernels], width)
        rows = [(n, *r[1:]) for n, r in zip(names, rows)]
        out += text_table(["top kernels", "class", "calls", "time", "share"], rows,
                          right={"calls", "time", "share"}).rstrip("\n").split("\n")
    out.append("")
    total = sum(ov.n_findings.values())
    if total:
        counts = ", ".join(f"{ov.n_findings[s]} {s}" for s in ("critical", "warning", "info") if ov.n_findings.get(s))
        out.append(f"findings: {counts}" + (f" (top {len(ov.findings)})" if total > len(ov.findings) else ""))
        for f in ov.findings:
            head = f"  [{f['severity']}] {f['analyzer']}: "
            body = f["title"]
            saving = _saving(f.get("saving_ns"), f.get("saving_fraction"))
            lines = textwrap.wrap(head + body, w, subsequent_indent=" " * 4, max_lines=2, placeholder=" …")
            out += lines + ([f"    {saving}"] if saving else [])
    else:
        out.append("findings: none" if ov.analyzed else "findings: not analyzed yet")
    out.append(_fit(f"details: tracekit report {ov.run_id} -o report.html", w))
    return "\n".join(out[:40]) + "\n"


def _saving(ns: Any, frac: Any) -> str:
    return f"a fix would save ≈ {fmt.saving(ns, frac)}" if ns is not None else ""


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
