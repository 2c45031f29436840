"""``tracekit ingest --ray ADDRESS``: backfill a trace archive on a Ray cluster, one task per run.

Ray is an optional extra (``pip install 'tracekit[ray]'``) and slow to start: a local instance took
7–21 s and ~850 MB on 2 cores (``docs/performance.md``), so it is for archives, not for CI's few
runs (``ingest --jobs N`` starts in 0.3 s). Every input is resolved and hashed here first (as for
any ingest: nothing is stored when one is missing or unrecognized); then each distinct run is one
Ray task (1 CPU), which ingests it with the ordinary :func:`tracekit.ingest.ingest` into a private
store file and, when the caller passes ``analyze`` (the CLI passes
:func:`tracekit.run_analysis.analyze_runs`), runs the analyzers on it, so its findings and metrics
travel with its rows:

* **into a lake** each task writes its own run: it claims the run id in the catalog, stages the run
  in its node's ``TRACEKIT_TMPDIR``, publishes it in one DuckLake transaction and marks the claim
  committed (:mod:`tracekit.ingest_lake`). The claims keep each run exactly once, whichever task
  or other writer gets the same content; a run committed already is not read again. Runs commit
  one by one: a bad input fails its own task only, the others' runs stay, and the command then
  reports the bad input (run it again without it: what is committed is not redone).
* **into a store file** the tasks stage runs under a directory of this machine and this process
  copies them into the store in ONE transaction (:mod:`tracekit.ingest_jobs`), all runs or none.
  Only workers that share this machine's file system can do that: ``local``, or a cluster whose
  every node is this machine (checked once connected); ``ray://`` is refused at once.

``ADDRESS``: ``local`` starts a private Ray instance here (one CPU per core, no dashboard, shut
down at the end; unless ``RAY_AUTH_*`` is set, its token authentication gets a one-off token in the
environment instead of ``~/.ray/auth_token``); ``auto`` joins the cluster started on this machine
with ``ray start`` (or ``RAY_ADDRESS``); ``HOST:PORT`` or ``ray://HOST:PORT`` a remote one, whose
workers run the same tracekit. Inputs must be readable by every worker at the same absolute path
(this machine, or a shared file system). In a process already connected to Ray (a notebook, a
test), that connection is used and left open. A one-line notice on stderr gives Ray's start-up
time.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import os
import secrets
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote as url_quote
from urllib.parse import urlencode

import duckdb

from tracekit.errors import ConfigError, PathError
from tracekit.ingest import IngestResult, RunInput, ingest, resolve_input, store_transaction
from tracekit.ingest_jobs import WORKER_OPTIONS, copy_staged, default_jobs, raise_worker_error
from tracekit.ingest_lake import claim_and_publish
from tracekit.lake.claims import claims_for, stale_after_s, wait_for, writer_id
from tracekit.lake.url import LakeURL, parse_lake_url
from tracekit.limits import temp_dir
from tracekit.store import close, connect

__all__ = ["LOCAL", "RAY_MISSING", "ingest_on_ray"]

#: ``--ray local``: start a private Ray instance on this machine.
LOCAL = "local"

#: The reason given when Ray is not installed.
RAY_MISSING = "needs the ray extra: pip install 'tracekit[ray]'"

#: ``analyze(run_ids, staged_store_file)``, run in a task after its run is staged (a module-level
#: function, so Ray can send it by name).
Analyze = Callable[[list[str], Path], object]

#: What a task returns: (True, its result) or (False, (error class name, path, reason)), since a
#: :class:`PathError` (two constructor arguments) does not survive pickling as itself.
Outcome = tuple[bool, Any]


def _outcome(work: Callable[[], IngestResult]) -> Outcome:
    try:
        return True, work()
    except PathError as exc:
        return False, (type(exc).__name__, exc.path, exc.reason)


def _stage(item: RunInput, staged: Path, options: dict[str, Any], analyze: Analyze | None) -> IngestResult:
    """Ingest one run into the new store file ``staged`` and analyze it there."""
    [result] = ingest([item.source], staged, **options)
    if analyze is not None and result.created:
        analyze([result.run_id], staged)
    return result


def _file_task(item: RunInput, staged: str, options: dict[str, Any], analyze: Analyze | None) -> Outcome:
    """A Ray task for a store file: stage one run in ``staged`` (under the driver's directory),
    after removing what an attempt whose worker died left there (Ray retries such a task)."""
    for leftover in (Path(staged), Path(staged + ".wal")):
        leftover.unlink(missing_ok=True)
    return _outcome(lambda: _stage(item, Path(staged), options, analyze))


def _lake_task(lake: str, item: RunInput, writer: str, options: dict[str, Any], analyze: Analyze | None) -> Outcome:
    """A Ray task for a lake: claim the run, stage and analyze it in this node's TRACEKIT_TMPDIR,
    publish it in one lake transaction, mark the claim committed. ``writer`` is the command's, so a
    task Ray retries after its worker died takes its own claim back at once."""

    def work() -> IngestResult:
        con = connect(lake)
        try:
            claims, stale_s = claims_for(con, parse_lake_url(lake)), stale_after_s()
            with tempfile.TemporaryDirectory(prefix="tracekit-stage-", dir=temp_dir()) as stage_dir:
                prestaged = None
                if wait_for(claims, item.run_id, writer, stale_s) == "mine":
                    staged = Path(stage_dir) / f"{item.run_id}.duckdb"
                    try:
                        prestaged = (_stage(item, staged, options, analyze), staged)
                    except BaseException:
                        claims.finish(item.run_id, writer, False)
                        raise
                return claim_and_publish(con, claims, item, writer, stale_s, Path(stage_dir), prestaged, options)
        finally:
            close(con)

    return _outcome(work)


def _import_ray() -> Any:
    try:
        return importlib.import_module("ray")
    except ImportError:
        raise ConfigError("ingest --ray", RAY_MISSING) from None


def _private_token(address: str) -> dict[str, str]:
    """For a local instance: token authentication with a one-off token in the environment, so Ray
    writes none under the home directory. Nothing when the user set ``RAY_AUTH_*``, or when Ray
    was imported already (it reads the mode once, on import)."""
    if address != LOCAL or "ray" in sys.modules or any(
            k in os.environ for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")):
        return {}
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}


@contextmanager
def _environment(env: dict[str, str]) -> Iterator[None]:
    """``env`` set in this process's environment for the block (Ray's processes inherit it)."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextmanager
