"""What every capture backend shares: starting and stopping the profiled command, the load
driver's thread, the wall clock that reports progress, and waits that a stop request ends."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracekit.collectors.capture_backends.spec import CaptureResult, CaptureSpec, CaptureStatus, StatusFn
from tracekit.errors import CaptureError

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.collectors.load import LoadProgress, LoadResult, LoadSpec
    from tracekit.collectors.load.records import SteadyState


def dir_bytes(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total



def wait_ready(url: str, timeout_s: float, alive: Callable[[], bool], stop: threading.Event) -> None:
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


class LoadRunner:
    """Runs the load driver in a thread, and scrapes the server's Prometheus ``/metrics`` meanwhile
    (when it has one); ``stop()`` ends both gracefully and returns the load's result, the scrapes
    in its ``server_metrics``.

    Steady state (:meth:`wait_steady`, asked for by a sweep): the window opens once every request
    sent before the warm-up ended has completed. The cold start (first prefills, compiles, a
    backlog of arrivals queued while the server was slow) has then passed through the server, and
    the requests in flight are ones that started in the warm server."""

    def __init__(self, spec: LoadSpec, scrape_interval_s: float = 0.5) -> None:
        from tracekit.collectors.load import run_load
        from tracekit.collectors.load.prometheus import Scraper, metrics_url

        self._finish = threading.Event()
        self.result: LoadResult | None = None
        self.error: BaseException | None = None
        self.done = 0
        self.errors = 0
        self.sent = 0
        self.notes: list[str] = []
        #: a sweep point's steady state (:data:`~tracekit.collectors.load.records.SteadyState`;
        #: None: not asked for)
        self.steady: SteadyState | None = None
        self._window_open_ns: int | None = None
        self._closed_ns: int | None = None  # when stop() closed the window (Unix ns)
        self._scraper = Scraper(metrics_url(spec.url), interval_s=scrape_interval_s)
        self._scraper.start()

        def progress(p: LoadProgress) -> None:
            self.done = p.requests_done
            self.errors = p.errors
            self.sent = p.requests_sent

        def target() -> None:
            try:
                self.result = run_load(spec, on_progress=progress, finish=self._finish)
            except BaseException as exc:  # noqa: BLE001 - reported by stop()
                self.error = exc

        self._thread = threading.Thread(target=target, name="tracekit-load", daemon=True)
        self._thread.start()

    def wait_steady(self, stop: threading.Event, alive: Callable[[], bool], tick: Callable[[], None],
                    timeout_s: float) -> bool:
        """Wait until every request sent so far has completed (see the class docstring), at most
        ``timeout_s`` seconds; True if ``stop`` was set. Sets :attr:`steady` (``reached``,
        ``not_reached`` with a note saying why, or ``interrupted``)."""
        sent0, t0 = self.sent, time.monotonic()
        while self.done < sent0 and self._thread.is_alive():
            if stop.is_set() or not alive():
                self.steady = "interrupted"
                return stop.is_set()
            if time.monotonic() - t0 > timeout_s:
                self.steady = "not_reached"
                self.notes.append(f"the load had not reached steady state {timeout_s:g} s after the "
                                  f"warm-up ({self.done} of the {sent0} requests sent during it completed): the "
                                  "window opened anyway")
                return False
            tick()
            time.sleep(0.05)
        if self.done >= sent0:
            self.steady = "reached"
        else:
            self.steady = "not_reached"
            self.notes.append("the load ended while the window waited for its steady state")
        return False

    def window_opens(self, at_ns: int | None = None) -> None:
        """The window opened at ``at_ns`` (Unix ns; default now): the open loop's arrivals and
        completions are counted from there (:meth:`stop`). Scrape the server now: the counters'
        baseline."""
        self._window_open_ns = time.time_ns() if at_ns is None else at_ns
        self._scraper.scrape_once()

    def _past_capacity(self, result: LoadResult) -> None:
        """An open loop whose requests arrived faster than they completed in the window, beyond
        chance (:func:`~tracekit.collectors.load.records.past_capacity`): ``past_capacity``, and
        a note with the counts."""
        from tracekit.collectors.load.records import past_capacity

        closed_ns = self._closed_ns
        if self.steady != "reached" or self._window_open_ns is None or closed_ns is None:
            return
        counts = result.backlog_growth(self._window_open_ns, closed_ns)
        if counts is not None and past_capacity(*counts):
            arrived, completed = counts
            self.steady = "past_capacity"
            capped = result.spec.concurrency
            where = (f" (with --concurrency {capped} the excess waited in the client for a free slot)" if capped
                     else "")
            self.notes.append(
                f"past capacity: {arrived} requests arrived in the window's {(closed_ns - self._window_open_ns) / 1e9:.1f} s "
                f"and {completed} completed, so the queue grew by {arrived - completed}{where}: no steady state at "
                "this rate")

    def stop(self) -> LoadResult | None:
        """No new requests; wait for those in flight to complete (each bounded by its timeout).
        The server is scraped first, while the load still runs: the end of the interval its
        throughput is measured over (view ``server_metric_summary``). Raises what the load driver
        raised."""
        self._scraper.scrape_once()
        self._closed_ns = time.time_ns()
        self.close()
        if self.error is not None:
            raise self.error
        return self.result

    def close(self) -> None:
        """Like :meth:`stop`, for clean-up paths: never raises."""
        self._finish.set()
        self._thread.join()
        log = self._scraper.stop()
        if self.result is not None:
            from tracekit.server_metric_rows import Scrape, label_text

            self.result.server_metrics = [
                Scrape(t, tuple((x.name, label_text(x.labels), x.value) for x in samples)) for t, samples in log.scrapes]
            self.result.server_metrics_errors = list(log.errors)
            self._past_capacity(self.result)
            self.result.notes.extend(self.notes)
            self.result.steady_state = self.steady


def terminate(proc: subprocess.Popen[bytes], grace_s: float = 10.0) -> int:
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
    LIVE.discard(proc)
    return rc


def stderr_fd() -> int | None:
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # stderr replaced by an object without a file
        return None


#: Lines the profiled command's libraries print that say nothing to the user: libkineto's
#: ``USDT:<time> <pid>:<tid> SyncActivityProfilerHandler.cpp:59] profiler_stop`` probes.
NOISE = re.compile(rb"^USDT:\S+ \S+ \S+ \S+\] profiler_(start|stop)\s*$")


def forward_stderr(pipe: Any) -> None:
    """Copy the command's stderr to ours, line by line, leaving out :data:`NOISE`."""
    out = getattr(sys.stderr, "buffer", None)
    for line in iter(pipe.readline, b""):
        if NOISE.match(line):
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
LIVE: set[subprocess.Popen[bytes]] = set()


