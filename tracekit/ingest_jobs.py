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

#: ingest() options a worker can take (callbacks and a read-ahead stay in the parent).
WORKER_OPTIONS = ("format_name", "label", "workload", "tags", "python_events", "captured_at", "one_run")


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


#: What staging a share of the runs in a worker costs besides ingesting them, in bytes of input
#: the parent would ingest meanwhile (2-vCPU machine, 41 corpus runs, docs/performance.md): the
#: worker's start (spawn, imports: 0.35 s), its stage file's schema (0.33 s) and the stage's commit,
#: about 1.1 s at 0.104 s per MB, less the parent's own COMMIT (0.2 s).
STAGE_OVERHEAD_BYTES = 8_700_000
#: Copying a staged run into the store costs the parent this share of ingesting it (0.6 s for the
#: rows of 26 MB of input that took 2.7 s to ingest).
COPY_COST = 0.22


def _shares(items: Sequence[RunInput], jobs: int) -> tuple[list[RunInput], list[list[RunInput]]]:
    """The runs split between this process and ``jobs - 1`` workers so that all finish together:
    a worker starts late (:data:`STAGE_OVERHEAD_BYTES`) and this process copies what the workers
    stage (:data:`COPY_COST`), so with T input bytes each worker gets W = (T − overhead) ÷ (N −
    copy·(N − 1)) bytes and this process the rest (N = ``jobs``; every worker at least one run
    while there are runs for it), as :func:`_split` assigns them."""
    n = max(1, min(jobs, len(items)))
    total = sum(it.input_bytes for it in items)
    smallest = min((it.input_bytes for it in items), default=0)
    per_worker = max(smallest, (total - STAGE_OVERHEAD_BYTES) / (n - COPY_COST * (n - 1))) if n > 1 else 0
    shares = _split(items, [total - per_worker * (n - 1)] + [per_worker] * (n - 1))
    for k in range(1, n):  # a worker left without a run takes the smallest run of the fullest share
        if not shares[k]:
            donor = max((j for j in range(n) if len(shares[j]) > 1),
                        key=lambda j: sum(it.input_bytes for it in shares[j]))
            smallest_run = min(shares[donor], key=lambda it: it.input_bytes)
            shares[donor].remove(smallest_run)
            shares[k].append(smallest_run)
    mine, *others = shares
    return mine, [c for c in others if c]


def _submit(pool: ProcessPoolExecutor, chunks: list[list[RunInput]], stage_dir: Path,
            options: dict[str, Any]) -> list[tuple[Future[tuple[bool, Any]], Path]]:
    worker_options = {k: v for k, v in options.items() if k in WORKER_OPTIONS}
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
    the store holds already is not copied: its labels are updated, as a re-ingest does). Returns
    each run's result by run id."""
    unique = list({item.run_id: item for item in items}.values())
    mine, others = _shares(unique, jobs)
    results: dict[str, IngestResult] = {}
    user_before_commit = options.get("before_commit")
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=max(1, len(others)), mp_context=context) as pool:
        futures = _submit(pool, others, stage_dir, options)

        def add_staged(con: Any, own: list[IngestResult]) -> None:
            results.update({r.run_id: r for r in own})
            staged = _collect(futures)
            # the workers are done: the copy and the COMMIT's checkpoint may use every core
            con.execute(f"SET threads = {jobs}")
            results.update(copy_staged(con, list(staged.values()), options))
            if user_before_commit is not None:
                user_before_commit(con, list(results.values()))

        ingest([str(it.source) for it in mine], store, **dict(options, before_commit=add_staged))
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
