"""``tracekit capture``: profile a window of a running workload or server, then store it as one run.

Backends (one per way inference engineers capture today):

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
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from tracekit.errors import CaptureError

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.collectors.load import LoadProgress, LoadResult, LoadSpec
    from tracekit.ingest import IngestResult

__all__ = [
    "COUNTER_PRESETS", "CaptureResult", "CaptureSpec", "CaptureStatus", "capture", "capture_and_ingest",
    "rocprof_command",
]

Backend = Literal["torch", "jax", "rocprof"]
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

_HOOK_TEMPLATE = Path(__file__).with_name("_capture_sitecustomize.py")
#: Seconds after the first process starts profiling during which later ones still count as
#: opening the window together (the window opens at the last of them).
_SETTLE_S = 1.0
#: Seconds to keep waiting for a process to start profiling after another one failed to arm.
_FAILURE_GRACE_S = 5.0
#: What a capture directory says about itself (backend, command, window, load settings), JSON.
CAPTURE_FILE = "tracekit-capture.json"


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
        return replace(self.load, records=kept, started_ns=self.window_start_ns, ended_ns=end)


StatusFn = Callable[[CaptureStatus], None]


def _dir_bytes(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def _default_out_dir() -> Path:
    return Path.cwd() / time.strftime("tracekit-capture-%Y%m%d-%H%M%S", time.gmtime())


def _check_spec(spec: CaptureSpec) -> None:
    sources = sum([bool(spec.command), spec.attach is not None, spec.server is not None])
    if sources != 1:
        raise CaptureError("capture", "give exactly one of: a command after --, --attach HOST:PORT, "
                                      "or --server vllm|sglang URL")
    if spec.command and spec.backend is None:
        raise CaptureError(spec.command[0], "a command needs --backend torch, jax or rocprof")
    if (spec.attach is not None or spec.server is not None) and not spec.duration_s:
        raise CaptureError(spec.attach or spec.server_url or "capture", "--duration is required here")
    if spec.duration_s is not None and spec.duration_s <= 0:
        raise CaptureError("--duration", f"must be positive, got {spec.duration_s}")
    if spec.warmup_s < 0 or spec.warmup_steps < 0:
        raise CaptureError("--warmup", "must not be negative")
    if spec.warmup_steps and spec.backend != "torch":
        raise CaptureError("--warmup-steps", "counts nn.Module forwards: only with --backend torch")
    if spec.counters is not None:
        if spec.backend != "rocprof":
            raise CaptureError("--counters", "hardware counter presets need --backend rocprof")
        if spec.counters not in COUNTER_PRESETS:
            raise CaptureError("--counters", f"unknown preset {spec.counters!r} "
                                             f"(known: {', '.join(COUNTER_PRESETS)})")
    if spec.attach is not None:
        host, _, port = spec.attach.rpartition(":")
        if not host or not port.isdigit():
            raise CaptureError(spec.attach, "expected HOST:PORT of a profiler server")
    if spec.server is not None:
        url = urllib.parse.urlparse(spec.server_url or "")
        if url.scheme not in ("http", "https") or not url.netloc:
            raise CaptureError(spec.server_url or spec.server, "expected the server's http(s) URL")
    if spec.counters is not None and len(COUNTER_PRESETS[spec.counters]) > 1 and (
            spec.load is not None or spec.duration_s is not None):
        raise CaptureError("--counters", f"preset {spec.counters!r} needs {len(COUNTER_PRESETS[spec.counters])} "
                                         "passes, i.e. one run of the application each: use it on a "
                                         "workload that ends by itself (no --load, no --duration), or "
                                         "the one-pass preset 'stalls'")
    if spec.load is not None:
        from tracekit.collectors.load import check_spec

        check_spec(spec.load)  # a bad prompts file or length spec fails before anything starts


# -- shared pieces ------------------------------------------------------------------------------------


def _wait_ready(url: str, timeout_s: float, alive: Callable[[], bool], stop: threading.Event) -> None:
    """Wait until ``url``'s host:port accepts TCP connections (the server is up)."""
    u = urllib.parse.urlparse(url)
    host = u.hostname or "127.0.0.1"
    port = u.port or (443 if u.scheme == "https" else 80)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return
        except OSError:
            pass
        if not alive():
            raise CaptureError(url, "the command exited before the server accepted connections")
        if stop.is_set():
            raise CaptureError(url, "interrupted while waiting for the server")
        if time.monotonic() > deadline:
            raise CaptureError(url, f"server unreachable: no connection within {timeout_s:g} s")
        time.sleep(0.1)