def terminate_children() -> None:
    """Stop every command a capture started that is still running (used when a capture is
    aborted: a second Ctrl-C)."""
    for proc in list(LIVE):
        terminate(proc, grace_s=5.0)
        LIVE.discard(proc)


def start_command(command: Sequence[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    exe = command[0]
    if shutil.which(exe, path=env.get("PATH")) is None and not Path(exe).is_file():
        raise CaptureError(exe, "command not found")
    try:
        # own session: a Ctrl-C in the terminal reaches tracekit only, which then closes the
        # window, lets the processes export their traces, and stops the command itself
        # the command's stdout goes to our stderr: tracekit's stdout carries its own result (--json)
        proc = subprocess.Popen(list(command), env=env, start_new_session=True, stdout=stderr_fd(),
                                stderr=subprocess.PIPE)
        LIVE.add(proc)
        assert proc.stderr is not None
        threading.Thread(target=forward_stderr, args=(proc.stderr,), name="tracekit-child-stderr",
                         daemon=True).start()
        return proc
    except OSError as exc:
        raise CaptureError(exe, f"cannot start: {exc.strerror or exc}") from None


class Clock:
    def __init__(self, on_status: StatusFn | None, out_dir: Path, load: LoadRunner | None = None) -> None:
        self.t0 = time.monotonic()
        self.on_status = on_status
        self.out_dir = out_dir
        self.load = load
        self.window_t0: float | None = None
        self.window_t1: float | None = None  # set when the window closes: its length stops growing
        self.steady = False  # the warm-up also waits for the load's steady state (a sweep's points)
        self.steady_timeout_s = 120.0  # … at most this long (s)
        self.armed = False  # the steady-state wait has run (it runs once, after the first warm-up)
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
            trace_bytes=dir_bytes(self.out_dir),
            requests_done=self.load.done if self.load else 0,
            request_errors=self.load.errors if self.load else 0,
        ))


