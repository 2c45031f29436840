"""rocprof with a command: ``rocprofv3`` wrapped with inference defaults (kernel, memory-copy,
HIP runtime and marker traces; rocpd + CSV output; ``%pid%`` in the output name) and optional
counter presets (:data:`~tracekit.collectors.capture_backends.spec.COUNTER_PRESETS`)."""

from __future__ import annotations

import json
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

from tracekit.collectors.capture_backends import BackendDefaults, window
from tracekit.collectors.capture_backends.spec import COUNTER_PRESETS, CaptureResult, CaptureSpec, StatusFn
from tracekit.errors import CaptureError


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
    result = window.run_wrapped(cmd, spec, out_dir, stop, on_status)
    if input_file is not None:
        input_file.unlink(missing_ok=True)
    if not result.trace_files:
        raise CaptureError(" ".join(cmd), f"no trace written (rocprofv3 exited with code "
                                          f"{result.command_returncode})")
    return result


@dataclass(frozen=True)
class RocprofBackend(BackendDefaults):
    """The command wrapped in ``rocprofv3`` (:func:`rocprof_command`); reads ``counters``."""

    def check(self, spec: CaptureSpec) -> None:
        """A known counter preset; a multi-pass one only on a workload that ends by itself."""
        if spec.counters is None:
            return
        if spec.counters not in COUNTER_PRESETS:
            raise CaptureError("--counters", f"unknown preset {spec.counters!r} "
                                             f"(known: {', '.join(COUNTER_PRESETS)})")
        passes = len(COUNTER_PRESETS[spec.counters])
        if passes > 1 and (spec.load is not None or spec.duration_s is not None):
            raise CaptureError("--counters", f"preset {spec.counters!r} needs {passes} "
                                             "passes, i.e. one run of the application each: use it on a "
                                             "workload that ends by itself (no --load, no --duration), or "
                                             "the one-pass preset 'stalls'")

    def run(self, spec: CaptureSpec, out_dir: Path, stop: threading.Event, on_status: StatusFn | None,
            ) -> CaptureResult:
        """Run the command under rocprofv3 and collect what it wrote into ``out_dir``."""
        return _capture_rocprof(spec, out_dir, stop, on_status)


ROCPROF = RocprofBackend("rocprof", frozenset({"counters"}))  # rocprofv3 is looked for when it runs
