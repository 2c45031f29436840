"""``tracekit check``: regression alerts for CI.

:func:`run_check` compares candidate runs with baseline runs (PR tier) or looks for change points
in a workload's history (main-branch tier), metric by metric over the ``metrics`` view, explains
each regression down to the kernels that moved (:func:`tracekit.compare.compare_runs` between a
representative run per side) and the findings that are new, and returns a :class:`CheckResult`.
:mod:`tracekit.check.message` renders it as markdown or JSON; :mod:`tracekit.check.post` posts it
to a GitHub pull request or a Slack webhook. Statistics: :mod:`tracekit.check.stats`; metric
selection, config and verdicts: :mod:`tracekit.check.gate`; candidates and baselines in two stores:
:mod:`tracekit.check.stores`; the math: docs/MATH.md.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from tracekit.check.gate import (
    DEFAULT_METRICS,
    ChangeReport,
    CheckConfig,
    MetricRule,
    MetricVerdict,
    Series,
    history_changes,
    load_config,
    parse_min_change,
    pr_verdict,
    representative,
)
from tracekit.check.stores import paired, separate
from tracekit.errors import TraceInputError
from tracekit.lake.catalog import snapshot_id
from tracekit.sql_text import quote as _q
from tracekit.store import StoreLocation, open_store, resolve_run_id, resolve_store

__all__ = ["CheckConfig", "CheckResult", "load_config", "parse_min_change", "run_check"]

#: Kernels listed per explanation (largest time increase first), and per list of new kernels and
#: launch-count changes.
TOP_KERNELS = 5


@dataclass
class Explanation:
    """Why a metric moved: ``compare_runs`` between a representative baseline run (``baseline_run``)
    and candidate run (``candidate_run``), each the run whose value of the first metric in
    ``metrics`` is closest to its side's median. Times in ms."""

    metrics: list[str]
    baseline_run: str
    candidate_run: str
    chosen: str
    categories: list[dict[str, Any]]
    slower_kernels: list[dict[str, Any]]
    new_kernels: list[dict[str, Any]]
    gone_kernels: list[dict[str, Any]]
    launch_count_changes: list[dict[str, Any]]
    new_findings: list[dict[str, Any]]
    compare_url: str | None


