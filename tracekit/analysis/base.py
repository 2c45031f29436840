"""The analyzer protocol and registry, and running analyzers over a run.

An analyzer is a stateless class registered by name (``class A(Analyzer, name="compile_churn")``)
whose :meth:`Analyzer.analyze` reads one run from the store (read-only SQL on the public views)
and returns :class:`Finding` and :class:`Metric` objects. :func:`analyze_run` runs the registered
analyzers and replaces the run's rows in the ``findings`` and ``metrics`` views in one
transaction. Built-in analyzers use exactly this hook; so can a plugin.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import duckdb

from tracekit.errors import PathError
from tracekit.parsers.store_writer import insert_rows
from tracekit.store import utc_now

#: ``error``: the analyzer itself failed on this run (a bug to report); its other rows are absent.
Severity = Literal["info", "warning", "critical", "error"]
Better = Literal["lower", "higher"]

ANALYZERS: dict[str, type[Analyzer]] = {}

#: Severity from the share of the run's device window a fix would save (issue 14's rule, used by
#: every analyzer): none under 1 %, info under 5 %, warning under 20 %, else critical.
RUN_SHARE_INFO = 0.01
RUN_SHARE_WARNING = 0.05
RUN_SHARE_CRITICAL = 0.20


def run_share_severity(share: float | None) -> Severity | None:
    """Severity of a finding from the time at stake ÷ the run's device window time: none under
    :data:`RUN_SHARE_INFO`, info below :data:`RUN_SHARE_WARNING`, warning below
    :data:`RUN_SHARE_CRITICAL`, else critical (None also when the share is unknown)."""
    if share is None or share < RUN_SHARE_INFO:
        return None
    if share >= RUN_SHARE_CRITICAL:
        return "critical"
    return "warning" if share >= RUN_SHARE_WARNING else "info"


def run_window_ns(con: duckdb.DuckDBPyConnection, run_id: str) -> int | None:
    """The run's device window time (ns): Σ ``window_ns`` of the SQL library's ``run_window`` (each
    device's busiest session, whole), the base of ``saving_fraction`` and of the severities; None
    when the run has no device work."""
    row = con.execute("SELECT sum(window_ns) FROM run_window WHERE run_id = ?", [run_id]).fetchall()
    return int(row[0][0]) if row and row[0][0] else None


@dataclass
class Finding:
    """One thing wrong with a run, with its evidence and, when computable, what fixing it saves.

    ``saving_ns``: estimated device or wall time saved over the run (ns); ``saving_fraction``: the
    same as a fraction of the run's time (0..1). ``evidence``: the numbers and offending
    kernels/ops/functions the finding rests on (JSON-serializable)."""

    severity: Severity
    title: str
    detail: str
    evidence: dict[str, Any] = field(default_factory=dict)
    saving_ns: int | None = None
    saving_fraction: float | None = None


@dataclass
class Metric:
    """A scalar KPI of a run, for trends and CI gates: ``better`` says which direction is good."""

    name: str
    value: float | None
    unit: str
    better: Better


@dataclass
class AnalyzerResult:
    findings: list[Finding] = field(default_factory=list)
    metrics: list[Metric] = field(default_factory=list)


class Analyzer:
    """Base class of the analyzers. Subclasses register under ``name`` and must not keep state."""

    name: ClassVar[str]
    #: One line on what the analyzer looks for (shown by ``tracekit analyze --list``).
    summary: ClassVar[str] = ""

    def __init_subclass__(cls, name: str | None = None, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if name is not None:
            cls.name = name
            ANALYZERS[name] = cls

    def analyze(self, con: duckdb.DuckDBPyConnection, run_id: str) -> AnalyzerResult:
        """Read the run ``run_id`` through ``con`` and return its findings and metrics."""
        raise NotImplementedError


def analyze_run(
    con: duckdb.DuckDBPyConnection, run_id: str, names: list[str] | None = None
) -> dict[str, AnalyzerResult]:
    """Run the named analyzers (default: all registered) on one run and store their results
    (:func:`run_analyzers`, then :func:`store_results`)."""
    results = run_analyzers(con, run_id, names)
    store_results(con, run_id, results)
    return results


def run_analyzers(
    con: duckdb.DuckDBPyConnection, run_id: str, names: list[str] | None = None
) -> dict[str, AnalyzerResult]:
    """The named analyzers' (default: all registered) results on one run, nothing stored. An
    analyzer that fails is reported as an ``error`` finding of its own; the others still run."""
    from tracekit.analysis import library

    chosen = names or sorted(ANALYZERS)
    results: dict[str, AnalyzerResult] = {}
    # the library scoped to this run, its shared views computed once (library.scoped)
    with library.scoped(con, run_id):
        for n in chosen:
            try:
                results[n] = ANALYZERS[n]().analyze(con, run_id)
            except PathError:
                raise  # the user's mistake (a bad hardware or model file): one line, nothing stored
            except Exception as exc:  # noqa: BLE001  (one analyzer's bug must not stop the others or the other runs)
                first = (str(exc).strip().splitlines() or [""])[0][:300]
                results[n] = AnalyzerResult(findings=[Finding(
                    severity="error",
                    title=f"analyzer {n} failed on this run: {type(exc).__name__}: {first}",
                    detail=("This is a tracekit bug, not a property of the trace: the other analyzers ran. "
                            "Please report it with the trace (or its `tracekit runs` line) and tracekit's version."),
                    evidence={"exception": type(exc).__name__, "message": first},
                )])
    return results


def write_results(con: duckdb.DuckDBPyConnection, run_id: str, results: dict[str, AnalyzerResult]) -> None:
    """Replace the run's stored findings and metrics of the analyzers in ``results`` with theirs,
    inside the caller's transaction."""
    now = utc_now()
    for n, res in results.items():
        con.execute("DELETE FROM finding_rows WHERE run_id = ? AND analyzer = ?", [run_id, n])
        con.execute("DELETE FROM metric_rows WHERE run_id = ? AND analyzer = ?", [run_id, n])
        insert_rows(con, "finding_rows", [
            {"run_id": run_id, "analyzer": n, "severity": f.severity, "title": f.title, "detail": f.detail,
             "evidence": json.dumps(f.evidence, default=str), "saving_ns": f.saving_ns,
             "saving_fraction": f.saving_fraction, "analyzed_at": now}
            for f in res.findings
        ], source=None)
        insert_rows(con, "metric_rows", [
            {"run_id": run_id, "analyzer": n, "name": m.name, "value": m.value, "unit": m.unit,
             "better": m.better, "analyzed_at": now}
            for m in res.metrics
        ], source=None)


def store_results(con: duckdb.DuckDBPyConnection, run_id: str, results: dict[str, AnalyzerResult]) -> None:
    """:func:`write_results` in one transaction of its own."""
    con.execute("BEGIN")
    try:
        write_results(con, run_id, results)
        con.execute("COMMIT")
    except BaseException:
        try:
            con.execute("ROLLBACK")
        except duckdb.TransactionException:
            pass  # a failed commit (a lake's) is rolled back already
        raise