"""``tracekit report``'s names, importable from here as before issue 18 split them by what they do.

New code imports them from their homes: the file :func:`render_report` writes —
:mod:`tracekit.exports`; the data (:func:`collect`, :class:`Report`, :class:`Table`,
:class:`RooflinePoint`, :func:`roofline_points`, :func:`request_latency_table`) —
:mod:`tracekit.report_data`; the rendering (:func:`to_html`, :func:`to_markdown`,
:func:`class_figure`, :func:`roofline_figure`) — :mod:`tracekit.present`.
"""

from __future__ import annotations

from tracekit.exports import SUFFIXES, render_report
from tracekit.present.figures import class_figure, roofline_figure
from tracekit.present.report_html import to_html
from tracekit.present.report_markdown import to_markdown
from tracekit.report_data import (
    BYTES_SQL,
    TIME_SQL,
    TOP_N,
    Report,
    RooflinePoint,
    Table,
    collect,
    request_latency_table,
    roofline_points,
)

__all__ = [
    "BYTES_SQL", "SUFFIXES", "TIME_SQL", "TOP_N", "Report", "RooflinePoint", "Table", "class_figure", "collect",
    "render_report", "request_latency_table", "roofline_figure", "roofline_points", "to_html", "to_markdown",
]
