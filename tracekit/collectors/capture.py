"""``tracekit capture``: profile a window of a running workload or server, then store it as one run.

Backends (one per way inference engineers capture today), each an object in its own module of
:mod:`tracekit.collectors.capture_backends`, found by name in its registry:

* ``torch`` / ``jax`` with a command (``-- CMD ...``): CMD runs with a startup hook injected through
  ``PYTHONPATH`` (:mod:`tracekit.collectors._capture_sitecustomize`), so its code is not edited.
  Every Python process CMD starts arms the profiler when it imports torch (jax); tracekit opens and
  closes the capture window with marker files, and each process writes one trace.
* ``attach``: ``HOST:PORT`` of a process running the JAX / torch_xla profiler server
  (``jax.profiler.start_server(port)``): one ``ProfilerService.Profile`` gRPC call with
  ``emit_xspace``, as XProf's "capture profile" does; the returned XSpace is saved as
  ``<host>.xplane.pb``.
* ``rocprof`` with a command: ``rocprofv3`` wrapped with inference defaults (kernel, memory-copy,
  HIP runtime and marker traces; rocpd + CSV output; ``%pid%`` in the output name) and optional
  counter presets (:data:`COUNTER_PRESETS`).
* ``nsys`` with a command: ``nsys profile`` wrapped with inference defaults (CUDA + NVTX, CUDA graphs
  node by node, no CPU sampling, SQLite export beside the report).
* ``vllm`` / ``sglang`` server: ``POST /start_profile`` … ``POST /stop_profile`` on a running
  server, then the traces it wrote into its profiler directory (``VLLM_TORCH_PROFILER_DIR`` /
  ``SGLANG_TORCH_PROFILER_DIR``) during the window.

With a load spec (:class:`tracekit.collectors.load.LoadSpec`) the load driver runs against an
OpenAI-compatible endpoint; the capture window opens ``warmup_s`` after the load starts, and the
requests that started inside the window are stored with the run (view ``requests``).

All times are wall-clock; ``*_ns`` values are Unix-epoch nanoseconds; durations are seconds.
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from tracekit.collectors.capture_backends import COMMAND_BACKENDS, backend_for, get_backend
from tracekit.collectors.capture_backends.rocprof import rocprof_command
from tracekit.collectors.capture_backends.spec import (
    COUNTER_PRESETS,
    SERVER_TRACE_DIR_ENV,
    Backend,
    CaptureResult,
    CaptureSpec,
    CaptureStatus,
    ServerKind,
    StatusFn,
)
from tracekit.collectors.capture_backends.window import dir_bytes, terminate_children
from tracekit.errors import CaptureError

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.collectors.load.records import SteadyState
    from tracekit.ingest import IngestResult

__all__ = [
    "CAPTURE_FILE", "COUNTER_PRESETS", "SERVER_TRACE_DIR_ENV", "Backend", "CaptureResult", "CaptureSpec",
    "CaptureStatus", "ServerKind", "StatusFn", "capture", "capture_and_ingest", "rocprof_command",
    "terminate_children",
]

#: What a capture directory says about itself (backend, command, window, load settings), JSON.
CAPTURE_FILE = "tracekit-capture.json"


def _default_out_dir() -> Path:
    return Path.cwd() / time.strftime("tracekit-capture-%Y%m%d-%H%M%S", time.gmtime())



def _check_spec(spec: CaptureSpec) -> None:
    sources = sum([bool(spec.command), spec.attach is not None, spec.server is not None])
    if sources != 1:
        raise CaptureError("capture", "give exactly one of: a command after --, --attach HOST:PORT, "
                                      "or --server vllm|sglang URL")
    if spec.command and spec.backend is None:
        raise CaptureError(spec.command[0], "a command needs --backend torch, jax or rocprof")
    if spec.backend is not None and spec.backend not in COMMAND_BACKENDS:
        raise CaptureError("--backend", f"unknown backend {spec.backend!r} (known: {', '.join(COMMAND_BACKENDS)})")
    if (spec.attach is not None or spec.server is not None) and not spec.duration_s:
        raise CaptureError(spec.attach or spec.server_url or "capture", "--duration is required here")
    if spec.duration_s is not None and spec.duration_s <= 0:
        raise CaptureError("--duration", f"must be positive, got {spec.duration_s}")
    if spec.warmup_s < 0 or spec.warmup_steps < 0:
        raise CaptureError("--warmup", "must not be negative")
    if not 0 < spec.steady_timeout_s <= 86400:
        raise CaptureError("--steady-timeout", f"must be more than 0 and at most 86400 seconds, got {spec.steady_timeout_s:g}")
    # the options one command backend reads are refused with any other
    named = frozenset() if spec.backend is None else get_backend(spec.backend).options
    if spec.warmup_steps and "warmup_steps" not in named:
        raise CaptureError("--warmup-steps", "counts nn.Module forwards: only with --backend torch")
    if spec.counters is not None and "counters" not in named:
        raise CaptureError("--counters", "hardware counter presets need --backend rocprof")
    if spec.backend is not None and spec.backend != backend_for(spec).name:
        get_backend(spec.backend).check(spec)  # a --backend given along with --attach/--server
    backend_for(spec).check(spec)
    if spec.load is not None:
        from tracekit.collectors.load import check_spec

        check_spec(spec.load)  # a bad prompts file or length spec fails before anything starts


def capture(spec: CaptureSpec, *, stop: threading.Event | None = None,
            on_status: StatusFn | None = None, store: str | Path | None = None) -> CaptureResult:
    """Capture per ``spec`` into ``spec.out_dir``; raise :class:`CaptureError` when nothing was captured.

    ``stop`` (e.g. set on Ctrl-C) closes the window early; what was captured is still returned.
    ``store`` is the store the capture will be ingested into: ``out_dir`` may not be it, hold it,
    or be any other DuckDB file (:func:`tracekit.outputs.prepare_output_dir`). A directory created
    here is removed again when the capture fails before writing anything into it.
    """
    from tracekit.outputs import prepare_output_dir

    _check_spec(spec)
    if spec.command and spec.command[0] in ("python", "python3"):
        # a bare `python` is the interpreter running tracekit (its venv, its torch/jax), not
        # whatever PATH holds: outside an activated venv there may be no `python` at all
        from dataclasses import replace

        spec = replace(spec, command=[sys.executable, *spec.command[1:]])
    backend = backend_for(spec)
    backend.preflight(spec)  # said before anything is created: no directory left behind
    given = spec.out_dir or _default_out_dir()
    created = prepare_output_dir(given, store=store, force=spec.force, marker=CAPTURE_FILE)
    out_dir = given.resolve()
    try:
        return _capture_into(spec, out_dir, stop, on_status)
    except BaseException:
        if created:
            try:
                out_dir.rmdir()  # only when still empty: traces written are kept
            except OSError:
                pass
        raise


def _capture_into(spec: CaptureSpec, out_dir: Path, stop: threading.Event | None,
                  on_status: StatusFn | None) -> CaptureResult:
    stop = stop or threading.Event()
    marks: list[tuple[str, float]] = [("starting", time.monotonic())]

    def record(s: CaptureStatus) -> None:  # phase changes, timed; then the caller's display
        if s.phase != marks[-1][0]:
            marks.append((s.phase, time.monotonic()))
        if on_status is not None:
            on_status(s)

    result = backend_for(spec).run(spec, out_dir, stop, record)
    marks.append(("end", time.monotonic()))
    for (phase, t0), (_, t1) in itertools.pairwise(marks):
        result.timings[phase] = result.timings.get(phase, 0.0) + (t1 - t0)
    _write_capture_files(spec, result)
    return result


def _write_capture_files(spec: CaptureSpec, result: CaptureResult) -> None:
    """The window's request log (read back by ``tracekit ingest DIR``) and what was captured how."""
    from tracekit.ingest import REQUESTS_FILE, SERVER_METRICS_FILE

    requests = result.window_requests()
    if requests is not None:
        from tracekit.collectors.load import write_requests
        from tracekit.server_metric_rows import write_scrapes

        write_requests(requests.records, result.out_dir / REQUESTS_FILE)
        if requests.server_metrics:
            write_scrapes(requests.server_metrics, result.out_dir / SERVER_METRICS_FILE)
        result.notes.extend(requests.notes)
    (result.out_dir / CAPTURE_FILE).write_text(json.dumps({
        "backend": spec.backend, "command": spec.command, "attach": spec.attach, "server": spec.server,
        "server_url": spec.server_url, "duration_s": spec.duration_s, "warmup_s": spec.warmup_s,
        "warmup_steps": spec.warmup_steps, "counters": spec.counters,
        "window_start_ns": result.window_start_ns, "window_end_ns": result.window_end_ns,
        "interrupted": result.interrupted, "command_returncode": result.command_returncode,
        "trace_files": [str(p.relative_to(result.out_dir)) for p in result.trace_files],
        "load": None if spec.load is None else {
            "url": spec.load.url, "concurrency": spec.load.concurrency, "rate_rps": spec.load.rate_rps,
            "prompt_tokens": spec.load.prompt_tokens, "max_tokens": spec.load.max_tokens,
            "endpoint": spec.load.endpoint, "requests_in_window": len(requests.records) if requests else 0,
            "profile": spec.load.profile, "turns": spec.load.turns, "turn_tokens": spec.load.turn_tokens,
            "think_s": spec.load.think_s, "subagents": spec.load.subagents,
            "subagent_every": spec.load.subagent_every, "steady_state": spec.steady_state,
            "steady_state_verdict": steady_verdict(spec, result),
            "server_metric_scrapes": len(requests.server_metrics) if requests else 0,
            "server_metric_errors": requests.server_metrics_errors if requests else []},
        "notes": result.notes,
    }, indent=1) + "\n")


