"""Analyzers: stateless classes registered by name that read a run from the store and write
``findings`` and ``metrics``; the hardware catalog they use (:mod:`tracekit.analysis.hardware`).

Built in: ``compile_churn``, ``device_time``, ``wave_stalls``, ``padding_waste``, ``memory_bound_decode``, ``model_identity``,
``launch_idle``, ``communication``, ``fusion``, ``transfers`` and ``serving`` (see docs/findings.md); a plugin registers the same way, by subclassing
:class:`Analyzer` with a ``name``.
"""

from tracekit.analysis import communication as _communication  # noqa: F401  (registers itself)
from tracekit.analysis import compile_churn as _compile_churn  # noqa: F401  (registers itself)
from tracekit.analysis import device_time as _device_time  # noqa: F401  (registers itself)
from tracekit.analysis import fusion as _fusion  # noqa: F401  (registers itself)
from tracekit.analysis import launch_idle as _launch_idle  # noqa: F401  (registers itself)
from tracekit.analysis import memory_bound_decode as _memory_bound_decode  # noqa: F401  (registers itself)
from tracekit.analysis import model_identity as _model_identity  # noqa: F401  (registers itself)
from tracekit.analysis import padding_waste as _padding_waste  # noqa: F401  (registers itself)
from tracekit.analysis import serving as _serving  # noqa: F401  (registers itself)
from tracekit.analysis import transfers as _transfers  # noqa: F401  (registers itself)
from tracekit.analysis import wave_stalls as _wave_stalls  # noqa: F401  (registers itself)
from tracekit.analysis.base import ANALYZERS, Analyzer, AnalyzerResult, Finding, Metric, analyze_run

__all__ = ["ANALYZERS", "Analyzer", "AnalyzerResult", "Finding", "Metric", "analyze_run"]
