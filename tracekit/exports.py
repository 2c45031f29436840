"""The commands that write one run to a file: :func:`render_report` (``tracekit report``: HTML or
Markdown) and :func:`export_perfetto` (``tracekit export``: Chrome-trace JSON).

Each checks the output path before any work (a refused path leaves the store untouched), reads
the run through the read layer, renders it with :mod:`tracekit.present`, and writes the file
atomically through :mod:`tracekit.outputs`: never onto a store, a directory or a device, and onto
an existing file only with ``force``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracekit.errors import TraceInputError
from tracekit.store import open_store, resolve_store

#: Report file suffix → format.
SUFFIXES = {".html": "html", ".htm": "html", ".md": "markdown"}


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
    store_path = resolve_store(store)
    check_output(out, store=store_path, force=force, make_parents=True)
    kind = SUFFIXES.get(out.suffix.lower())
    if kind is None:
        raise TraceInputError(out, "report must end in .html, .htm or .md")
    from tracekit.present.report_html import to_html
    from tracekit.present.report_markdown import to_markdown
    from tracekit.report_data import collect
    from tracekit.run_analysis import ensure_analyzed

    run_id, analyzed_now = ensure_analyzed(run_id, store_path)
    with open_store(store_path, read_only=True) as con:
        rep = collect(con, run_id, analyzed_now=analyzed_now)
    text = to_html(rep) if kind == "html" else to_markdown(rep)
    write_output(out, text, store=store_path, force=force, make_parents=True)
    return out


def export_perfetto(run_id: str, path: str | Path, store: str | Path | None = None, *,
                    force: bool = False) -> dict[str, Any]:
    """Write one run as a Chrome-trace JSON file (opens in ui.perfetto.dev and chrome://tracing):
    :func:`tracekit.present.perfetto.write_chrome_trace` (what the file holds) streamed to a
    temporary file, then renamed onto ``path`` (:func:`tracekit.outputs.open_output`).

    Returns the counts written: events per kind, flows, findings, processes, threads.
    """
    from tracekit.outputs import check_output, open_output
    from tracekit.present.perfetto import write_chrome_trace

    store_path = resolve_store(store)
    out_path = Path(path)
    check_output(out_path, store=store_path, force=force)  # before any work: a refused path fails fast
    with open_store(store_path, read_only=True) as con:
        return write_chrome_trace(con, run_id, lambda: open_output(out_path, store=store_path, force=force),
                                  store_path=store_path)