def steady_verdict(spec: CaptureSpec, result: CaptureResult) -> SteadyState | None:
    """A sweep point's steady state (:data:`~tracekit.collectors.load.records.SteadyState`), the
    run's tag ``steady_state``: ``interrupted`` when the capture was stopped or never got to ask;
    None when the capture did not wait for a steady state (not a sweep point)."""
    if not spec.steady_state or spec.load is None:
        return None
    if result.interrupted or result.load is None or result.load.steady_state is None:
        return "interrupted"
    return result.load.steady_state


def capture_and_ingest(
    spec: CaptureSpec,
    store: str | Path | None = None,
    *,
    label: str | None = None,
    workload: str | None = None,
    tags: dict[str, str] | None = None,
    stop: threading.Event | None = None,
    on_status: StatusFn | None = None,
) -> tuple[CaptureResult, IngestResult]:
    """Capture, then ingest the trace directory as one run and store the window's requests with it.

    If storing the requests fails, the new run is removed again: never a half-stored capture.
    """
    from tracekit.ingest import ingest

    result = capture(spec, stop=stop, on_status=on_status, store=store)
    run_tags = {"capture_backend": spec.backend or ("attach" if spec.attach else str(spec.server))}
    if result.load is not None and result.load.model:
        run_tags["served_model"] = result.load.model  # the model the load asked for (view portfolio_runs)
    if spec.load is not None and "load_profile" not in (tags or {}):
        run_tags["load_profile"] = spec.load.profile
    verdict = steady_verdict(spec, result)
    if verdict is not None:
        # a sweep point without a steady state is kept, but the portfolio answers no speed band
        # with it (view portfolio_runs)
        run_tags["steady_state"] = verdict
    run_tags.update(tags or {})
    if on_status is not None:
        w = ((result.window_end_ns or 0) - (result.window_start_ns or 0)) / 1e9 if result.window_start_ns else None
        on_status(CaptureStatus(phase="ingesting", elapsed_s=0.0, window_elapsed_s=w,
                                trace_bytes=dir_bytes(result.out_dir)))
    # the capture directory holds the traces and the window's request log: one ingest, one
    # transaction, stores both (and the directory can be ingested into another store later)
    (res,) = ingest([result.out_dir], store, label=label, workload=workload, tags=run_tags)
    return result, res
