"""What ``tracekit capture`` is asked for (:class:`CaptureSpec`), what it reports while it runs
(:class:`CaptureStatus`) and what it produced (:class:`CaptureResult`), shared by every backend.

All times are wall-clock; ``*_ns`` values are Unix-epoch nanoseconds; durations are seconds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.collectors.load import LoadResult, LoadSpec

__all__ = ["COUNTER_PRESETS", "SERVER_TRACE_DIR_ENV", "Backend", "CaptureResult", "CaptureSpec", "CaptureStatus",
           "ServerKind", "StatusFn"]

#: ``--backend`` values (:data:`tracekit.collectors.capture_backends.COMMAND_BACKENDS`).
Backend = Literal["torch", "jax", "rocprof", "nsys"]
ServerKind = Literal["vllm", "sglang"]

#: rocprofv3 counter presets for ``--counters``: each inner list is one pass, sized with the
#: per-pass hardware slot limits of gfx90a/gfx942/gfx950 (SQ 8, TCC 4, GRBM 2; see
#: docs/capture.md). One pass goes on the command line (``--pmc``), several go through an input
#: file (``-i``, JSON ``jobs``), which rocprofv3 runs as ``pass_N/`` output folders.
COUNTER_PRESETS: dict[str, list[list[str]]] = {
    # dependency-wait and issue-wait per wave cycle, occupancy (the wave_stalls analyzer's inputs)
    "stalls": [["SQ_WAVES", "SQ_WAVE_CYCLES", "SQ_BUSY_CYCLES", "SQ_WAIT_ANY", "SQ_WAIT_INST_ANY",
                "SQ_ACTIVE_INST_ANY", "GRBM_GUI_ACTIVE", "GRBM_COUNT"]],
    # HBM traffic: FETCH_SIZE takes 3 TCC slots and WRITE_SIZE 2, so two passes on gfx942/gfx950
    "memory": [["FETCH_SIZE", "TCC_EA0_RDREQ", "GRBM_GUI_ACTIVE"],
               ["WRITE_SIZE", "TCC_HIT", "TCC_MISS", "GRBM_GUI_ACTIVE"]],
    # roofline inputs: VALU and MFMA work (SQ, 8 per pass) and HBM bytes (TCC)
    "roofline": [["SQ_INSTS_VALU_ADD_F16", "SQ_INSTS_VALU_MUL_F16", "SQ_INSTS_VALU_FMA_F16",
                  "SQ_INSTS_VALU_TRANS_F16", "SQ_INSTS_VALU_ADD_F32", "SQ_INSTS_VALU_MUL_F32",
                  "SQ_INSTS_VALU_FMA_F32", "SQ_INSTS_VALU_TRANS_F32"],
                 ["SQ_INSTS_VALU_MFMA_MOPS_F16", "SQ_INSTS_VALU_MFMA_MOPS_BF16",
                  "SQ_INSTS_VALU_MFMA_MOPS_F32", "SQ_INSTS_VALU_MFMA_MOPS_F64",
                  "SQ_INSTS_VALU_MFMA_MOPS_I8", "GRBM_GUI_ACTIVE"],
                 ["FETCH_SIZE", "GRBM_GUI_ACTIVE"],
                 ["WRITE_SIZE", "GRBM_GUI_ACTIVE"]],
}

#: Environment variable naming each server's torch-profiler output directory (server side).
SERVER_TRACE_DIR_ENV: dict[str, str] = {"vllm": "VLLM_TORCH_PROFILER_DIR", "sglang": "SGLANG_TORCH_PROFILER_DIR"}


@dataclass
class CaptureSpec:
    """What to capture and for how long.

    Exactly one source: ``command`` with ``backend`` torch/jax/rocprof, ``attach`` (HOST:PORT of a
    JAX/torch_xla profiler server), or ``server`` + ``server_url`` (vLLM/SGLang profiler endpoints).

    Attributes:
        duration_s: Length of the capture window, seconds. ``None`` with a command: until the
            command exits (or Ctrl-C). Required for ``attach`` and ``server``.
        warmup_s: Seconds between the start (of the command, or of the load when a load spec is
            given) and the window opening.
        warmup_steps: torch only: outermost ``nn.Module`` forward calls (engine steps) a process
            must have run before its window opens.
        out_dir: Where traces are written (kept after ingest). Default: a new
            ``tracekit-capture-<UTC time>`` directory in the working directory. It must be new or
            empty (:func:`tracekit.outputs.prepare_output_dir`); never a store, a file or a device.
        force: Allow ``out_dir`` to be a previous capture's directory (it holds
            :data:`CAPTURE_FILE` and no DuckDB file): its contents are removed first.
        counters: rocprof only: a :data:`COUNTER_PRESETS` name.
        server_trace_dir: The server's profiler directory (default: the env var of
            :data:`SERVER_TRACE_DIR_ENV` in tracekit's own environment).
        ready_timeout_s: How long to wait for the load URL (or server) to accept connections.
        drain_timeout_s: After the window closes, how long to wait for processes to export traces.
        steady_state: With a load: after ``warmup_s``, also wait until the load is in steady state
            (every request sent during the warm-up has completed;
            :class:`~tracekit.collectors.capture_backends.window.LoadRunner`) before the window
            opens. A sweep's points set it.
        steady_timeout_s: How long, after ``warmup_s``, to wait for that steady state before the
            window opens anyway (a note says so, and the run is tagged ``steady_state=not_reached``).
    """

    command: list[str] = field(default_factory=list)
    backend: Backend | None = None
    attach: str | None = None
    server: ServerKind | None = None
    server_url: str | None = None
    server_trace_dir: Path | None = None
    duration_s: float | None = None
    warmup_s: float = 0.0
    warmup_steps: int = 0
    out_dir: Path | None = None
    force: bool = False
    counters: str | None = None
    load: LoadSpec | None = None
    ready_timeout_s: float = 120.0
    drain_timeout_s: float = 120.0
    steady_state: bool = False
    steady_timeout_s: float = 120.0


@dataclass
class CaptureStatus:
    """Progress of a capture, for a display: ``phase`` ∈ starting | warmup | capturing | draining."""

    phase: str
    elapsed_s: float
    window_elapsed_s: float | None
    trace_bytes: int
    requests_done: int = 0
    request_errors: int = 0


@dataclass
class CaptureResult:
    """What a capture produced: the trace directory, the window, and the load's requests."""

    out_dir: Path
    window_start_ns: int | None
    window_end_ns: int | None
    trace_files: list[Path]
    interrupted: bool = False
    command_returncode: int | None = None
    load: LoadResult | None = None
    notes: list[str] = field(default_factory=list)
    #: wall time per phase, seconds, in order (starting, warmup, capturing, draining; the caller
    #: adds ingesting and analyzing): where a capture's time went
    timings: dict[str, float] = field(default_factory=dict)

    def window_requests(self) -> LoadResult | None:
        """The load's result restricted to requests that started inside the capture window."""
        if self.load is None:
            return None
        if self.window_start_ns is None:
            return self.load
        from dataclasses import replace

        end = self.window_end_ns if self.window_end_ns is not None else self.load.ended_ns
        kept = [r for r in self.load.records if self.window_start_ns <= r.start_ns <= end]
        # the server's scrapes in the window, and the last one before it: the counters' baseline
        # (a window's count is the last value minus the first, over at least two scrapes)
        before = [x for x in self.load.server_metrics if x.t_ns < self.window_start_ns][-1:]
        scrapes = before + [x for x in self.load.server_metrics if self.window_start_ns <= x.t_ns <= end]
        return replace(self.load, records=kept, started_ns=self.window_start_ns, ended_ns=end, server_metrics=scrapes)


StatusFn = Callable[[CaptureStatus], None]