def start_load(spec: CaptureSpec, clock: Clock, stop: threading.Event,
                alive: Callable[[], bool] | None = None) -> LoadRunner | None:
    """Start the load driver, if the spec has one; with ``alive`` (a command is starting the
    server), first wait until the load URL accepts connections."""
    if spec.load is None:
        return None
    if alive is not None:
        wait_ready(spec.load.url, spec.ready_timeout_s, alive, stop)
    clock.load = LoadRunner(spec.load)
    clock.steady, clock.steady_timeout_s = spec.steady_state, spec.steady_timeout_s
    return clock.load


def sleep_until(deadline: float | None, stop: threading.Event, clock: Clock, phase: str,
                 alive: Callable[[], bool] = lambda: True) -> bool:
    """Sleep until ``deadline`` (monotonic s; None = until ``alive()`` turns false). True if stopped."""
    while deadline is None or time.monotonic() < deadline:
        if stop.is_set():
            return True
        if not alive():
            return False
        clock.tick(phase)
        time.sleep(0.05)
    if phase == "warmup" and clock.load is not None and not clock.armed:
        # the first warm-up to end waits for the load's steady state, once: a backend that then
        # polls for its profiler in more "warmup" sleeps does not wait (or judge) again
        clock.armed = True
        return clock.steady and clock.load.wait_steady(stop, alive, lambda: clock.tick(phase),
                                                       clock.steady_timeout_s)
    return False


def window_opened(clock: Clock, at_ns: int) -> None:
    """The capture window opened at ``at_ns`` (Unix ns): the load's window count starts there and
    the server is scraped (the counters' baseline). Each backend calls it once, as its profiler
    starts."""
    if clock.load is not None:
        clock.load.window_opens(at_ns)



def run_wrapped(cmd: Sequence[str], spec: CaptureSpec, out_dir: Path, stop: threading.Event,
                on_status: StatusFn | None) -> CaptureResult:
    """Run a profiler that wraps the workload (``rocprofv3 … -- CMD``, ``nsys profile … CMD``):
    start it, run the load (if any) and the warm-up and capture phases, then stop it gracefully —
    such profilers write their files when the application exits — and list what it wrote under
    ``out_dir`` (``trace_files``; empty when nothing was written)."""
    proc = start_command(cmd, dict(os.environ))
    clock = Clock(on_status, out_dir)
    load: LoadRunner | None = None
    result = CaptureResult(out_dir=out_dir, window_start_ns=None, window_end_ns=None, trace_files=[])

    def alive() -> bool:
        return proc.poll() is None

    try:
        load = start_load(spec, clock, stop, alive)
        result.interrupted = sleep_until(time.monotonic() + spec.warmup_s, stop, clock, "warmup", alive)
        result.window_start_ns = time.time_ns()
        window_opened(clock, result.window_start_ns)
        clock.window_t0 = time.monotonic()
        if not result.interrupted:
            end = None if spec.duration_s is None else time.monotonic() + spec.duration_s
            result.interrupted = sleep_until(end, stop, clock, "capturing", alive)
        if load is not None:
            result.load = load.stop()
            load = None
        result.window_end_ns = time.time_ns()
    finally:
        if load is not None:
            load.close()
        result.command_returncode = terminate(proc, grace_s=spec.drain_timeout_s) if alive() else proc.returncode
        LIVE.discard(proc)
    result.trace_files = sorted(p for p in out_dir.rglob("*") if p.is_file())
    return result
