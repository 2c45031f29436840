"""device_time: how much device time the run's kernels took in total, for trends and CI gates.

Inputs (view): ``kernels``. Math, one DuckDB aggregate: over every rank, device and stream,
``device_kernel_time_ms`` = Σ ``dur_ns`` / 10⁶ and ``device_kernel_count`` = the number of rows,
leaving out XPlane ``xla_async`` rows (the in-flight spans of async TPU ops, which overlap the
ops on the ``XLA Ops`` line) — exactly the rows and totals ``tracekit compare`` splits by kernel
category. Concurrent streams both count (it is summed device work, not wall time: the wall-time
view is ``launch_idle``'s busy fraction and step time). A run without device activity (a CPU
capture) gets NULL metrics. No findings.
"""

from __future__ import annotations

import duckdb

from tracekit.analysis.base import Analyzer, AnalyzerResult, Metric


class DeviceTime(Analyzer, name="device_time"):
    summary = "total device kernel time and kernel count of the run (the headline CI gate)"

    def analyze(self, con: duckdb.DuckDBPyConnection, run_id: str) -> AnalyzerResult:
        n, total_ns = con.execute(
            """SELECT count(*), sum(dur_ns) FROM kernels
               WHERE run_id = ? AND category <> 'xla_async'""",
            [run_id],
        ).fetchall()[0]
        if not n:
            return AnalyzerResult(metrics=[
                Metric("device_kernel_time_ms", None, "ms", "lower"),
                Metric("device_kernel_count", None, "count", "lower"),
            ])
        return AnalyzerResult(metrics=[
            Metric("device_kernel_time_ms", float(total_ns) / 1e6, "ms", "lower"),
            Metric("device_kernel_count", float(n), "count", "lower"),
        ])
