"""vllm / sglang server: ``POST /start_profile`` … ``POST /stop_profile`` on a running server,
then the traces it wrote into its profiler directory (``VLLM_TORCH_PROFILER_DIR`` /
``SGLANG_TORCH_PROFILER_DIR``) during the window."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracekit.collectors.capture_backends import BackendDefaults
from tracekit.collectors.capture_backends.spec import (
    SERVER_TRACE_DIR_ENV,
    CaptureResult,
    CaptureSpec,
    StatusFn,
)
from tracekit.collectors.capture_backends.window import (
    Clock,
    LoadRunner,
    sleep_until,
    start_load,
    wait_ready,
    window_opened,
)
from tracekit.errors import CaptureError


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


def _trace_dir(spec: CaptureSpec) -> Path:
    """The server's profiler directory: ``server_trace_dir``, else the server's env var as set in
    tracekit's own environment."""
    assert spec.server is not None and spec.server_url is not None
    env_name = SERVER_TRACE_DIR_ENV[spec.server]
    trace_dir = spec.server_trace_dir or (Path(os.environ[env_name]) if os.environ.get(env_name) else None)
    if trace_dir is None:
        raise CaptureError(spec.server_url, f"where does the server write traces? pass --trace-dir or set "
                                            f"{env_name} as the server has it")
    if not trace_dir.is_dir():
        raise CaptureError(trace_dir, "trace directory does not exist (it must be the server's "
                                      f"{env_name}, readable from here)")
    return trace_dir


def _new_traces(trace_dir: Path, before: dict[Path, int], deadline: float, clock: Clock) -> dict[Path, int]:
    """The files of ``trace_dir`` new or changed since ``before`` (path → mtime, ns), with their
    sizes (bytes), once two looks 0.5 s apart agree or at ``deadline`` (monotonic s): the server
    may still be writing (vLLM exports asynchronously)."""
    sizes: dict[Path, int] = {}
    while time.monotonic() < deadline:
        new = {p: p.stat().st_size for p in trace_dir.rglob("*")
               if p.is_file() and before.get(p) != p.stat().st_mtime_ns and not p.name.endswith(".tmp")}
        if new and new == sizes:
            break
        sizes = new
        clock.tick("draining")
        time.sleep(0.5)
    return sizes


def _capture_server(spec: CaptureSpec, out_dir: Path, stop: threading.Event, on_status: StatusFn | None,
                    ) -> CaptureResult:
    assert spec.server_url is not None and spec.duration_s is not None
    trace_dir = _trace_dir(spec)
    base = spec.server_url.rstrip("/")
    before = {p: p.stat().st_mtime_ns for p in trace_dir.rglob("*") if p.is_file()}
    clock = Clock(on_status, out_dir)
    result = CaptureResult(out_dir=out_dir, window_start_ns=None, window_end_ns=None, trace_files=[])
    load: LoadRunner | None = None
    started = False
    try:
        wait_ready(base, 0.0, lambda: True, stop)  # the server is already up: one attempt
        load = start_load(spec, clock, stop)
        if load is not None:
            result.interrupted = sleep_until(time.monotonic() + spec.warmup_s, stop, clock, "warmup")
        body = {"output_dir": str(trace_dir)} if spec.server == "sglang" else None
        _post(base + "/start_profile", body, 60.0)
        started = True
        result.window_start_ns = time.time_ns()
        window_opened(clock, result.window_start_ns)
        clock.window_t0 = time.monotonic()
        if not result.interrupted:
            result.interrupted = sleep_until(time.monotonic() + spec.duration_s, stop, clock, "capturing")
        if load is not None:
            result.load = load.stop()
            load = None
        _post(base + "/stop_profile", None, spec.drain_timeout_s)
        started = False
        result.window_end_ns = time.time_ns()
        sizes = _new_traces(trace_dir, before, time.monotonic() + spec.drain_timeout_s, clock)
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


@dataclass(frozen=True)
class ServerBackend(BackendDefaults):
    """A running vLLM / SGLang server's profiler endpoints (``spec.server``, ``spec.server_url``)."""

    def check(self, spec: CaptureSpec) -> None:
        """``server_url`` must be an http(s) URL."""
        url = urllib.parse.urlparse(spec.server_url or "")
        if url.scheme not in ("http", "https") or not url.netloc:
            raise CaptureError(spec.server_url or spec.server or "capture", "expected the server's http(s) URL")

    def run(self, spec: CaptureSpec, out_dir: Path, stop: threading.Event, on_status: StatusFn | None,
            ) -> CaptureResult:
        """/start_profile, the window, /stop_profile; the new traces copied into ``out_dir``."""
        return _capture_server(spec, out_dir, stop, on_status)


SERVER = ServerBackend("server")