def _connected(ray: Any, address: str) -> Iterator[None]:
    """Ray started (``local``) or joined for the block, then shut down; the notice on stderr."""
    if ray.is_initialized():  # this process's own connection: used, left open
        yield
        return
    started = time.perf_counter()
    try:
        quiet = {"logging_level": logging.ERROR, "log_to_driver": False}
        try:
            if address == LOCAL:
                ray.init(address="local", num_cpus=default_jobs(), include_dashboard=False, **quiet)
            else:
                ray.init(address=address, **quiet)
        except Exception as exc:  # noqa: BLE001 - Ray's many ways of not connecting: one line
            text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise ConfigError("--ray", f"{address}: Ray did not start or connect: {text}") from None
        what = "started a local Ray instance" if address == LOCAL else f"connected to Ray at {address}"
        cpus = int(ray.cluster_resources().get("CPU", 0))
        print(f"ray: {what} in {time.perf_counter() - started:.1f} s ({cpus} CPUs)", file=sys.stderr, flush=True)
        yield
    finally:
        if ray.is_initialized():
            ray.shutdown()


def _check_one_machine(ray: Any, address: str) -> None:
    """A store file's runs are staged in this machine's directories: refuse workers elsewhere."""
    here = ray.util.get_node_ip_address()
    others = sorted({n["NodeManagerAddress"] for n in ray.nodes() if n.get("Alive")} - {here})
    if others:
        raise ConfigError("--ray", f"{address}: the cluster has nodes on other machines ({', '.join(others)}), "
                          "which cannot stage runs for a store file here: ingest into a lake (--store lake:…)")


def _absolute_lake(url: LakeURL) -> str:
    """The lake URL with absolute paths, for tasks whose working directory is not this one's."""
    head = (f"lake:sqlite:///{url_quote(url.catalog_file)}" if url.catalog == "sqlite"
            else url.text.split("?", 1)[0])
    return f"{head}?{urlencode({'data': url.data})}"


def _for_workers(item: RunInput) -> RunInput:
    """``item`` with absolute paths (workers do not share this process's working directory)."""
    return dataclasses.replace(item, source=item.source.absolute(), files=[f.absolute() for f in item.files],
                               parser=None)


def _gather(ray: Any, tasks: dict[Any, RunInput], order: dict[str, int],
            progress: Callable[[int, int], None] | None) -> dict[str, IngestResult]:
    """Each task's result by run id, as tasks finish (``progress`` told); every task is waited
    for, then the input error of the earliest input, if any, is raised."""
    pending, done, errors = list(tasks), {}, {}
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        item = tasks[ready[0]]
        ok, value = ray.get(ready[0])
        if not ok:
            errors[order[item.run_id]] = value
            continue
        done[item.run_id] = value
        if progress is not None:
            progress(value.n_device_events + value.n_host_events, item.input_bytes)
    if errors:
        raise_worker_error(errors[min(errors)])
    return done


