"""nsys with a command: ``nsys profile`` wrapped with inference defaults (CUDA and NVTX traces,
CUDA graphs traced node by node so their kernels are in the report, no CPU sampling or context
switches, child processes followed, the SQLite export written beside the report)."""

from __future__ import annotations

import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

from tracekit.collectors.capture_backends import BackendDefaults, window
from tracekit.collectors.capture_backends.spec import CaptureResult, CaptureSpec, StatusFn
from tracekit.errors import CaptureError


def nsys_command(spec: CaptureSpec, out_dir: Path) -> list[str]:
    """The ``nsys profile`` command line ``tracekit capture --backend nsys`` runs (documented in
    docs/capture.md). Every option is ``--name=value``, so the workload's own arguments follow
    without a separator, as nsys expects."""
    cmd = ["nsys", "profile", "--trace=cuda,nvtx", "--cuda-graph-trace=node", "--sample=none", "--cpuctxsw=none",
           "--trace-fork-before-exec=true", "--export=sqlite", "--force-overwrite=true",
           f"--output={out_dir / 'report-%h-%p'}"]
    if (spec.warmup_s or spec.duration_s) and spec.load is None:
        # the window counts from the application's start; with a load, nsys collects the whole
        # run and the window is timed from the load (the stored requests carry it)
        if spec.warmup_s:
            cmd.append(f"--delay={spec.warmup_s:g}")
        if spec.duration_s:
            cmd.append(f"--duration={spec.duration_s:g}")
    return [*cmd, *spec.command]


@dataclass(frozen=True)
class NsysBackend(BackendDefaults):
    """The command wrapped in ``nsys profile`` (:func:`nsys_command`)."""

    def run(self, spec: CaptureSpec, out_dir: Path, stop: threading.Event, on_status: StatusFn | None,
            ) -> CaptureResult:
        """Run the command under nsys and collect the report and its SQLite export."""
        if shutil.which("nsys") is None:
            raise CaptureError("nsys", "not found on PATH: install NVIDIA Nsight Systems (the CLI, nsys) or add it "
                                       "to PATH")
        cmd = nsys_command(spec, out_dir)
        result = window.run_wrapped(cmd, spec, out_dir, stop, on_status)
        if not any(p.suffix == ".sqlite" or p.suffix == ".nsys-rep" for p in result.trace_files):
            raise CaptureError(" ".join(cmd), f"no report written (nsys exited with code {result.command_returncode})")
        return result


NSYS = NsysBackend("nsys")  # nsys is looked for when it runs
