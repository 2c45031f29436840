"""attach: ``HOST:PORT`` of a process running the JAX / torch_xla profiler server
(``jax.profiler.start_server(port)``): one ``ProfilerService.Profile`` gRPC call with
``emit_xspace``, as XProf's "capture profile" does; the returned XSpace is saved as
``<host>.xplane.pb``."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

from tracekit.collectors.capture_backends import BackendDefaults
from tracekit.collectors.capture_backends.spec import CaptureResult, CaptureSpec, StatusFn
from tracekit.collectors.capture_backends.window import (
    Clock,
    LoadRunner,
    sleep_until,
    start_load,
    window_opened,
)
from tracekit.errors import CaptureError


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
    clock = Clock(on_status, out_dir)
    result = CaptureResult(out_dir=out_dir, window_start_ns=None, window_end_ns=None, trace_files=[])
    load: LoadRunner | None = None
    try:
        try:
            grpc.channel_ready_future(channel).result(timeout=min(spec.ready_timeout_s, 30.0))
        except grpc.FutureTimeoutError:
            raise CaptureError(spec.attach, "profiler server unreachable (is jax.profiler.start_server "
                                            "running on that port?)") from None
        load = start_load(spec, clock, stop)
        if load is not None:
            result.interrupted = sleep_until(time.monotonic() + spec.warmup_s, stop, clock, "warmup")
        result.window_start_ns = time.time_ns()
        window_opened(clock, result.window_start_ns)
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


@dataclass(frozen=True)
class AttachBackend(BackendDefaults):
    """A remote JAX / torch_xla profiler server (``spec.attach`` = HOST:PORT)."""

    def check(self, spec: CaptureSpec) -> None:
        """``attach`` must be HOST:PORT."""
        assert spec.attach is not None
        host, _, port = spec.attach.rpartition(":")
        if not host or not port.isdigit():
            raise CaptureError(spec.attach, "expected HOST:PORT of a profiler server")

    def run(self, spec: CaptureSpec, out_dir: Path, stop: threading.Event, on_status: StatusFn | None,
            ) -> CaptureResult:
        """One ``ProfilerService.Profile`` call; its XSpace saved under ``out_dir``."""
        return _capture_attach(spec, out_dir, stop, on_status)


ATTACH = AttachBackend("attach")
