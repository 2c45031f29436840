"""``tracekit ingest --jobs N``: parse runs in N processes at once, then store them as one.

Parsing is CPU-bound Python and C in one process per run; a store has one writer. So the runs are
**staged** in parallel — each worker process (a *spawn* pool: no state inherited from the parent,
0.3 s to start) ingests one run into its own private store file in ``TRACEKIT_TMPDIR`` with the
ordinary :func:`tracekit.ingest.ingest` — and the parent then copies every staged run into the
store: a store file in ONE transaction for the whole command, as without ``--jobs`` (all runs or
none); a lake one run per transaction with its claim (:mod:`tracekit.ingest_lake`). The rows are
those of a sequential ingest (same parsers, same checks); only the work is spread. Each worker
has the memory budget of one ingest (``TRACEKIT_MEMORY_LIMIT``), so N jobs may use N times it.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any

from tracekit import errors
from tracekit.errors import PathError
from tracekit.ingest import IngestResult, RunInput, ingest
from tracekit.lake.publish import STAGE
from tracekit.sql_text import quote
from tracekit.store import RUN_TABLES, update_run_meta

__all__ = ["MAX_JOBS", "WORKER_OPTIONS", "copy_staged", "default_jobs", "ingest_in_parallel", "raise_worker_error",
           "relabel_held", "stage_runs"]

#: At most this many worker processes (more only adds start-up and memory).
MAX_JOBS = 64

#: ingest() options a worker can take (callbacks and a read-ahead stay in the parent; ``analyze`` is
#: a module-level function, shipped by reference).
WORKER_OPTIONS = ("format_name", "label", "workload", "tags", "python_events", "captured_at", "one_run", "analyze")


def _stage_chunk(sources: list[str], staged: str, options: dict[str, Any]) -> tuple[bool, Any]:
    """In a worker: ingest ``sources`` (one run each) into the new store file ``staged``; (True,
    their results) or (False, (error class name, path, reason)) for a user's mistake (exceptions
    with a two-argument constructor do not survive pickling as themselves)."""
    try:
        return True, ingest(sources, staged, **options)
    except PathError as exc:
        return False, (type(exc).__name__, exc.path, exc.reason)


def raise_worker_error(error: tuple[str, str, str]) -> None:
    """Raise in this process the input error a worker returned as (class name, path, reason)."""
    name, path, reason = error
    cls = getattr(errors, name, PathError)
    raise (cls if isinstance(cls, type) and issubclass(cls, PathError) else PathError)(path, reason)


def _chunks(items: Sequence[RunInput], jobs: int) -> list[list[RunInput]]:
    """The runs split into at most ``jobs`` lists of about equal input bytes, each in input order."""
    n = max(1, min(jobs, len(items)))
    return [c for c in _split(items, [sum(it.input_bytes for it in items) / n] * n) if c]


def _split(items: Sequence[RunInput], targets: Sequence[float]) -> list[list[RunInput]]:
    """The runs split into ``len(targets)`` lists of about ``targets`` input bytes: largest runs
    first, each to the list furthest below its target; each list in input order."""
    order = {id(item): i for i, item in enumerate(items)}
    lists: list[list[RunInput]] = [[] for _ in targets]
    load = [0.0] * len(targets)
    for item in sorted(items, key=lambda it: -it.input_bytes):
        k = max(range(len(targets)), key=lambda j: targets[j] - load[j])
        lists[k].append(item)
        load[k] += item.input_bytes
    return [sorted(c, key=lambda it: order[id(it)]) for c in lists]


#: Estimated seconds per run and per input MB on the 2-vCPU machine of docs/performance.md (54
#: corpus runs of at most 20 MB, one run at a time): ingest 0.104 s/MB + 0.03 s a run; the
#: analyzers 0.51 s a run + 0.011 s/MB (their SQL is mostly a fixed cost per run).
INGEST_S_PER_MB, INGEST_S_PER_RUN = 0.104, 0.03
ANALYZE_S_PER_MB, ANALYZE_S_PER_RUN = 0.011, 0.51
#: A worker finishes this much later than its estimated work: spawn and imports (0.35 s), its
#: stage file's schema (0.33 s), the stage's commit; measured as the gap between this process
#: and the worker finishing equal estimated shares of 41 corpus runs.
STAGE_OVERHEAD_S = 0.9
#: ... and this much more with ``--analyze`` (the analyzers' imports and SQL library in a new
#: process, the commit of its findings): the gap was 1.5–1.8 s more on 54 corpus runs.
ANALYZE_OVERHEAD_S = 1.1
#: Copying a staged run into the store costs this process this share of ingesting it (0.6 s for the
#: rows of 26 MB of input that took 2.7 s to ingest).
COPY_COST = 0.22


def _cost(item: RunInput, analyze: bool) -> tuple[float, float]:
    """(estimated seconds to ingest ``item``, and to ingest and analyze it)."""
    mb = item.input_bytes / 1e6
    ingest_s = INGEST_S_PER_RUN + INGEST_S_PER_MB * mb
    return ingest_s, ingest_s + (ANALYZE_S_PER_RUN + ANALYZE_S_PER_MB * mb if analyze else 0.0)


def _shares(items: Sequence[RunInput], jobs: int, analyze: bool = False
            ) -> tuple[list[RunInput], list[list[RunInput]]]:
    """The runs split between this process and ``jobs - 1`` workers so that all finish together
    (longest-processing-time first): each run, costliest first, goes to the process that would
    finish it earliest, where a worker starts :data:`STAGE_OVERHEAD_S` late (and
    :data:`ANALYZE_OVERHEAD_S` more with ``analyze``) and a run it stages
    costs this process :data:`COPY_COST` of its ingest again (the copy). Costs are estimated from
    input bytes and a fixed cost per run (:func:`_cost`; with ``analyze`` the analyzers' large
    fixed cost per run dominates, so equal bytes would not be equal work). Every worker gets at
    least one run while there are runs for it; each list is in input order."""
    n = max(1, min(jobs, len(items)))
    order = {id(item): i for i, item in enumerate(items)}
    finish = [0.0] + [STAGE_OVERHEAD_S + (ANALYZE_OVERHEAD_S if analyze else 0.0)] * (n - 1)
    lists: list[list[RunInput]] = [[] for _ in range(n)]
    for item in sorted(items, key=lambda it: -_cost(it, analyze)[1]):
        ingest_s, total_s = _cost(item, analyze)
        k = min(range(n), key=lambda j: finish[j] + total_s + (COPY_COST * ingest_s if j else 0.0))
        lists[k].append(item)
        finish[k] += total_s
        if k:
            finish[0] += COPY_COST * ingest_s
    for k in range(1, n):  # a worker left without a run takes the cheapest run of the fullest share
        if not lists[k]:
            donor = max((j for j in range(n) if len(lists[j]) > 1), key=lambda j: len(lists[j]))
            cheapest = min(lists[donor], key=lambda it: _cost(it, analyze)[1])
            lists[donor].remove(cheapest)
            lists[k].append(cheapest)
    mine, *others = [sorted(c, key=lambda it: order[id(it)]) for c in lists]
    return mine, [c for c in others if c]


def _submit(pool: ProcessPoolExecutor, chunks: list[list[RunInput]], stage_dir: Path,
            options: dict[str, Any]) -> list[tuple[Future[tuple[bool, Any]], Path]]:
    worker_options = {k: v for k, v in options.items() if k in WORKER_OPTIONS}
    if worker_options.get("analyze") is not None:  # one thread a process: every core is busy
        worker_options["analyze_threads"] = 1
    staged = [stage_dir / f"stage{i}.duckdb" for i in range(len(chunks))]
    return [(pool.submit(_stage_chunk, [str(it.source) for it in chunk], str(path), worker_options), path)
            for chunk, path in zip(chunks, staged)]


def _collect(futures: list[tuple[Future[tuple[bool, Any]], Path]]) -> dict[str, tuple[IngestResult, Path]]:
    """Each staged run by run id: (its result, its staged file); the first input error raised."""
    where: dict[str, tuple[IngestResult, Path]] = {}
    for future, path in futures:
        ok, value = future.result()
        if not ok:
            raise_worker_error(value)
        where.update({r.run_id: (r, path) for r in value})
    return where


def stage_runs(items: Sequence[RunInput], stage_dir: Path, jobs: int,
               options: dict[str, Any]) -> list[tuple[IngestResult, Path]]:
    """Ingest the distinct runs of ``items`` with ``jobs`` worker processes, each into one store
    file of its own under ``stage_dir`` (its runs balanced by input bytes); (result, staged file)
    per distinct run, in input order. An input error is raised once every worker has stopped."""
    unique = list({item.run_id: item for item in items}.values())
    chunks = _chunks(unique, jobs)
    with ProcessPoolExecutor(max_workers=len(chunks), mp_context=multiprocessing.get_context("spawn")) as pool:
        where = _collect(_submit(pool, chunks, stage_dir, options))
    return [where[item.run_id] for item in unique]


def ingest_in_parallel(items: Sequence[RunInput], store: Path, jobs: int, stage_dir: Path,
                       options: dict[str, Any]) -> dict[str, IngestResult]:
    """Ingest ``items`` into the store file ``store`` with ``jobs`` processes in ONE transaction:
    this process ingests one share of the runs (:func:`_shares`) straight into the store
    while ``jobs - 1`` workers stage the others, whose rows are then copied in before COMMIT (a run
    the store holds already is not copied: its labels are updated, as a re-ingest does). With
    ``analyze`` every process analyzes the runs it ingests. Returns each run's result by run id."""
    unique = list({item.run_id: item for item in items}.values())
    analyze = options.get("analyze")
    mine, others = _shares(unique, jobs, analyze=analyze is not None)
    results: dict[str, IngestResult] = {}
    user_before_commit = options.get("before_commit")
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=max(1, len(others)), mp_context=context) as pool:
        futures = _submit(pool, others, stage_dir, options)

        def add_staged(con: Any, own: list[IngestResult]) -> None:
            results.update({r.run_id: r for r in own})
            if analyze is not None:  # this process's share, while the workers stage (and analyze) theirs
                analyze(con, list(dict.fromkeys(r.run_id for r in own if r.created)))
            staged = _collect(futures)
            # the workers are done: the copy and the COMMIT's checkpoint may use every core
            con.execute(f"SET threads = {jobs}")
            results.update(copy_staged(con, list(staged.values()), options))
            if user_before_commit is not None:
                user_before_commit(con, list(results.values()))

        ingest([str(it.source) for it in mine], store,
               **dict(options, before_commit=add_staged, analyze=None))  # analyzed in add_staged
    return results


