"""tracekit's Python API: the functions the CLI and the dashboard call, for scripts and notebooks
too. A thin facade: each function lives in a module named for what it holds, and is re-exported
here so one import reaches them all.

Reads (the store opened read-only):
    :func:`list_runs`, :func:`run_query`, :func:`top_activity` (:mod:`tracekit.queries`);
    :func:`compare_runs` (:mod:`tracekit.compare`); :func:`portfolio` (which hardware serves a
    model cheapest at a speed, :mod:`tracekit.portfolio`) with :func:`price_sheet` / :func:`read_price_sheet`.
Analysis (stores findings and metrics):
    :func:`analyze_runs`, :func:`analyze_open`, :func:`ensure_analyzed`, :func:`run_summary`
    (:mod:`tracekit.run_analysis`).
Writes of a run's metadata, each in one transaction:
    :func:`update_runs`, :func:`delete_runs`, :func:`attach_model`, :func:`store_token_lengths`
    (:mod:`tracekit.run_edits`); :func:`store_requests` (a load's request records,
    :mod:`tracekit.request_rows`).
A team lake (:mod:`tracekit.lake`, ``docs/team-store.md``):
    :func:`init_lake`, :func:`compact_lake`; every function here also takes a ``lake:`` URL as
    its ``store``.
Export (one run to a file, written atomically):
    :func:`export_perfetto` (Chrome-trace JSON) and :func:`render_report` (HTML/Markdown)
    (:mod:`tracekit.exports`, rendered by :mod:`tracekit.present`).

Runs are named by id or unique prefix; ``store`` defaults to
:func:`tracekit.store.default_store_path`.
"""

from __future__ import annotations

from tracekit.compare import COMPARE_TOP_KERNELS, compare_runs
from tracekit.exports import export_perfetto, render_report
from tracekit.lake.export import export_parquet
from tracekit.lake.maintenance import CompactResult, compact_lake, init_lake
from tracekit.portfolio import portfolio, price_sheet, read_price_sheet
from tracekit.queries import RUNS_SQL, Rows, list_runs, run_query, top_activity
from tracekit.request_rows import store_requests
from tracekit.run_analysis import analyze_open, analyze_runs, ensure_analyzed, run_summary
from tracekit.run_edits import attach_model, delete_runs, store_token_lengths, update_runs

__all__ = [
    "COMPARE_TOP_KERNELS", "RUNS_SQL", "CompactResult", "Rows", "analyze_open", "analyze_runs", "attach_model", "compact_lake",
    "compare_runs", "delete_runs", "ensure_analyzed", "export_parquet", "export_perfetto", "init_lake", "list_runs",
    "portfolio", "price_sheet", "read_price_sheet", "render_report", "run_query", "run_summary",
    "store_requests", "store_token_lengths", "top_activity", "update_runs",
]