class _LoadRunner:
    """Runs the load driver in a thread; ``stop()`` ends it gracefully and returns its result."""

    def __init__(self, spec: LoadSpec) -> None:
        from tracekit.collectors.load import run_load

        self._finish = threading.Event()
        self.result: LoadResult | None = None
        self.error: BaseException | None = None
        self.done = 0
        self.errors = 0

        def progress(p: LoadProgress) -> None:
            self.done = p.requests_done
            self.errors = p.errors

        def target() -> None:
            try:
                self.result = run_load(spec, on_progress=progress, finish=self._finish)
            except BaseException as exc:  # noqa: BLE001 - reported by stop()
                self.error = exc

        self._thread = threading.Thread(target=target, name="tracekit-load", daemon=True)
        self._thread.start()

    def stop(self) -> LoadResult | None:
        """No new requests; wait for those in flight to complete (each bounded by its timeout).
        Raises what the load driver raised."""
        self.close()
        if self.error is not None:
            raise self.error
        return self.result

    def close(self) -> None:
        """Like :meth:`stop`, for clean-up paths: never raises."""
        self._finish.set()
        self._thread.join()


def _terminate(proc: subprocess.Popen[bytes], grace_s: float = 10.0) -> int:
    """Stop a command and its children (its own process group): SIGINT, SIGTERM, then SIGKILL."""
    for sig, wait in ((signal.SIGINT, grace_s), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        if proc.poll() is not None:
            break
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
    rc = proc.wait()
    _LIVE.discard(proc)
    return rc


def _stderr_fd() -> int | None:
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # stderr replaced by an object without a file
        return None


#: Lines the profiled command's libraries print that say nothing to the user: libkineto's
#: ``USDT:<time> <pid>:<tid> SyncActivityProfilerHandler.cpp:59] profiler_stop`` probes.
_NOISE = re.compile(rb"^USDT:\S+ \S+ \S+ \S+\] profiler_(start|stop)\s*$")


def _forward_stderr(pipe: Any) -> None:
    """Copy the command's stderr to ours, line by line, leaving out :data:`_NOISE`."""
    out = getattr(sys.stderr, "buffer", None)
    for line in iter(pipe.readline, b""):
        if _NOISE.match(line):
            continue
        try:
            if out is not None:
                out.write(line)
                out.flush()
            else:
                sys.stderr.write(line.decode(errors="replace"))
        except (OSError, ValueError):
            pass
    pipe.close()


#: Commands started by captures in this process and not reaped yet: :func:`terminate_children`
#: stops them when a capture is aborted (their own session keeps the terminal's signals away).
_LIVE: set[subprocess.Popen[bytes]] = set()


def terminate_children() -> None:
    """Stop every command a capture started that is still running (used when a capture is
    aborted: a second Ctrl-C)."""
    for proc in list(_LIVE):
        _terminate(proc, grace_s=5.0)
        _LIVE.discard(proc)


def _start_command(command: Sequence[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    exe = command[0]
    if shutil.which(exe, path=env.get("PATH")) is None and not Path(exe).is_file():
        raise CaptureError(exe, "command not found")
    try:
        # own session: a Ctrl-C in the terminal reaches tracekit only, which then closes the
        # window, lets the processes export their traces, and stops the command itself
        # the command's stdout goes to our stderr: tracekit's stdout carries its own result (--json)
        proc = subprocess.Popen(list(command), env=env, start_new_session=True, stdout=_stderr_fd(),
                                stderr=subprocess.PIPE)
        _LIVE.add(proc)
        assert proc.stderr is not None
        threading.Thread(target=_forward_stderr, args=(proc.stderr,), name="tracekit-child-stderr",
                         daemon=True).start()
        return proc
    except OSError as exc:
        raise CaptureError(exe, f"cannot start: {exc.strerror or exc}") from None


class _Clock:
    def __init__(self, on_status: StatusFn | None, out_dir: Path, load: _LoadRunner | None = None) -> None:
        self.t0 = time.monotonic()
        self.on_status = on_status
        self.out_dir = out_dir
        self.load = load
        self.window_t0: float | None = None
        self.window_t1: float | None = None  # set when the window closes: its length stops growing
        self._last = 0.0

    def tick(self, phase: str, force: bool = False) -> None:
        now = time.monotonic()
        if self.on_status is None or (not force and now - self._last < 0.25):
            return
        self._last = now
        if phase == "draining" and self.window_t1 is None:
            self.window_t1 = now
        w_end = now if self.window_t1 is None else self.window_t1
        self.on_status(CaptureStatus(
            phase=phase, elapsed_s=now - self.t0,
            window_elapsed_s=None if self.window_t0 is None else w_end - self.window_t0,
            trace_bytes=_dir_bytes(self.out_dir),
            requests_done=self.load.done if self.load else 0,
            request_errors=self.load.errors if self.load else 0,
        ))


def _start_load(spec: CaptureSpec, clock: _Clock, stop: threading.Event,
                alive: Callable[[], bool] | None = None) -> _LoadRunner | None:
    """Start the load driver, if the spec has one; with ``alive`` (a command is starting the
    server), first wait until the load URL accepts connections."""
    if spec.load is None:
        return None
    if alive is not None:
        _wait_ready(spec.load.url, spec.ready_timeout_s, alive, stop)
    clock.load = _LoadRunner(spec.load)
    return clock.load


def _sleep_until(deadline: float | None, stop: threading.Event, clock: _Clock, phase: str,
                 alive: Callable[[], bool] = lambda: True) -> bool:
    """Sleep until ``deadline`` (monotonic s; None = until ``alive()`` turns false). True if stopped."""
    while deadline is None or time.monotonic() < deadline:
        if stop.is_set():
            return True
        if not alive():
            return False
        clock.tick(phase)
        time.sleep(0.05)
    return False


# -- torch / jax: injected hook ---------------------------------------------------------------------


def _hook_env(spec: CaptureSpec, out_dir: Path, control: Path, hook_dir: Path) -> dict[str, str]:
    shutil.copyfile(_HOOK_TEMPLATE, hook_dir / "sitecustomize.py")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(hook_dir), *filter(None, [env.get("PYTHONPATH")])])
    env["TRACEKIT_CAPTURE"] = json.dumps({
        "backend": spec.backend, "out_dir": str(out_dir), "control_dir": str(control),
        "warmup_steps": spec.warmup_steps,
    })
    return env


def _markers(control: Path, suffix: str) -> dict[int, dict[str, Any]]:
    found: dict[int, dict[str, Any]] = {}
    for p in control.glob(f"*.{suffix}"):
        try:
            found[int(p.name.split(".")[0])] = json.loads(p.read_text())
        except (ValueError, OSError):
            continue
    return found


def _capture_hooked(spec: CaptureSpec, out_dir: Path, stop: threading.Event, on_status: StatusFn | None,
                    ) -> CaptureResult:
    control = Path(tempfile.mkdtemp(prefix="tracekit-control-"))
    try:
        hook_dir = Path(tempfile.mkdtemp(prefix="tracekit-hook-"))
    except BaseException:
        shutil.rmtree(control, ignore_errors=True)
        raise
    result = CaptureResult(out_dir=out_dir, window_start_ns=None, window_end_ns=None, trace_files=[])
    try:
        # a command that is not found (or cannot start) leaves no temporary directory behind
        proc = _start_command(spec.command, _hook_env(spec, out_dir, control, hook_dir))
    except BaseException:
        shutil.rmtree(control, ignore_errors=True)
        shutil.rmtree(hook_dir, ignore_errors=True)
        raise
    load: _LoadRunner | None = None
    clock = _Clock(on_status, out_dir)

    def alive() -> bool:
        return proc.poll() is None

    try:
        clock.tick("starting", force=True)
        load = _start_load(spec, clock, stop, alive)
        # warm-up, then open the window
        result.interrupted = _sleep_until(time.monotonic() + spec.warmup_s, stop, clock, "warmup", alive)
        (control / "start").touch()
        # the window starts when the first process has its profiler running: bounded, for a
        # command that never imports the library (or never reaches --warmup-steps)
        opened_by = time.monotonic() + spec.ready_timeout_s
        first_failure: float | None = None
        while not result.interrupted and alive() and not _markers(control, "started"):
            if first_failure is None and _markers(control, "failed"):
                first_failure = time.monotonic()
            # one process failing to arm (a helper with an odd torch) need not sink the others:
            # give them a few seconds more before giving up
            if first_failure is not None and time.monotonic() > first_failure + _FAILURE_GRACE_S:
                break
            if time.monotonic() > opened_by:
                lib = "torch" if spec.backend == "torch" else "jax"
                steps = f" and ran {spec.warmup_steps} steps" if spec.warmup_steps else ""
                result.notes.append(f"no Python process of the command imported {lib}{steps} within "
                                    f"{spec.ready_timeout_s:g} s of the window opening (--ready-timeout)")
                break
            result.interrupted = _sleep_until(time.monotonic() + 0.05, stop, clock, "warmup", alive)
        started = _markers(control, "started")
        if started and not result.interrupted:
            # A server's processes arm at different times (the API process before the GPU
            # workers): those that start within a short settle time all belong to the window,
            # which opens when the last of them is profiling.
            settle = time.monotonic() + _SETTLE_S
            while time.monotonic() < settle and alive() and not stop.is_set():
                clock.tick("warmup")
                time.sleep(0.05)
            started = _markers(control, "started")
        if started:
            first = min(int(m["unix_ns"]) for m in started.values())
            result.window_start_ns = max(int(m["unix_ns"]) for m in started.values()
                                         if int(m["unix_ns"]) <= first + int(_SETTLE_S * 1e9))
            clock.window_t0 = time.monotonic() - (time.time_ns() - result.window_start_ns) / 1e9
            if not result.interrupted:
                end = None if spec.duration_s is None else clock.window_t0 + spec.duration_s
                result.interrupted = _sleep_until(end, stop, clock, "capturing", alive)
        # stop the load first (in-flight requests finish while the profilers still run), so that
        # no request's latency includes a process exporting its trace
        if load is not None:
            result.load = load.stop()
            load = None
        (control / "stop").touch()
        result.window_end_ns = time.time_ns()
        # let every process that started profiling export its trace
        deadline = time.monotonic() + spec.drain_timeout_s
        while True:
            started = _markers(control, "started")
            finished = set(_markers(control, "done")) | set(_markers(control, "failed"))
            if set(started) <= finished:
                break
            if time.monotonic() > deadline:
                missing = sorted(set(started) - finished)
                result.notes.append(f"processes {missing} did not finish exporting within "
                                    f"{spec.drain_timeout_s:g} s; their traces are left out")
                break
            if not alive() and time.monotonic() > deadline - spec.drain_timeout_s + 5:
                # the command is gone: a process that did not write 'done' by now never will
                result.notes.append(f"processes {sorted(set(started) - finished)} exited without a trace")
                break
            clock.tick("draining")
            time.sleep(0.05)
        for pid, m in sorted(_markers(control, "failed").items()):
            result.notes.append(f"process {pid}: {m.get('error')}")
        for _pid, m in sorted(_markers(control, "done").items()):
            p = Path(m["path"])
            if p.exists():
                result.trace_files.append(p)
    finally:
        if load is not None:
            load.close()
        if proc.poll() is None:
            result.command_returncode = _terminate(proc)
        else:
            result.command_returncode = proc.returncode
            _LIVE.discard(proc)
        shutil.rmtree(control, ignore_errors=True)
        shutil.rmtree(hook_dir, ignore_errors=True)
    if not result.trace_files:
        why = "; ".join(result.notes) or (
            f"the command exited with code {result.command_returncode} before a capture window "
            f"opened" if result.window_start_ns is None else "no process exported a trace")
        if result.window_start_ns is None and not result.notes and result.command_returncode == 0:
            lib = "torch" if spec.backend == "torch" else "jax"
            why = f"no Python process of the command imported {lib} and reached the capture window"
        raise CaptureError(" ".join(spec.command), f"no trace written: {why}")
    return result


# -- rocprof -------------------------------------------------------------------------------------------


def rocprof_command(spec: CaptureSpec, out_dir: Path, input_file: Path | None = None) -> list[str]:
    """The ``rocprofv3`` command line ``tracekit capture --backend rocprof`` runs (documented)."""
    cmd = ["rocprofv3", "--kernel-trace", "--memory-copy-trace", "--hip-runtime-trace", "--marker-trace",
           "--output-format", "rocpd", "csv", "-d", str(out_dir), "-o", "%hostname%/%pid%"]
    if spec.counters is not None:
        passes = COUNTER_PRESETS[spec.counters]
        if len(passes) == 1:
            cmd += ["--pmc", *passes[0]]
        else:
            if input_file is None:
                raise ValueError("a multi-pass counter preset needs an input file")
            cmd += ["-i", str(input_file)]
    if (spec.warmup_s or spec.duration_s) and spec.load is None:
        # start delay : collection time : repeat once, counted from each process's start. With a
        # load the window is timed from the load instead, so rocprofv3 collects the whole run and
        # the stored requests carry the window; without a duration, collect to the end (rocprofv3
        # reads a collection time of 0 as "stop at once", so a day stands for "to the end").
        ms = round(spec.duration_s * 1000) if spec.duration_s else 86_400_000
        cmd += ["--collection-period", f"{round(spec.warmup_s * 1000)}:{ms}:1",
                "--collection-period-unit", "msec"]
    return [*cmd, "--", *spec.command]


def _capture_rocprof(spec: CaptureSpec, out_dir: Path, stop: threading.Event, on_status: StatusFn | None,
                     ) -> CaptureResult:
    if shutil.which("rocprofv3") is None:
        raise CaptureError("rocprofv3", "not found on PATH: install ROCm's rocprofiler-sdk "
                                        "(rocprofv3 with rocpd output: ROCm ≥ 7.0) or add it to PATH")
    input_file = None
    if spec.counters is not None and len(COUNTER_PRESETS[spec.counters]) > 1:
        input_file = out_dir / f"tracekit-counters-{spec.counters}.json"
        input_file.write_text(json.dumps({"jobs": [{"pmc": p} for p in COUNTER_PRESETS[spec.counters]]},
                                         indent=1))
    cmd = rocprof_command(spec, out_dir, input_file)
    proc = _start_command(cmd, dict(os.environ))
    clock = _Clock(on_status, out_dir)
    load: _LoadRunner | None = None
    result = CaptureResult(out_dir=out_dir, window_start_ns=None, window_end_ns=None, trace_files=[])

    def alive() -> bool:
        return proc.poll() is None

    try:
        load = _start_load(spec, clock, stop, alive)
        result.interrupted = _sleep_until(time.monotonic() + spec.warmup_s, stop, clock, "warmup", alive)
        result.window_start_ns = time.time_ns()
        clock.window_t0 = time.monotonic()
        if not result.interrupted:
            end = None if spec.duration_s is None else time.monotonic() + spec.duration_s
            result.interrupted = _sleep_until(end, stop, clock, "capturing", alive)
        if load is not None:
            result.load = load.stop()
            load = None
        result.window_end_ns = time.time_ns()
    finally:
        if load is not None:
            load.close()
        # rocprofv3 writes its output when the application exits: stop the application gracefully
        result.command_returncode = _terminate(proc, grace_s=spec.drain_timeout_s) if alive() else proc.returncode
        _LIVE.discard(proc)
    if input_file is not None:
        input_file.unlink(missing_ok=True)
    result.trace_files = sorted(p for p in out_dir.rglob("*") if p.is_file())
    if not result.trace_files:
        raise CaptureError(" ".join(cmd), f"no trace written (rocprofv3 exited with code "
                                          f"{result.command_returncode})")
    return result


# -- remote profiler server (JAX / torch_xla) ------------------------------------------------------------


def _capture_attach(spec: CaptureSpec, out_dir: Path, stop: threading.Event, on_status: StatusFn | None,
                    ) -> CaptureResult:
    try:
        import grpc
    except ImportError:
        raise CaptureError(spec.attach or "attach", "--attach needs grpcio: pip install 'tracekit[jax]'") \
            from None
    from tracekit.parsers.proto import profiler_service_pb2 as ps

    assert spec.attach is not None and spec.duration_s is not None
    duration_ms = round(spec.duration_s * 1000)
    session = time.strftime("%Y_%m_%d_%H_%M_%S", time.gmtime())
    host = spec.attach.rpartition(":")[0]
    request = ps.ProfileRequest(
        duration_ms=duration_ms, max_events=0, tools=["xplane.pb"], emit_xspace=True,
        repository_root=str(out_dir), session_id=session, host_name=host,
        opts=ps.ProfileOptions(version=1, host_tracer_level=2, device_tracer_level=1, python_tracer_level=0,
                               enable_hlo_proto=True, duration_ms=duration_ms, session_id=session,
                               repository_path=str(out_dir)),
    )
    channel = grpc.insecure_channel(spec.attach, options=[("grpc.max_receive_message_length", -1)])
    call = channel.unary_unary("/tensorflow.ProfilerService/Profile",
                               request_serializer=ps.ProfileRequest.SerializeToString,
                               response_deserializer=ps.ProfileResponse.FromString)
    clock = _Clock(on_status, out_dir)
    result = CaptureResult(out_dir=out_dir, window_start_ns=None, window_end_ns=None, trace_files=[])
    load: _LoadRunner | None = None
    try:
        try:
            grpc.channel_ready_future(channel).result(timeout=min(spec.ready_timeout_s, 30.0))
        except grpc.FutureTimeoutError:
            raise CaptureError(spec.attach, "profiler server unreachable (is jax.profiler.start_server "
                                            "running on that port?)") from None
        load = _start_load(spec, clock, stop)
        if load is not None:
            result.interrupted = _sleep_until(time.monotonic() + spec.warmup_s, stop, clock, "warmup")
        result.window_start_ns = time.time_ns()
        clock.window_t0 = time.monotonic()
        future = call.future(request, timeout=spec.duration_s + 120)
        window_end = clock.window_t0 + spec.duration_s
        while not future.done():
            if stop.is_set():  # the server cannot end a Profile call early: say so, keep waiting
                result.interrupted = True
            if load is not None and (time.monotonic() >= window_end or stop.is_set()):
                result.load = load.stop()  # before the server exports: latencies stay clean
                load = None
            clock.tick("capturing")
            time.sleep(0.05)
        try:
            response = future.result()
        except grpc.RpcError as exc:
            raise CaptureError(spec.attach, f"profile request failed: {exc.code().name}: "
                                            f"{exc.details()}") from None
        result.window_end_ns = time.time_ns()
    finally:
        if load is not None:
            load.close()
        channel.close()
    if response.empty_trace or not response.xspace:
        raise CaptureError(spec.attach, "no trace written: the profiler server returned an empty trace")
    session_dir = out_dir / "plugins" / "profile" / session
    session_dir.mkdir(parents=True, exist_ok=True)
    path = session_dir / f"{host.replace(':', '_')}.xplane.pb"
    path.write_bytes(response.xspace)
    result.trace_files = [path]
    return result


# -- vLLM / SGLang profiler endpoints -------------------------------------------------------------------


def _post(url: str, body: dict[str, Any] | None, timeout_s: float) -> None:
    data = json.dumps(body).encode() if body is not None else b""
    req = urllib.request.Request(url, data=data, method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            resp.read()
    except urllib.error.HTTPError as exc:
        raise CaptureError(url, f"server answered HTTP {exc.code} {exc.reason} (is the profiler enabled? "
                                f"vLLM needs VLLM_TORCH_PROFILER_DIR set when it starts)") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise CaptureError(url, f"server unreachable: {reason}") from None


def _capture_server(spec: CaptureSpec, out_dir: Path, stop: threading.Event, on_status: StatusFn | None,
                    ) -> CaptureResult:
    assert spec.server is not None and spec.server_url is not None and spec.duration_s is not None
    env_name = SERVER_TRACE_DIR_ENV[spec.server]
    trace_dir = spec.server_trace_dir or (Path(os.environ[env_name]) if os.environ.get(env_name) else None)
    if trace_dir is None:
        raise CaptureError(spec.server_url, f"where does the server write traces? pass --trace-dir or set "
                                            f"{env_name} as the server has it")
    if not trace_dir.is_dir():
        raise CaptureError(trace_dir, "trace directory does not exist (it must be the server's "
                                      f"{env_name}, readable from here)")
    base = spec.server_url.rstrip("/")
    before = {p: p.stat().st_mtime_ns for p in trace_dir.rglob("*") if p.is_file()}
    clock = _Clock(on_status, out_dir)
    result = CaptureResult(out_dir=out_dir, window_start_ns=None, window_end_ns=None, trace_files=[])
    load: _LoadRunner | None = None
    started = False
    try:
        _wait_ready(base, 0.0, lambda: True, stop)  # the server is already up: one attempt
        load = _start_load(spec, clock, stop)
        if load is not None:
            result.interrupted = _sleep_until(time.monotonic() + spec.warmup_s, stop, clock, "warmup")
        body = {"output_dir": str(trace_dir)} if spec.server == "sglang" else None
        _post(base + "/start_profile", body, 60.0)
        started = True
        result.window_start_ns = time.time_ns()
        clock.window_t0 = time.monotonic()
        if not result.interrupted:
            result.interrupted = _sleep_until(time.monotonic() + spec.duration_s, stop, clock, "capturing")
        if load is not None:
            result.load = load.stop()
            load = None
        _post(base + "/stop_profile", None, spec.drain_timeout_s)
        started = False
        result.window_end_ns = time.time_ns()
        # the server may still be writing (vLLM exports asynchronously): wait for new files to settle
        deadline = time.monotonic() + spec.drain_timeout_s
        sizes: dict[Path, int] = {}
        while time.monotonic() < deadline:
            new = {p: p.stat().st_size for p in trace_dir.rglob("*")
                   if p.is_file() and before.get(p) != p.stat().st_mtime_ns and not p.name.endswith(".tmp")}
            if new and new == sizes:
                break
            sizes = new
            clock.tick("draining")
            time.sleep(0.5)
    finally:
        if load is not None:
            load.close()
        if started:
            try:
                _post(base + "/stop_profile", None, 10.0)
            except CaptureError:
                pass
    for p in sorted(sizes):
        dest = out_dir / p.relative_to(trace_dir)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(p, dest)
        result.trace_files.append(dest)
    if not result.trace_files:
        raise CaptureError(trace_dir, f"no trace written by the server within {spec.drain_timeout_s:g} s "
                                      "after /stop_profile")
    return result


# -- entry points ----------------------------------------------------------------------------------------


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
    if spec.command and spec.backend in ("torch", "jax"):
        exe = spec.command[0]  # said before anything is created: no directory left behind
        if shutil.which(exe) is None and not Path(exe).is_file():
            raise CaptureError(exe, "command not found")
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

    if spec.attach is not None:
        result = _capture_attach(spec, out_dir, stop, record)
    elif spec.server is not None:
        result = _capture_server(spec, out_dir, stop, record)
    elif spec.backend == "rocprof":
        result = _capture_rocprof(spec, out_dir, stop, record)
    else:
        result = _capture_hooked(spec, out_dir, stop, record)
    marks.append(("end", time.monotonic()))
    for (phase, t0), (_, t1) in itertools.pairwise(marks):
        result.timings[phase] = result.timings.get(phase, 0.0) + (t1 - t0)
    _write_capture_files(spec, result)
    return result


def _write_capture_files(spec: CaptureSpec, result: CaptureResult) -> None:
    """The window's request log (read back by ``tracekit ingest DIR``) and what was captured how."""
    from tracekit.ingest import REQUESTS_FILE

    requests = result.window_requests()
    if requests is not None:
        from tracekit.collectors.load import write_requests

        write_requests(requests.records, result.out_dir / REQUESTS_FILE)
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
            "endpoint": spec.load.endpoint, "requests_in_window": len(requests.records) if requests else 0},
        "notes": result.notes,
    }, indent=1) + "\n")


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
    run_tags.update(tags or {})
    if on_status is not None:
        w = ((result.window_end_ns or 0) - (result.window_start_ns or 0)) / 1e9 if result.window_start_ns else None
        on_status(CaptureStatus(phase="ingesting", elapsed_s=0.0, window_elapsed_s=w,
                                trace_bytes=_dir_bytes(result.out_dir)))
    # the capture directory holds the traces and the window's request log: one ingest, one
    # transaction, stores both (and the directory can be ingested into another store later)
    (res,) = ingest([result.out_dir], store, label=label, workload=workload, tags=run_tags)
    return result, res
