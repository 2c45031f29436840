"""Ingest into a lake store: claim each run id, stage the run in a private store file, publish it.

For each PATH (inputs are all resolved and checked first, as for a store file):

1. its run id (the content hash) is claimed in the catalog (:mod:`tracekit.lake.claims`); a run
   already committed is not read again (a different ``--label``/``--workload``/``--tag`` updates
   it), and a run another writer is storing now is waited for;
2. the run is ingested by :func:`tracekit.ingest.ingest` into a private store file in
   ``TRACEKIT_TMPDIR`` — the same parsers, checks and rows as any store;
3. its rows are copied into the lake in one DuckLake transaction (:mod:`tracekit.lake.publish`),
   and the claim is marked committed. A failure drops the claim and leaves the lake as it was for
   that run; runs committed before it stay (one transaction per run, not per command).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tracekit.ingest import IngestResult, RunInput, ingest, resolve_input
from tracekit.ingest_jobs import relabel_held, stage_runs
from tracekit.lake import publish
from tracekit.lake.claims import Claims, claims_for, stale_after_s, wait_for, writer_id
from tracekit.lake.url import parse_lake_url
from tracekit.limits import temp_dir
from tracekit.store import close, connect

__all__ = ["claim_and_publish", "ingest_into_lake"]


def ingest_into_lake(
    paths: Sequence[str | Path],
    lake: str,
    *,
    format_name: str | None = None,
    label: str | None = None,
    workload: str | None = None,
    tags: Mapping[str, str] | None = None,
    jobs: int = 1,
    **options: Any,
) -> list[IngestResult]:
    """Ingest each PATH as one run into the lake ``lake`` (a ``lake:`` URL); see the module
    docstring. ``options`` are :func:`tracekit.ingest.ingest`'s other keywords (``progress``,
    ``python_events``, ``captured_at``, ``one_run``, ``before_commit``, …), applied to each run's
    staged ingest. Returns one :class:`IngestResult` per PATH, ``created`` False for a run the
    lake held already."""
    url = parse_lake_url(lake)
    stale_s = stale_after_s()
    items = [resolve_input(p, format_name) for p in paths]  # every input checked before the lake
    writer = writer_id()
    con = connect(lake)
    try:
        claims = claims_for(con, url)
        claims.create()
        done: dict[str, IngestResult] = {}
        results: list[IngestResult] = []
        options = dict(options, format_name=format_name, label=label, workload=workload, tags=tags)
        with tempfile.TemporaryDirectory(prefix="tracekit-stage-", dir=temp_dir()) as stage_dir:
            staged: dict[str, tuple[IngestResult, Path]] = {}
            if jobs > 1 and len(items) > 1:  # parse every run in parallel first, then claim and publish
                staged = {r.run_id: (r, p) for r, p in stage_runs(items, Path(stage_dir), jobs, options)}
            for item in items:
                if item.run_id not in done:
                    done[item.run_id] = claim_and_publish(con, claims, item, writer, stale_s, Path(stage_dir),
                                                 staged.get(item.run_id), options)
                results.append(done[item.run_id])
        return results
    finally:
        close(con)


def claim_and_publish(con: Any, claims: Claims, item: RunInput, writer: str, stale_s: float, stage_dir: Path,
                      prestaged: tuple[IngestResult, Path] | None, options: dict[str, Any]) -> IngestResult:
    """Claim, stage (unless a worker ``prestaged`` it: ingest --jobs) and publish one run."""
    if wait_for(claims, item.run_id, writer, stale_s) == "committed":
        return _existing(con, item, options)
    committed = False
    try:
        if prestaged is not None:
            result, staged = prestaged
        else:
            staged = stage_dir / f"{item.run_id}.duckdb"
            [result] = ingest([item.source], staged, **options)
        publish.attach_stage(con, staged)
        try:
            publish.publish_run(con, result.run_id)
        finally:
            con.execute(f"DETACH {publish.STAGE}")
        committed = True
        return result
    finally:
        claims.finish(item.run_id, writer, committed)


def _existing(con: Any, item: RunInput, options: dict[str, Any]) -> IngestResult:
    """The result for a run the lake holds: its labels updated as a re-ingest into a file does."""
    row = con.execute("SELECT vendor, n_files FROM run_meta WHERE run_id = ?", [item.run_id]).fetchone()
    con.execute("BEGIN")
    try:
        updated = relabel_held(con, item.run_id, options)
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    on_stored: Callable[..., Any] | None = options.get("before_commit")
    result = IngestResult(run_id=item.run_id, source=str(item.source), format=item.format, created=False,
                          vendor=row[0] if row else "", n_files=int(row[1]) if row else len(item.files),
                          updated=updated)
    if on_stored is not None:
        on_stored(con, [result])
    return result