def _store_staged(store: Path, staged: list[tuple[IngestResult, Path]], options: dict[str, Any]) -> dict[str, IngestResult]:
    """Copy the staged runs into the store file in one transaction (a store this created is
    removed again on failure), calling ``before_commit`` as an ingest does."""
    with store_transaction(store, options.get("on_lock_wait")) as con:
        results = copy_staged(con, staged, options)
        if options.get("before_commit") is not None:
            options["before_commit"](con, list(results.values()))
    return results


def _into_file(ray: Any, store: Path, unique: list[RunInput], order: dict[str, int], address: str,
               options: dict[str, Any], analyze: Analyze | None) -> dict[str, IngestResult]:
    if address != LOCAL:
        _check_one_machine(ray, address)
    task = ray.remote(num_cpus=1)(_file_task)
    worker_options = {k: v for k, v in options.items() if k in WORKER_OPTIONS}
    with tempfile.TemporaryDirectory(prefix="tracekit-stage-", dir=temp_dir()) as stage_dir:
        paths = {it.run_id: Path(stage_dir) / f"{it.run_id}.duckdb" for it in unique}
        tasks = {task.remote(_for_workers(it), str(paths[it.run_id]), worker_options, analyze): it for it in unique}
        done = _gather(ray, tasks, order, options.get("progress"))
        return _store_staged(store, [(done[it.run_id], paths[it.run_id]) for it in unique], options)


def _into_lake(ray: Any, lake: str, con: duckdb.DuckDBPyConnection, unique: list[RunInput],
               order: dict[str, int], options: dict[str, Any], analyze: Analyze | None) -> dict[str, IngestResult]:
    task = ray.remote(num_cpus=1)(_lake_task)
    worker_options = {k: v for k, v in options.items() if k in WORKER_OPTIONS}
    target, writer = _absolute_lake(parse_lake_url(lake)), writer_id()
    tasks = {task.remote(target, _for_workers(it), writer, worker_options, analyze): it for it in unique}
    done = _gather(ray, tasks, order, options.get("progress"))
    if options.get("before_commit") is not None:  # the CLI's summary, read from the lake
        options["before_commit"](con, [done[it.run_id] for it in unique])
    return done


def ingest_on_ray(paths: Sequence[str | Path], target: str | Path, address: str | None, *,
                  analyze: Analyze | None = None, **options: Any) -> list[IngestResult]:
    """Ingest each PATH as one run into ``target`` (a store file or a ``lake:`` URL), one Ray task
    per distinct run, on the Ray at ``address`` (None: ``local``); see the module docstring.
    ``options`` are :func:`tracekit.ingest.ingest`'s keywords: the tasks get the run options
    (``format_name``, ``label``, …), this process the callbacks (``on_start`` once with the input
    bytes, ``progress`` as each run is done, ``before_commit``, ``on_lock_wait``). Returns one
    :class:`IngestResult` per PATH, in order."""
    address = address or LOCAL
    if not isinstance(target, str) and address.startswith("ray://"):
        raise ConfigError("--ray", f"{address}: a remote cluster cannot stage runs for a store file on this "
                          "machine: use --ray local, or ingest into a lake (--store lake:…)")
    with _environment(_private_token(address)):
        ray = _import_ray()
        items = [resolve_input(p, options.get("format_name")) for p in paths]  # all checked before Ray starts
        unique = list({it.run_id: it for it in items}.values())
        order = {it.run_id: i for i, it in enumerate(unique)}
        if options.get("on_start") is not None:
            options["on_start"](sum(it.input_bytes for it in unique))
        con = None
        try:
            if isinstance(target, str):
                con = connect(target)  # the lake checked (and its claim table made) before Ray starts
                claims_for(con, parse_lake_url(target)).create()
            with _connected(ray, address):
                if con is not None:
                    done = _into_lake(ray, str(target), con, unique, order, options, analyze)
                else:
                    done = _into_file(ray, Path(target), unique, order, address, options, analyze)
        finally:
            if con is not None:
                close(con)
    first = {it.run_id: str(it.source) for it in reversed(items)}  # a result names its first PATH
    return [dataclasses.replace(done[it.run_id], source=first[it.run_id]) for it in items]
