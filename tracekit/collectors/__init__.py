"""In-process trace collectors.

Collectors capture a trace from inside the running program and write it to disk
in a format that tracekit's parsers ingest. They import their heavy framework
(e.g. torch) lazily, so ``import tracekit.collectors`` is always cheap and works
without any optional extra installed.
"""

from __future__ import annotations

from tracekit.collectors.load import LoadProgress, LoadResult, LoadSpec, RequestRecord, run_load
from tracekit.collectors.torch_profiler import TorchCapture, torch_profile

__all__ = [
    "LoadProgress", "LoadResult", "LoadSpec", "RequestRecord", "TorchCapture", "run_load", "torch_profile",
]
