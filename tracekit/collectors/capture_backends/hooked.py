"""torch / jax with a command: CMD runs with a startup hook injected through ``PYTHONPATH``
(:mod:`tracekit.collectors._capture_sitecustomize`), so its code is not edited. Every Python
process CMD starts arms the profiler when it imports torch (jax); tracekit opens and closes the
capture window with marker files, and each process writes one trace."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracekit.collectors.capture_backends import BackendDefaults
from tracekit.collectors.capture_backends.spec import CaptureResult, CaptureSpec, StatusFn
from tracekit.collectors.capture_backends.window import (
    LIVE,
    Clock,
    LoadRunner,
    sleep_until,
    start_command,
    start_load,
    terminate,
    window_opened,
)
from tracekit.errors import CaptureError

_HOOK_TEMPLATE = Path(__file__).resolve().parent.parent / "_capture_sitecustomize.py"
#: Seconds after the first process starts profiling during which later ones still count as
#: opening the window together (the window opens at the last of them).
_SETTLE_S = 1.0
#: Seconds to keep waiting for a process to start profiling after another one failed to arm.
_FAILURE_GRACE_S = 5.0


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


@dataclass(frozen=True)
class HookedBackend(BackendDefaults):
    """torch or jax (``name``): the profiler armed in every Python process of the command by the
    injected startup hook. torch alone counts ``warmup_steps``."""

    def preflight(self, spec: CaptureSpec) -> None:
        """The command must exist: said before anything is created (no directory left behind)."""
        exe = spec.command[0]
        if shutil.which(exe) is None and not Path(exe).is_file():
            raise CaptureError(exe, "command not found")

    def run(self, spec: CaptureSpec, out_dir: Path, stop: threading.Event, on_status: StatusFn | None,
            ) -> CaptureResult:
        """Run the command with the hook; open and close the window with marker files."""
        return _capture_hooked(spec, out_dir, stop, on_status)


TORCH = HookedBackend("torch", frozenset({"warmup_steps"}))
JAX = HookedBackend("jax")


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
        proc = start_command(spec.command, _hook_env(spec, out_dir, control, hook_dir))
    except BaseException:
        shutil.rmtree(control, ignore_errors=True)
        shutil.rmtree(hook_dir, ignore_errors=True)
        raise
    load: LoadRunner | None = None
    clock = Clock(on_status, out_dir)

    def alive() -> bool:
        return proc.poll() is None

    try:
        clock.tick("starting", force=True)
        load = start_load(spec, clock, stop, alive)
        # warm-up, then open the window
        result.interrupted = sleep_until(time.monotonic() + spec.warmup_s, stop, clock, "warmup", alive)
        (control / "start").touch()
        _open_window(spec, control, result, stop, clock, alive)
        # stop the load first (in-flight requests finish while the profilers still run), so that
        # no request's latency includes a process exporting its trace
        if load is not None:
            result.load = load.stop()
            load = None
        (control / "stop").touch()
        result.window_end_ns = time.time_ns()
        _drain(spec, control, result, clock, alive)
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
            result.command_returncode = terminate(proc)
        else:
            result.command_returncode = proc.returncode
            LIVE.discard(proc)
        shutil.rmtree(control, ignore_errors=True)
        shutil.rmtree(hook_dir, ignore_errors=True)
    if not result.trace_files:
        raise CaptureError(" ".join(spec.command), f"no trace written: {_no_trace_reason(spec, result)}")
    return result


def _library(spec: CaptureSpec) -> str:
    return "torch" if spec.backend == "torch" else "jax"


def _open_window(spec: CaptureSpec, control: Path, result: CaptureResult, stop: threading.Event, clock: Clock,
                 alive: Callable[[], bool]) -> None:
    """Wait for the processes to arm (after ``start`` was touched), open the window at the last
    of those that armed together, and keep it open for ``duration_s`` (or until the command
    exits, or ``stop``). Sets ``window_start_ns`` (None when no process armed), ``interrupted``
    and notes."""
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
            steps = f" and ran {spec.warmup_steps} steps" if spec.warmup_steps else ""
            result.notes.append(f"no Python process of the command imported {_library(spec)}{steps} within "
                                f"{spec.ready_timeout_s:g} s of the window opening (--ready-timeout)")
            break
        result.interrupted = sleep_until(time.monotonic() + 0.05, stop, clock, "warmup", alive)
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
        window_opened(clock, result.window_start_ns)
        if not result.interrupted:
            end = None if spec.duration_s is None else clock.window_t0 + spec.duration_s
            result.interrupted = sleep_until(end, stop, clock, "capturing", alive)


def _drain(spec: CaptureSpec, control: Path, result: CaptureResult, clock: Clock, alive: Callable[[], bool]) -> None:
    """Let every process that started profiling export its trace (after ``stop`` was touched),
    within ``drain_timeout_s``; notes say which did not."""
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


def _no_trace_reason(spec: CaptureSpec, result: CaptureResult) -> str:
    """Why a capture that wrote no trace wrote none, for its error."""
    why = "; ".join(result.notes) or (
        f"the command exited with code {result.command_returncode} before a capture window "
        f"opened" if result.window_start_ns is None else "no process exported a trace")
    if result.window_start_ns is None and not result.notes and result.command_returncode == 0:
        why = f"no Python process of the command imported {_library(spec)} and reached the capture window"
    return why
