"""Capture a PyTorch profiler (Kineto) trace from inside a Python program.

Usage::

    from tracekit.collectors import torch_profile

    with torch_profile("traces/") as cap:
        for batch in loader:
            train_step(batch)
            cap.step()          # marks ProfilerStep#N boundaries
    print(cap.path)             # traces/<host>.<pid>.<unix_ms>.pt.trace.json.gz

The output is the Chrome-trace JSON that ``torch.profiler`` exports (the same
format TensorBoard's ``tensorboard_trace_handler`` writes), gzip-compressed,
with two additions by tracekit: a top-level ``"tracekit_collector"`` object
(collector name, torch version, capture start in Unix ms, activities, and the
number of events given FLOPs) and, when ``with_flops`` is on, ``args["flops"]``
on ``cpu_op`` events torch has a FLOP estimate for. Timestamps (``ts``) and
durations (``dur``) are in microseconds, as in all Chrome traces.

torch is an optional dependency (``pip install 'tracekit[torch]'``); it is only
imported when :func:`torch_profile` is entered.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import socket
import tempfile
import time
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # pragma: no cover - typing only
    from torch.profiler import ProfilerActivity, profile

__all__ = ["COLLECTOR_METADATA_KEY", "TORCH_MISSING_MESSAGE", "TorchCapture", "torch_profile"]

TORCH_MISSING_MESSAGE = "torch is not installed: pip install 'tracekit[torch]'"

#: Top-level key of the trace JSON holding tracekit's capture metadata (a JSON object).
COLLECTOR_METADATA_KEY = "tracekit_collector"

#: Suffix of every file written by :func:`torch_profile` when ``file_name`` is None.
TRACE_SUFFIX = ".pt.trace.json.gz"

ActivityName = Literal["cpu", "cuda", "xpu", "mtia", "hpu"]
"""Activity names accepted in a sequence passed as ``activities``."""


@dataclass
class TorchCapture:
    """Handle yielded by :func:`torch_profile`.

    Attributes:
        out_dir: Directory the trace is written into.
        started_unix_ms: Wall-clock time the capture started, in milliseconds
            since the Unix epoch (also used in the default file name).
        path: Path of the exported trace file. ``None`` until the ``with`` block
            has exited and the export succeeded.
        profiler: The underlying ``torch.profiler.profile`` object, for advanced
            use (``key_averages()``, ``add_metadata_json()``, ...). Only valid
            while the ``with`` block runs.
        steps: Number of times :meth:`step` has been called.
    """

    out_dir: Path
    started_unix_ms: int
    path: Path | None = None
    profiler: profile | None = field(default=None, repr=False)
    steps: int = 0

    def step(self) -> None:
        """Mark the end of one step (iteration) and the start of the next.

        Calls ``prof.step()``; the trace then holds one ``ProfilerStep#N``
        ``user_annotation`` event per step (N counts from 0). Note that the
        span after the last ``step()`` call up to the end of the ``with`` block
        is recorded as one more ``ProfilerStep#N``.

        Raises:
            RuntimeError: if called outside the ``with`` block.
        """
        if self.profiler is None:
            raise RuntimeError("TorchCapture.step() called outside the torch_profile() block")
        self.profiler.step()
        self.steps += 1


def _import_torch() -> Any:
    try:
        import torch
        import torch.profiler
    except ImportError as exc:  # pragma: no cover - exercised without torch
        raise RuntimeError(TORCH_MISSING_MESSAGE) from exc
    return torch


def _host_token() -> str:
    """Short host name, made safe to use as one dot-separated file-name field."""
    host = socket.gethostname().split(".", 1)[0] or "localhost"
    return re.sub(r"[^A-Za-z0-9_-]", "-", host)


def _resolve_activities(
    torch: Any, activities: Literal["auto", "cpu"] | Sequence[ActivityName | ProfilerActivity]
) -> list[ProfilerActivity]:
    pa = torch.profiler.ProfilerActivity
    if isinstance(activities, str):
        if activities == "auto":
            acts = [pa.CPU]
            # ROCm builds of torch also report through torch.cuda / ProfilerActivity.CUDA.
            if torch.cuda.is_available():
                acts.append(pa.CUDA)
            xpu = getattr(torch, "xpu", None)
            if xpu is not None and hasattr(pa, "XPU") and xpu.is_available():
                acts.append(pa.XPU)
            return acts
        if activities == "cpu":
            return [pa.CPU]
        raise ValueError(f"activities must be 'auto', 'cpu' or a sequence, got {activities!r}")
    by_name = {"cpu": "CPU", "cuda": "CUDA", "rocm": "CUDA", "hip": "CUDA", "xpu": "XPU",
               "mtia": "MTIA", "hpu": "HPU"}
    out: list[ProfilerActivity] = []
    for a in activities:
        if isinstance(a, str):
            attr = by_name.get(a.lower())
            if attr is None or not hasattr(pa, attr):
                raise ValueError(f"unknown profiler activity {a!r}")
            a = getattr(pa, attr)
        if a not in out:
            out.append(a)
    if not out:
        raise ValueError("activities must not be empty")
    return out


def _always_record(_step: int) -> Any:
    # A schedule that records every step. Passing *a* schedule (rather than none)
    # is what makes torch emit ProfilerStep#N annotations on prof.step().
    from torch.profiler import ProfilerAction

    return ProfilerAction.RECORD


@contextmanager
def torch_profile(
    out_dir: str | Path,
    *,
    record_shapes: bool = True,
    with_flops: bool = True,
    with_stack: bool = False,
    profile_memory: bool = False,
    activities: Literal["auto", "cpu"] | Sequence[ActivityName | ProfilerActivity] = "auto",
    file_name: str | None = None,
) -> Iterator[TorchCapture]:
    """Profile the enclosed block with ``torch.profiler`` and export the trace.

    The whole block is recorded (no wait/warmup/active schedule); call
    :meth:`TorchCapture.step` at iteration boundaries to get ``ProfilerStep#N``
    annotations. On exit the Chrome trace is written to
    ``out_dir/<host>.<pid>.<unix_ms>.pt.trace.json.gz`` (gzip-compressed Kineto
    JSON; ``<unix_ms>`` is the capture start time in ms since the Unix epoch and
    ``<host>`` the short host name) and its path is stored in
    :attr:`TorchCapture.path`. If the block raises, the partial trace is still
    exported (best effort) and the exception propagates.

    Args:
        out_dir: Directory to write into; created if missing.
        record_shapes: Record operator input shapes and dtypes (``Input Dims`` /
            ``Input type`` args on ``cpu_op`` events). Needed for FLOP counts.
        with_flops: Estimate FLOPs of matmul/conv-like operators (aten::mm,
            addmm, bmm, conv2d, ...) from their input shapes. The estimate is
            written as ``args["flops"]`` (floating-point operations for that
            one call, an int) on the matching ``cpu_op`` events; torch itself
            computes it but does not export it, so tracekit joins it in on
            ``External id``.
        with_stack: Record Python call stacks (adds ``python_function`` events;
            makes traces several times larger).
        profile_memory: Track tensor allocations (``[memory]`` instant events;
            bytes).
        activities: ``"auto"`` = CPU, plus CUDA (also used by ROCm builds) or
            XPU when that device is available; ``"cpu"`` = CPU only; or an
            explicit sequence of names (``"cpu"``, ``"cuda"``, ``"xpu"``, ...)
            and/or ``torch.profiler.ProfilerActivity`` members.
        file_name: Override the output file name (relative to ``out_dir``;
            an existing file of that name is overwritten). A
            name ending in ``.gz`` is gzip-compressed, anything else is written
            as plain JSON.

    Yields:
        A :class:`TorchCapture`; ``path`` is filled in after the block exits.

    Raises:
        RuntimeError: if torch is not installed.
        ValueError: for an unknown activity.
    """
    torch = _import_torch()
    acts = _resolve_activities(torch, activities)

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    started_ms = time.time_ns() // 1_000_000
    if file_name:
        target = out / file_name
        target.parent.mkdir(parents=True, exist_ok=True)
    else:
        stamp = started_ms  # two captures in the same ms must not overwrite each other
        while (target := out / f"{_host_token()}.{os.getpid()}.{stamp}{TRACE_SUFFIX}").exists():
            stamp += 1

    prof = torch.profiler.profile(
        activities=acts,
        schedule=_always_record,
        record_shapes=record_shapes,
        with_flops=with_flops,
        with_stack=with_stack,
        profile_memory=profile_memory,
    )
    capture = TorchCapture(out_dir=out, started_unix_ms=started_ms, profiler=prof)
    failed = False
    prof.start()
    try:
        prof.add_metadata_json(
            COLLECTOR_METADATA_KEY,
            json.dumps(
                {
                    "collector": "tracekit.collectors.torch_profile",
                    "torch_version": str(torch.__version__),
                    "started_unix_ms": started_ms,
                    "activities": [str(a).rsplit(".", 1)[-1] for a in acts],
                }
            ),
        )
        yield capture
    except BaseException:
        failed = True
        raise
    finally:
        try:
            prof.stop()
            _export(prof, target, with_flops=with_flops)
            capture.path = target
        except Exception as exc:
            if not failed:
                raise
            warnings.warn(f"torch_profile: could not export partial trace: {exc!r}", stacklevel=3)
        finally:
            capture.profiler = None


def _flops_by_external_id(prof: Any) -> dict[int, tuple[str, int]]:
    """Map Kineto correlation id ("External id" in the trace) -> (op name, flops)."""
    results = getattr(prof.profiler, "kineto_results", None) if prof.profiler else None
    if results is None:
        return {}
    out: dict[int, tuple[str, int]] = {}
    for ev in results.events():
        flops = ev.flops()
        if flops and flops > 0:
            out[int(ev.correlation_id())] = (ev.name(), int(flops))
    return out


def _inject_flops(trace: dict[str, Any], flops: dict[int, tuple[str, int]]) -> int:
    """Add ``args["flops"]`` to ``cpu_op`` events; returns how many were annotated."""
    n = 0
    for ev in trace.get("traceEvents", ()):
        if ev.get("cat") != "cpu_op":
            continue
        args = ev.get("args")
        if not isinstance(args, dict) or "flops" in args:
            continue
        hit = flops.get(args.get("External id"))  # type: ignore[arg-type]
        if hit is not None and hit[0] == ev.get("name"):
            args["flops"] = hit[1]
            n += 1
    return n


def _export(prof: Any, target: Path, *, with_flops: bool) -> None:
    """Write the Chrome trace to ``target`` (gzip when it ends in ``.gz``).

    torch (2.13 at least) computes per-op FLOP estimates when ``with_flops`` is
    set but does not write them into the Chrome trace, so they are joined back
    in here from the Kineto events on ``External id`` (== correlation id) as
    ``args["flops"]`` of the matching ``cpu_op`` event.
    """
    flops = _flops_by_external_id(prof) if with_flops else {}
    gz = target.name.endswith(".gz")
    fd, tmp_name = tempfile.mkstemp(prefix=".tracekit-", suffix=".json", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        prof.export_chrome_trace(str(tmp))  # plain JSON (name ends in .json)
        trace: dict[str, Any] | None = None
        if flops:
            try:
                with tmp.open("rb") as f:
                    trace = json.load(f)
            except ValueError as exc:  # keep torch's bytes if they are not valid JSON
                warnings.warn(f"torch_profile: trace not valid JSON, flops not added: {exc}", stacklevel=4)
        opener = gzip.open if gz else open
        if trace is not None:
            n = _inject_flops(trace, flops)
            meta = trace.get(COLLECTOR_METADATA_KEY)
            if isinstance(meta, dict):
                meta["flops_events"] = n
            trace["traceName"] = str(target)
            with opener(target, "wt", encoding="utf-8") as fout:
                json.dump(trace, fout, separators=(",", ":"))
        else:
            with tmp.open("rb") as fin, opener(target, "wb") as fout:
                shutil.copyfileobj(fin, fout)
    finally:
        tmp.unlink(missing_ok=True)
