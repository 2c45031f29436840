"""Analyzers: stateless classes registered by name that read a run from the store and write
``findings`` and ``metrics``; the hardware catalog they use (:mod:`tracekit.analysis.hardware`).

Issue 5 is in progress: ``compile_churn`` is the first analyzer; memory-bound decode, padding
waste, wave stalls and launch/idle follow.
"""

from tracekit.analysis import compile_churn as _compile_churn  # noqa: F401  (registers itself)
from tracekit.analysis import wave_stalls as _wave_stalls  # noqa: F401  (registers itself)
from tracekit.analysis import padding_waste as _padding_waste  # noqa: F401  (registers itself)
from tracekit.analysis import memory_bound_decode as _memory_bound_decode  # noqa: F401  (registers itself)
from tracekit.analysis import launch_idle as _launch_idle  # noqa: F401  (registers itself)
from tracekit.analysis.base import ANALYZERS, Analyzer, AnalyzerResult, Finding, Metric, analyze_run

__all__ = ["ANALYZERS", "Analyzer", "AnalyzerResult", "Finding", "Metric", "analyze_run"]