def copy_staged(con: Any, staged: list[tuple[IngestResult, Path]], options: dict[str, Any]) -> dict[str, IngestResult]:
    """Copy staged runs into the store open on ``con``, inside its transaction."""
    files = list(dict.fromkeys(path for _r, path in staged))
    held = {r[0] for r in con.execute(
        "SELECT run_id FROM run_meta WHERE run_id IN (SELECT unnest(?::VARCHAR[]))",
        [[r.run_id for r, _p in staged]]).fetchall()}
    results = {r.run_id: (_existing(con, r, options) if r.run_id in held else r) for r, _p in staged}
    for i, path in enumerate(files):
        new = [r.run_id for r, p in staged if p == path and r.run_id not in held]
        if not new:
            continue
        alias = f"{STAGE}{i}"
        con.execute(f"ATTACH {quote(str(path))} AS {alias} (READ_ONLY)")
        for table in RUN_TABLES:
            con.execute(f"INSERT INTO main.{table} BY NAME SELECT * FROM {alias}.main.{table} "
                        "WHERE run_id IN (SELECT unnest(?::VARCHAR[]))", [new])
    return results


def relabel_held(con: Any, run_id: str, options: dict[str, Any]) -> list[str]:
    """A re-ingest of a run the store holds already: its label, workload and tags set from the
    ingest ``options`` (inside the caller's transaction); the fields changed."""
    return update_run_meta(con, run_id, label=options.get("label"), workload=options.get("workload"),
                           tags=dict(options.get("tags") or {}))


def _existing(con: Any, result: IngestResult, options: dict[str, Any]) -> IngestResult:
    """A run the store holds already, relabelled (:func:`relabel_held`)."""
    return dataclasses.replace(result, created=False, updated=relabel_held(con, result.run_id, options))


def default_jobs() -> int:
    """``--jobs 0``: one worker per core this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)