@dataclass
class CheckResult:
    """Everything the message shows. ``tier``: ``pr`` or ``history``; ``regression``: the check
    fails (exit 1); ``verdicts`` (PR tier) or ``changes`` (history tier: every change point found,
    ``alert`` on the ones that fail the check); ``runs``: id → label, workload, captured_at."""

    tier: str
    regression: bool
    candidate_runs: list[str]
    baseline_runs: list[str]
    config: dict[str, Any]
    verdicts: list[MetricVerdict] = field(default_factory=list)
    changes: list[ChangeReport] = field(default_factory=list)
    history: dict[str, Any] | None = None
    explanations: list[Explanation] = field(default_factory=list)
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    dashboard_url: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the ``--format json`` document)."""
        return asdict(self)


def _known_runs(con: duckdb.DuckDBPyConnection, ids: list[str]) -> dict[str, dict[str, Any]]:
    if not ids:
        return {}
    rows = con.execute(
        f"""SELECT run_id, label, workload, captured_at, device_name FROM runs
            WHERE run_id IN ({", ".join(map(_q, ids))})"""
    ).fetchall()
    return {r[0]: {"label": r[1], "workload": r[2],
                   "captured_at": r[3].isoformat() if r[3] is not None else None, "device": r[4]}
            for r in rows}


def _hardware_note(con: duckdb.DuckDBPyConnection, run_info: dict[str, dict[str, Any]], cands: list[str],
                   bases: list[str]) -> str | None:
    """A warning when the compared runs ran on different hardware (the catalog device the
    analyzers costed against, else the trace's device name): a change may then be the hardware's,
    not the code's. Sets each run's ``hardware`` in ``run_info``."""
    from tracekit.analysis.hardware import run_device

    for rid, info in run_info.items():
        row, spec = run_device(con, rid)
        info["hardware"] = spec.name if spec is not None else (
            (row.get("name") or row.get("device_type")) if row is not None else info.get("device")) or "unknown"

    def side(ids: list[str]) -> str:
        counts: dict[str, int] = {}
        for r in ids:
            counts[run_info[r]["hardware"]] = counts.get(run_info[r]["hardware"], 0) + 1
        return ", ".join(f"{h} ({n} run{'s' if n > 1 else ''})" for h, n in sorted(counts.items()))

    if len({i["hardware"] for i in run_info.values()}) < 2:
        return None
    if cands:
        return (f"warning: the runs ran on different hardware (baseline: {side(bases)}; candidate: "
                f"{side(cands)}): a change may be the hardware's, not the code's")
    return (f"warning: this history mixes hardware ({side(list(run_info))}): a change point may be a "
            "change of machine; give each machine its own workload name")


def _series(con: duckdb.DuckDBPyConnection, runs: list[str]) -> dict[tuple[str, str], Series]:
    """Every finite metric of ``runs``, as series keyed by (name, analyzer), in the order of ``runs``."""
    if not runs:
        return {}
    rows = con.execute(
        f"""WITH o(run_id, ord) AS (VALUES {", ".join(f"({_q(r)}, {i})" for i, r in enumerate(runs))})
            SELECT m.name, m.analyzer, any_value(m.unit), any_value(m.better),
                   list(m.run_id ORDER BY o.ord), list(m.value ORDER BY o.ord)
            FROM metrics m JOIN o USING (run_id)
            WHERE m.value IS NOT NULL AND isfinite(m.value)
            GROUP BY m.name, m.analyzer ORDER BY m.name, m.analyzer"""
    ).fetchall()
    return {(r[0], r[1]): Series(r[0], r[1], r[2], r[3], list(r[4]), [float(v) for v in r[5]]) for r in rows}


def _pick(series: dict[tuple[str, str], Series], rule: MetricRule) -> Series | None:
    for (name, analyzer), s in sorted(series.items()):
        if name == rule.name and (rule.analyzer is None or rule.analyzer == analyzer):
            return s
    return None


def _rules(cfg: CheckConfig, *present: dict[tuple[str, str], Series]) -> list[MetricRule]:
    if cfg.metrics is not None:
        return list(cfg.metrics)
    names = {k[0] for p in present for k in p}
    return [MetricRule(n) for n in DEFAULT_METRICS if n in names]


def _title_key(title: str) -> str:
    """A finding's title with its numbers blanked, so "62 recompiles" and "64 recompiles" match."""
    return re.sub(r"[0-9][0-9.,]*", "#", title)


def _explain(con: duckdb.DuckDBPyConnection, store: str | Path, metrics: list[str], base_run: str, cand_run: str,
             chosen: str, dashboard_url: str | None) -> Explanation:
    from tracekit.compare import compare_runs

    res = compare_runs(base_run, cand_run, store, top=max(TOP_KERNELS, 10), con=con)
    cat_cols, cat_rows = res["categories"]
    k_cols, k_rows = res["top_kernels"]
    cats = [dict(zip(cat_cols, r, strict=True)) for r in cat_rows if r[1] or r[4]]
    kernels = [dict(zip(k_cols, r, strict=True)) for r in k_rows]
    for k in kernels:
        for c in ("a_ms", "b_ms", "delta_ms"):
            k[c] = float(k[c])
    slower = sorted((k for k in kernels if k["delta_ms"] > 0 and k["a_kernels"] > 0),
                    key=lambda k: (-k["delta_ms"], k["name"]))[:TOP_KERNELS]
    new = sorted((k for k in kernels if k["a_kernels"] == 0), key=lambda k: -k["b_ms"])[:TOP_KERNELS]
    gone = sorted((k for k in kernels if k["b_kernels"] == 0), key=lambda k: -k["a_ms"])[:TOP_KERNELS]
    counts = sorted((k for k in kernels if k["a_kernels"] and k["b_kernels"] and k["a_kernels"] != k["b_kernels"]),
                    key=lambda k: (-abs(k["b_kernels"] - k["a_kernels"]), k["name"]))[:TOP_KERNELS]
    for cat in cats:
        for key in ("a_ms", "a_pct", "b_ms", "b_pct", "delta_ms", "delta_pct"):
            cat[key] = None if cat[key] is None else float(cat[key])
    findings = con.execute(
        """SELECT run_id, analyzer, severity, title FROM findings WHERE run_id IN (?, ?)
           ORDER BY CASE severity WHEN 'critical' THEN 0 WHEN 'warning' THEN 1 ELSE 2 END, analyzer, title""",
        [base_run, cand_run],
    ).fetchall()
    before = {(a, _title_key(t)) for r, a, _, t in findings if r == base_run}
    new_findings = [{"analyzer": a, "severity": s, "title": t} for r, a, s, t in findings
                    if r == cand_run and (a, _title_key(t)) not in before]
    url = None
    if dashboard_url:
        url = dashboard_url.rstrip("/") + "/compare?" + urllib.parse.urlencode({"a": base_run, "b": cand_run})
    return Explanation(metrics, base_run, cand_run, chosen, cats, slower, new, gone, counts, new_findings, url)


def _needs_analysis(con: duckdb.DuckDBPyConnection, runs: list[str]) -> list[str]:
    done = {r[0] for r in con.execute(
        f"SELECT DISTINCT run_id FROM metric_rows WHERE run_id IN ({', '.join(map(_q, runs))})").fetchall()}
    return [r for r in runs if r not in done]


def run_check(  # noqa: PLR0913 - one parameter per CLI option
    store: str | Path | None = None,
    *,
    candidates: list[str] | None = None,
    baselines: list[str] | None = None,
    baseline_label: str | None = None,
    history: str | None = None,
    config: CheckConfig | None = None,
    dashboard_url: str | None = None,
    analyze_missing: bool = True,
    baseline_store: str | Path | None = None,
) -> CheckResult:
    """Run a check. PR tier: ``candidates`` with ``baselines`` or ``baseline_label`` (the newest
    ``config.baseline_limit`` runs with that label, of the candidates' workload when they share
    one). Main-branch tier: ``history`` = a workload (its runs ordered by ``captured_at``).

    ``baseline_store`` (PR tier): a store file or lake URL the baselines come from, opened
    read-only and never written (default: ``store``, which then holds both sides); candidates
    come from ``store``. Baselines without stored metrics are then not analyzed: ``baseline_label``
    picks among the runs with stored metrics, and a named one without any is an error.

    Runs without stored metrics are analyzed first (``analyze_missing``), in ``store``.
    ``dashboard_url``: base URL of ``tracekit dashboard`` for compare links. Raises
    :class:`TraceInputError` for unknown runs, an unknown workload or label, and a missing mode.
    """
    cfg = config or CheckConfig()
    path = resolve_store(store)
    other = separate(path, None if baseline_store is None else resolve_store(baseline_store))
    cands = list(dict.fromkeys(candidates or []))
    bases = list(dict.fromkeys(baselines or []))
    if history is not None and (cands or bases or baseline_label):
        raise TraceInputError(path, "give either --history WORKLOAD or --candidate/--baseline runs, not both")
    if history is not None and other is not None:
        raise TraceInputError(other, "--baseline-store is for --candidate runs; --history reads --store")
    if history is None and not cands:
        raise TraceInputError(path, "give --candidate RUN (with --baseline RUN or --baseline-label) or --history WORKLOAD")
    if history is None and not bases and baseline_label is None:
        raise TraceInputError(path, "give --baseline RUN (repeat per run) or --baseline-label LABEL")
    notes: list[str] = []
    if history is not None:
        with open_store(path, read_only=True) as con:
            all_runs = _history_runs(con, path, history, cfg, notes)
            missing = _needs_analysis(con, all_runs)
    else:
        cands, bases, missing = _pr_runs(path, other, cands, bases, baseline_label, cfg, notes)
        all_runs = cands + bases
    if missing and analyze_missing:
        from tracekit.run_analysis import analyze_runs

        analyze_runs(missing, path)
        notes.append(f"analyzed {len(missing)} run(s) without stored metrics first")
    with _reading(path, other, cands, bases) as con:
        run_info = _known_runs(con, all_runs)
        note = _hardware_note(con, run_info, cands, bases)
        if note:
            notes.insert(0, note)
        if other is not None:  # where each side came from, so the alert can be reproduced
            notes.append(f"baseline runs read from {other} (read-only); candidate runs from {path}")
        snapshot = snapshot_id(con) if isinstance(path, str) or isinstance(other, str) else None
        if snapshot is not None:  # a lake: the snapshot read, so the alert can be reproduced
            notes.append(f"read lake snapshot {snapshot} (reproduce with ATTACH … (SNAPSHOT_VERSION {snapshot}))")
        if history is not None:
            return _history_check(con, path, history, all_runs, cfg, dashboard_url, run_info, notes)
        return _pr_check(con, path, cands, bases, cfg, dashboard_url, run_info, notes)


def _history_runs(con: duckdb.DuckDBPyConnection, path: StoreLocation, workload: str, cfg: CheckConfig,
                  notes: list[str]) -> list[str]:
    """The newest ``cfg.window`` runs of ``workload``, oldest first (by capture time)."""
    rows = con.execute(
        """SELECT run_id FROM runs WHERE workload = ?
           ORDER BY captured_at NULLS FIRST, ingested_at, run_id""", [workload]).fetchall()
    if not rows:
        raise TraceInputError(path, f"no runs of workload {workload!r} (see `tracekit runs`)")
    runs = [r[0] for r in rows]
    if len(runs) > cfg.window:
        notes.append(f"the newest {cfg.window} of {len(runs)} runs of {workload!r} are considered")
        runs = runs[-cfg.window:]
    return runs


def _pr_runs(path: StoreLocation, other: StoreLocation | None, cands: list[str], bases: list[str],
             baseline_label: str | None, cfg: CheckConfig, notes: list[str]) -> tuple[list[str], list[str], list[str]]:
    """The PR tier's runs: (candidates, baselines, the runs to analyze first). Candidates are
    resolved in ``path``, baselines in ``other`` (None: ``path`` too), where a baseline without
    stored metrics is never analyzed (that store is only read)."""
    with ExitStack() as stack:
        con = stack.enter_context(open_store(path, read_only=True))
        bcon, bpath = (con, path) if other is None else (stack.enter_context(open_store(other, read_only=True)), other)
        cands = list(dict.fromkeys(resolve_run_id(con, r, path) for r in cands))
        bases = list(dict.fromkeys(resolve_run_id(bcon, r, bpath) for r in bases))
        overlap = set(cands) & set(bases)
        if overlap:
            raise TraceInputError(path, f"run {min(overlap)!r} is both a candidate and a baseline")
        if baseline_label is not None:
            workloads = {info["workload"] for info in _known_runs(con, cands).values()}
            workload = workloads.pop() if len(workloads) == 1 else None
            rows = bcon.execute(
                f"""SELECT run_id FROM runs WHERE label = ? AND run_id NOT IN ({", ".join(map(_q, cands))})
                    AND (? IS NULL OR workload = ?)
                    AND (? OR run_id IN (SELECT run_id FROM metric_rows))
                    ORDER BY captured_at DESC NULLS LAST, ingested_at DESC, run_id LIMIT ?""",
                [baseline_label, workload, workload, other is None, cfg.baseline_limit]).fetchall()
            where = (f" of workload {workload!r}" if workload else "") + ("" if other is None else " with stored metrics")
            if not rows:
                raise TraceInputError(bpath, f"no runs labelled {baseline_label!r}{where} to use as baseline")
            bases += [r[0] for r in rows if r[0] not in bases]
            notes.append(f"baseline: the {len(rows)} newest run(s) labelled {baseline_label!r}{where}")
        if other is None:
            return cands, bases, _needs_analysis(con, cands + bases)
        unanalyzed = _needs_analysis(bcon, bases)
        if unanalyzed:
            raise TraceInputError(other, f"baseline run {unanalyzed[0]!r} has no stored metrics, and the baseline "
                                  "store is only read: analyze it there (`tracekit analyze RUN --store …`)")
        return cands, bases, _needs_analysis(con, cands)


@contextmanager
def _reading(path: StoreLocation, other: StoreLocation | None, cands: list[str],
             bases: list[str]) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-only connection to ``path``, or to both stores when the baselines are in ``other``."""
    if other is None:
        with open_store(path, read_only=True) as con:
            yield con
    else:
        with paired(path, cands, other, bases) as con:
            yield con


def _pr_check(con: duckdb.DuckDBPyConnection, path: str | Path, cands: list[str], bases: list[str], cfg: CheckConfig,
              dashboard_url: str | None, run_info: dict[str, dict[str, Any]], notes: list[str]) -> CheckResult:
    cand_s, base_s = _series(con, cands), _series(con, bases)
    rules = _rules(cfg, cand_s, base_s)
    if not rules:
        notes.append("no gated metric has a value in these runs (see `tracekit query \"SELECT * FROM metrics\"`)")
    verdicts = [pr_verdict(rule, _pick(base_s, rule), _pick(cand_s, rule), cfg) for rule in rules]
    regression = any(v.verdict == "regression" for v in verdicts)
    # explain regressions; with none, the changes above the minimum that the test could not confirm
    to_explain = [v for v in verdicts if v.verdict == "regression"] or [
        v for v in verdicts if v.verdict == "not significant" and v.baseline_median is not None
        and v.candidate_median is not None
        and (v.candidate_median > v.baseline_median) == (v.better == "lower")]
    pairs: dict[tuple[str, str], list[str]] = {}
    for v in to_explain:
        pair = (representative(v.baseline_runs, v.baseline_values), representative(v.candidate_runs, v.candidate_values))
        pairs.setdefault(pair, []).append(v.metric)
    explanations = []
    for (b, c), metrics in pairs.items():
        chosen = (f"the run of each side whose {metrics[0]} is closest to that side's median"
                  if len(cands) > 1 or len(bases) > 1 else "the only run of each side")
        explanations.append(_explain(con, path, metrics, b, c, chosen, dashboard_url))
    return CheckResult("pr", regression, cands, bases, cfg.summary(), verdicts=verdicts, explanations=explanations,
                       runs=run_info, notes=notes, dashboard_url=dashboard_url)


def _history_check(con: duckdb.DuckDBPyConnection, path: str | Path, workload: str, runs: list[str], cfg: CheckConfig,
                   dashboard_url: str | None, run_info: dict[str, dict[str, Any]], notes: list[str]) -> CheckResult:
    series = _series(con, runs)
    rules = _rules(cfg, series)
    changes: list[ChangeReport] = []
    metrics_summary = []
    for rule in rules:
        s = _pick(series, rule)
        if s is None:
            metrics_summary.append({"metric": rule.name, "runs": 0, "latest": None, "unit": None,
                                    "change_points": 0, "note": "no values in this history"})
            continue
        found = history_changes(rule, s, cfg)
        changes += found
        note = "" if len(s.values) >= 2 * cfg.min_size else f"too few runs for change points (≥ {2 * cfg.min_size})"
        metrics_summary.append({"metric": s.name, "analyzer": s.analyzer, "unit": s.unit, "better": s.better,
                                "runs": len(s.values), "latest": s.values[-1], "latest_run": s.runs[-1],
                                "change_points": len(found), "note": note})
    explanations = []
    for ch in changes:
        if not ch.alert:
            continue
        s = _pick(series, MetricRule(ch.metric, ch.analyzer))
        assert s is not None
        vals = dict(zip(s.runs, s.values, strict=True))
        b = representative(ch.before_runs, [vals[r] for r in ch.before_runs])
        c = representative(ch.after_runs, [vals[r] for r in ch.after_runs])
        explanations.append(_explain(
            con, path, [ch.metric], b, c,
            f"the run before and after the change whose {ch.metric} is closest to its segment's median",
            dashboard_url))
    return CheckResult("history", any(c.alert for c in changes), [], [], cfg.summary(), changes=changes,
                       history={"workload": workload, "runs": runs, "metrics": metrics_summary},
                       explanations=explanations, runs=run_info, notes=notes, dashboard_url=dashboard_url)
