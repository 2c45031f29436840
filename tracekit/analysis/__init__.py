"""Analyzers: stateless classes registered by name that read a run from the store and write
``findings`` and ``metrics``; the hardware catalog they use (:mod:`tracekit.analysis.hardware`).

Issue 5 is in progress: ``compile_churn`` is the first analyzer; memory-bound decode, padding
waste, wave stalls and launch/idle follow.
"""

from tracekit.analysis import compile_churn as _compile_churn  # noqa: F401  (registers itself)
from tracekit.analysis.base import ANALYZERS, Analyzer, AnalyzerResult, Finding, Metric, analyze_run

__all__ = ["ANALYZERS", "Analyzer", "AnalyzerResult", "Finding", "Metric", "analyze_run"]
