"""Running the analyzers over stored runs and reading their verdict: :func:`analyze_runs` (every
registered analyzer, results stored), :func:`ensure_analyzed` (analyze a run that never was) and
:func:`run_summary` (the one-screen overview, after analyzing if needed). These write findings
and metrics; nothing else about a run changes."""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracekit.lake.url import is_lake, parse_lake_url
from tracekit.store import StoreLocation, match_run_id, open_store, resolve_run_id, resolve_store

if TYPE_CHECKING:
    from tracekit.analysis.overview import Overview


def ensure_analyzed(run_id: str, store: str | Path | None = None) -> tuple[str, bool]:
    """(the full run id of ``run_id`` — a unique prefix is enough —, whether it was analyzed now):
    a run with neither stored findings nor metrics is analyzed first (every registered analyzer,
    results stored), so the report and the summary always carry the analyzers' verdict."""
    path = resolve_store(store)
    with open_store(path, read_only=True) as con:
        run_id = resolve_run_id(con, run_id, path)
        stored = con.execute("SELECT (SELECT count(*) FROM findings WHERE run_id = $1) + "
                             "(SELECT count(*) FROM metrics WHERE run_id = $1)", [run_id]).fetchall()[0][0]
    if stored:
        return run_id, False
    analyze_runs([run_id], path)
    return run_id, True


def run_summary(run_id: str, store: str | Path | None = None, *, top: int = 5, findings: int = 3,
                width: int = 44) -> Overview:
    """The one-screen overview of a run (:func:`tracekit.analysis.overview.run_overview`): device,
    headline KPIs with coverage, time by kernel class, top kernels, top findings. ``run_id`` may be
    a unique prefix. A run never analyzed is analyzed first (its findings stored), as the report
    does, so the overview always carries the analyzers' verdict."""
    from tracekit.analysis import library
    from tracekit.analysis.overview import run_overview

    path = resolve_store(store)
    run_id, _ = ensure_analyzed(run_id, path)
    with open_store(path, read_only=True) as con:
        library.install(con)
        return run_overview(con, run_id, top=top, findings=findings, width=width)


def analyze_runs(
    run_ids: list[str], store: str | Path | None = None, *, only_new: bool = False
) -> list[dict[str, Any]]:
    """Run every registered analyzer on the runs (all runs without findings when ``only_new``
    and no ids are given), store the results, and return them as plain dicts."""
    from tracekit.analysis.base import run_analyzers, store_results

    path = resolve_store(store)
    with open_store(path) as con:
        known = {r[0] for r in con.execute("SELECT run_id FROM runs").fetchall()}
        if not run_ids:
            done = {r[0] for r in con.execute("SELECT DISTINCT run_id FROM metric_rows").fetchall()}
            run_ids = sorted(known - done) if only_new else sorted(known)
        run_ids = list(dict.fromkeys(match_run_id(known, rid, path) for rid in run_ids))
        out = []
        # The writer connection runs DuckDB on one thread (cheap ingest, see store.connect); the
        # analyzers' sorts and joins over 1M-row runs use every core (benchmarks/bench_analyze.py),
        # still on this connection, so writes stay serialized by the store lock.
        threads = int(con.execute("SELECT current_setting('threads')").fetchall()[0][0])
        con.execute(f"SET threads = {max(1, os.cpu_count() or 1)}")
        try:
            lock = _analysis_lock(con, path)
            for rid in run_ids:
                with lock(rid):
                    results = run_analyzers(con, rid)
                    if is_lake(path):  # a busy catalog or a concurrent commit: the write again
                        from tracekit.lake.retry import with_retries

                        with_retries(lambda: store_results(con, rid, results))  # noqa: B023 (called at once)
                    else:
                        store_results(con, rid, results)
                out.append({
                    "run_id": rid,
                    "findings": [{"analyzer": name, **f.__dict__} for name, r in results.items() for f in r.findings],
                    "metrics": [{"analyzer": name, **m.__dict__} for name, r in results.items() for m in r.metrics],
                })
        finally:
            con.execute(f"SET threads = {threads}")
    return out


def analyze_open(con: Any, run_ids: list[str]) -> None:
    """Run every registered analyzer on ``run_ids`` on an open writer connection and write their
    findings and metrics inside its transaction (``tracekit ingest --analyze``: the runs and their
    verdict commit together; with ``--jobs`` each worker analyzes the runs it staged). DuckDB uses
    the connection's own thread setting."""
    from tracekit.analysis.base import run_analyzers, write_results

    for rid in run_ids:
        write_results(con, rid, run_analyzers(con, rid))


def _analysis_lock(con: Any, path: StoreLocation) -> Callable[[str], AbstractContextManager[None]]:
    """What a run's analysis holds while it runs: on a lake, the run's analysis claim in the catalog
    (:data:`tracekit.lake.claims.ANALYSIS_PREFIX`: concurrent analyzers of one run take turns, so
    its rows are stored once); a store file has one writer already (its lock)."""
    if not is_lake(path):
        return lambda _run_id: nullcontext()
    from tracekit.lake.claims import ANALYSIS_PREFIX, claims_for, held_while, stale_after_s, writer_id

    claims = claims_for(con, parse_lake_url(str(path)))
    claims.create()
    writer, stale_s = writer_id(), stale_after_s()
    return lambda run_id: held_while(claims, ANALYSIS_PREFIX + run_id, writer, stale_s)
