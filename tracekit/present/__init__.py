"""Presentation: turning what the read layer returns into something people read. Each module
renders into text, a Plotly figure or a stream it is handed, and opens no file itself:

* :mod:`~tracekit.present.figures`: the report's Plotly figures (device time by class, roofline);
* :mod:`~tracekit.present.report_html` / :mod:`~tracekit.present.report_markdown`: a
  :class:`tracekit.report_data.Report` as a self-contained HTML page / Markdown;
* :mod:`~tracekit.present.perfetto`: one run as a Chrome-trace JSON document.

What may import what: ``present`` imports the read layer (:mod:`tracekit.report_data`,
:mod:`tracekit.store`'s read functions), :mod:`tracekit.formatting` and :mod:`tracekit.names`,
never the CLI, the dashboard, :mod:`tracekit.api` or :mod:`tracekit.exports` (the functions that
write files, which import ``present``).
"""
