"""Which metrics gate, how much change matters, and the verdicts of both tiers of ``tracekit check``.

* **Config** (TOML, :func:`load_config`): the gated metrics with their minimum meaningful change,
  the test, the significance level, the change-point detector's settings. Without a file the
  metrics in :data:`DEFAULT_METRICS` gate (those the runs have). The direction of every metric is
  its ``metrics.better`` as written by the analyzer that produced it.
* **PR tier** (:func:`pr_verdicts`): candidate runs against baseline runs, metric by metric: a
  regression needs a one-sided test in the bad direction with p ≤ ``alpha`` **and** a change of
  the medians of at least the metric's minimum change.
* **Main-branch tier** (:func:`history_changes`): change points over a workload's history; a
  regression change point that began within the last ``alert_window`` runs alerts.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tracekit.check.stats import (
    CHANGE_POINT_DETECTORS,
    TWO_SAMPLE_TESTS,
    ChangePointDetector,
)
from tracekit.config_toml import field_types, read_toml, typed_value, unknown_keys
from tracekit.errors import TraceInputError

Verdict = Literal["regression", "improvement", "unchanged", "not significant", "missing"]

#: Gated when no config names metrics: headline time, latency and throughput KPIs of the analyzers
#: (``device_time``, ``launch_idle``, ``memory_bound_decode``, ``serving``); absent ones are skipped.
DEFAULT_METRICS = (
    "device_kernel_time_ms", "step_device_time", "decode_step_time_ms",
    "output_tokens_per_s", "ttft_p95_ms", "tpot_p50_ms",
)
#: Runs per side the docs recommend for the PR tier; fewer are tested but noted.
RECOMMENDED_RUNS = 5


@dataclass(frozen=True)
class MinChange:
    """Smallest change that matters: ``relative`` → a fraction of the baseline (``"3%"`` → 0.03),
    else an absolute amount in the metric's unit."""

    value: float
    relative: bool = True

    def __str__(self) -> str:
        return f"{self.value * 100:g}%" if self.relative else f"{self.value:g}"

    def met(self, baseline: float, candidate: float) -> bool:
        diff = abs(candidate - baseline)
        if self.relative:
            if baseline == 0:
                return diff > 0
            return diff >= self.value * abs(baseline) * (1 - 1e-12)
        return diff >= self.value * (1 - 1e-12)


def parse_min_change(text: str | float, where: str) -> MinChange:
    """``"3%"`` (relative) or a number (absolute, in the metric's unit); raises ValueError."""
    if isinstance(text, bool):
        raise TypeError(f"{where}: expected a percentage like '3%' or a number, got {text!r}")
    if isinstance(text, (int, float)):
        if text < 0 or math.isnan(text):
            raise ValueError(f"{where}: must be ≥ 0, got {text!r}")
        return MinChange(float(text), relative=False)
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(%?)\s*", text)
    if not m:
        raise ValueError(f"{where}: expected a percentage like '3%' or a number, got {text!r}")
    v = float(m.group(1))
    return MinChange(v / 100.0, relative=True) if m.group(2) else MinChange(v, relative=False)


@dataclass(frozen=True)
class MetricRule:
    """One gated metric: ``name`` in the ``metrics`` view, optionally of one ``analyzer``;
    ``min_change`` None → the config's default."""

    name: str
    analyzer: str | None = None
    min_change: MinChange | None = None


@dataclass(frozen=True)
class CheckConfig:
    """Settings of a check (TOML ``[check]`` table plus ``[metrics.NAME]`` tables), read by
    :func:`load_config` and checked by :func:`validate`; a changed copy with
    :func:`dataclasses.replace`.

    ``alpha``: significance level of the PR-tier test (one-sided); ``test``: a registered
    two-sample test; ``min_change``: default minimum change; ``detector``: a registered
    change-point detector, with ``p_value`` (its significance level), ``permutations`` and
    ``min_size`` (runs per segment); ``window``: newest runs of a history considered;
    ``alert_window``: a regression change point alerts when it began within the newest this many
    runs; ``baseline_limit``: newest runs taken by ``--baseline-label``; ``metrics``: the gated
    metrics (None → :data:`DEFAULT_METRICS` present in the runs)."""

    alpha: float = 0.01
    test: str = "mann-whitney"
    min_change: MinChange = field(default_factory=lambda: MinChange(0.02))
    detector: str = "e-divisive"
    p_value: float = 0.005
    permutations: int = 499
    min_size: int = 3
    window: int = 50
    alert_window: int = 10
    baseline_limit: int = 10
    metrics: tuple[MetricRule, ...] | None = None
    source: str | None = None

    def min_change_for(self, rule: MetricRule) -> MinChange:
        return rule.min_change or self.min_change

    def summary(self) -> dict[str, Any]:
        return {"test": self.test, "alpha": self.alpha, "min_change": str(self.min_change),
                "detector": self.detector, "p_value": self.p_value, "permutations": self.permutations,
                "min_size": self.min_size, "window": self.window, "alert_window": self.alert_window,
                "config": self.source}


#: The ``[check]`` table's keys and the type of each (``min_change``: :func:`parse_min_change`).
_CHECK_KEYS = field_types(CheckConfig, exclude=frozenset({"metrics", "source"}))


def load_config(path: str | Path | None) -> CheckConfig:
    """Read a check config; ``None`` → defaults. Raises :class:`TraceInputError` (path, reason).

    Example::

        [check]
        test = "mann-whitney"     # or "welch"
        alpha = 0.01
        min_change = "2%"         # default for metrics without their own
        [metrics.device_kernel_time_ms]
        min_change = "2%"
        [metrics.ttft_p95_ms]
        analyzer = "serving"
        min_change = 5.0          # ms (absolute, in the metric's unit)
    """
    if path is None:
        return CheckConfig()
    p = Path(path)
    doc = read_toml(p, TraceInputError)
    unknown = unknown_keys(doc, {"check", "metrics"})
    if unknown:
        raise TraceInputError(p, f"unknown table(s) {', '.join(unknown)} (expected [check], [metrics.NAME])")
    try:
        cfg = CheckConfig(**_check_table(doc.get("check", {})), metrics=_metrics_tables(doc.get("metrics")),
                          source=str(p))
        validate(cfg)
    except (ValueError, TypeError) as exc:
        raise TraceInputError(p, str(exc)) from None
    return cfg


def _check_table(section: object) -> dict[str, Any]:
    """The ``[check]`` table's settings, each of its type (ValueError/TypeError naming the key)."""
    if not isinstance(section, dict):
        raise TypeError("[check] must be a table")
    settings: dict[str, Any] = {}
    for key, value in section.items():
        if key not in _CHECK_KEYS:
            raise ValueError(f"[check] {key}: unknown key (known: {', '.join(sorted(_CHECK_KEYS))})")
        if key == "min_change":
            settings[key] = parse_min_change(value, "[check] min_change")
            continue
        settings[key] = typed_value(value, _CHECK_KEYS[key], f"[check] {key}")
    return settings


def _metrics_tables(metrics: object) -> tuple[MetricRule, ...] | None:
    """The ``[metrics.NAME]`` tables as rules (None without any: the default metrics gate)."""
    if metrics is None:
        return None
    if not isinstance(metrics, dict) or not metrics:
        raise ValueError("[metrics.NAME] tables expected, one per gated metric")
    rules = []
    for name, spec in metrics.items():
        if not isinstance(spec, dict):
            raise TypeError(f"metrics.{name}: expected a table")
        extra = set(spec) - {"analyzer", "min_change"}
        if extra:
            raise ValueError(f"[metrics.{name}] {min(extra)}: unknown key (known: analyzer, min_change)")
        analyzer = spec.get("analyzer")
        if analyzer is not None and not isinstance(analyzer, str):
            raise ValueError(f"[metrics.{name}] analyzer: expected a string")
        mc = spec.get("min_change")
        rules.append(MetricRule(name, analyzer,
                                None if mc is None else parse_min_change(mc, f"[metrics.{name}] min_change")))
    return tuple(rules)


def validate(cfg: CheckConfig) -> None:
    """Raise ValueError naming the first bad setting."""
    if cfg.test not in TWO_SAMPLE_TESTS:
        raise ValueError(f"test {cfg.test!r}: expected one of {', '.join(sorted(TWO_SAMPLE_TESTS))}")
    if cfg.detector not in CHANGE_POINT_DETECTORS:
        raise ValueError(f"detector {cfg.detector!r}: expected one of {', '.join(sorted(CHANGE_POINT_DETECTORS))}")
    if not 0 < cfg.alpha < 1:
        raise ValueError(f"alpha {cfg.alpha}: expected 0 < alpha < 1")
    if not 0 < cfg.p_value < 1:
        raise ValueError(f"p_value {cfg.p_value}: expected 0 < p_value < 1")
    if cfg.permutations < 19:
        raise ValueError(f"permutations {cfg.permutations}: expected ≥ 19")
    if cfg.min_size < 1:
        raise ValueError(f"min_size {cfg.min_size}: expected ≥ 1")
    if cfg.window < 2 * cfg.min_size:
        raise ValueError(f"window {cfg.window}: expected ≥ 2 × min_size")
    if cfg.alert_window < 1 or cfg.baseline_limit < 1:
        raise ValueError("alert_window and baseline_limit: expected ≥ 1")


def detector_for(cfg: CheckConfig) -> ChangePointDetector:
    """The configured change-point detector (its constructor takes ``p_value``, ``permutations``
    and ``min_size``)."""
    cls = CHANGE_POINT_DETECTORS[cfg.detector]
    return cls(p_value=cfg.p_value, permutations=cfg.permutations, min_size=cfg.min_size)  # type: ignore[call-arg]


@dataclass
class Series:
    """One metric's values: ``values[i]`` of ``runs[i]`` (NULL values left out)."""

    name: str
    analyzer: str
    unit: str
    better: str
    runs: list[str]
    values: list[float]


def relative_change(baseline: float, candidate: float) -> float | None:
    """(candidate − baseline) / |baseline|; None when the baseline is 0 and the values differ."""
    if baseline == 0:
        return 0.0 if candidate == 0 else None
    return (candidate - baseline) / abs(baseline)


def _worse(better: str, baseline: float, candidate: float) -> bool:
    return candidate > baseline if better == "lower" else candidate < baseline


@dataclass
class MetricVerdict:
    """PR-tier outcome for one metric. Medians in the metric's unit; ``change`` = relative change
    of the candidate median vs the baseline median (fraction, None when undefined); ``p_value`` of
    the one-sided test in the direction the medians moved."""

    metric: str
    analyzer: str | None
    unit: str | None
    better: str | None
    baseline_runs: list[str]
    candidate_runs: list[str]
    baseline_values: list[float]
    candidate_values: list[float]
    baseline_median: float | None
    candidate_median: float | None
    change: float | None
    p_value: float | None
    method: str | None
    min_change: str
    verdict: Verdict
    note: str = ""


def pr_verdict(rule: MetricRule, base: Series | None, cand: Series | None, cfg: CheckConfig) -> MetricVerdict:
    """Test one metric: regression = test p ≤ alpha in the bad direction and the change of the
    medians ≥ the minimum change; with fewer than two runs on a side there is no test."""
    mc = cfg.min_change_for(rule)
    if base is None or cand is None or not base.values or not cand.values:
        side = "baseline" if base is None or not base.values else "candidate"
        any_s = cand or base
        return MetricVerdict(rule.name, rule.analyzer or (any_s.analyzer if any_s else None),
                             any_s.unit if any_s else None, any_s.better if any_s else None,
                             base.runs if base else [], cand.runs if cand else [],
                             base.values if base else [], cand.values if cand else [],
                             None, None, None, None, None, str(mc), "missing",
                             f"no value on the {side} side (not computed by the analyzers for those runs)")
    bm, cm = statistics.median(base.values), statistics.median(cand.values)
    change = relative_change(bm, cm)
    worse = _worse(cand.better, bm, cm)
    alternative = ("greater" if cand.better == "lower" else "less") if worse else (
        "less" if cand.better == "lower" else "greater")
    res = TWO_SAMPLE_TESTS[cfg.test]().test(base.values, cand.values, alternative)  # type: ignore[arg-type]
    big = mc.met(bm, cm)
    note = ""
    n_min = min(len(base.values), len(cand.values))
    if n_min < 2:
        verdict: Verdict = "not significant" if big else "unchanged"
        note = (f"{len(base.values)} baseline and {len(cand.values)} candidate run(s): too few for a "
                f"significance test (≥ {RECOMMENDED_RUNS} per side recommended)")
        p = None
    else:
        p = res.p_value
        if not big:
            verdict = "unchanged"
        elif p <= cfg.alpha:
            verdict = "regression" if worse else "improvement"
        else:
            verdict = "not significant"
        if n_min < RECOMMENDED_RUNS:
            note = f"fewer than {RECOMMENDED_RUNS} runs on a side: low power"
    return MetricVerdict(rule.name, cand.analyzer, cand.unit, cand.better, base.runs, cand.runs,
                         base.values, cand.values, bm, cm, change, p, res.method if p is not None else None,
                         str(mc), verdict, note)


@dataclass
class ChangeReport:
    """A change point of a metric's history: the first run of the change, the medians of the
    segments before and after it (metric unit), relative change, p-value of the detector's test;
    ``known``: a regression already found in the history without its newest run (alerted by an
    earlier check); ``alert``: a regression that began within the newest ``alert_window`` runs
    and is not ``known`` — each change alerts once, on the check that first finds it."""

    metric: str
    analyzer: str
    unit: str
    better: str
    first_run: str
    index: int
    n_runs: int
    before_runs: list[str]
    after_runs: list[str]
    before_median: float
    after_median: float
    change: float | None
    p_value: float
    min_change: str
    verdict: Verdict
    alert: bool
    known: bool = False


#: A regression found without the newest run matches one found with it when their first runs are
#: at most this many runs apart (a location moves by a run or two as runs are added).
KNOWN_TOLERANCE = 2


def history_changes(rule: MetricRule, s: Series, cfg: CheckConfig, *, dedupe: bool = True) -> list[ChangeReport]:
    """Change points of one metric over a history (oldest first, the newest ``window`` runs).

    With ``dedupe``, a regression that would alert is checked against the history without its
    newest run: found there too (within :data:`KNOWN_TOLERANCE` runs), it is ``known``, not alerted
    again."""
    runs, values = s.runs[-cfg.window:], s.values[-cfg.window:]
    cps = detector_for(cfg).detect(values)
    mc = cfg.min_change_for(rule)
    bounds = [0, *[c.index for c in cps], len(values)]
    out = []
    for i, cp in enumerate(cps):
        lo, hi = bounds[i], bounds[i + 2]
        before, after = values[lo:cp.index], values[cp.index:hi]
        bm, am = statistics.median(before), statistics.median(after)
        if not mc.met(bm, am):
            verdict: Verdict = "unchanged"
        else:
            verdict = "regression" if _worse(s.better, bm, am) else "improvement"
        out.append(ChangeReport(
            s.name, s.analyzer, s.unit, s.better, runs[cp.index], cp.index, len(values),
            runs[lo:cp.index], runs[cp.index:hi], bm, am, relative_change(bm, am), cp.p_value, str(mc), verdict,
            alert=verdict == "regression" and cp.index >= len(values) - cfg.alert_window,
        ))
    if dedupe and any(c.alert for c in out) and len(s.values) > 1:
        prev = Series(s.name, s.analyzer, s.unit, s.better, s.runs[:-1], s.values[:-1])
        pos = {r: i for i, r in enumerate(s.runs)}
        earlier = [pos[c.first_run] for c in history_changes(rule, prev, cfg, dedupe=False)
                   if c.verdict == "regression"]
        for c in out:
            if c.alert and any(abs(pos[c.first_run] - e) <= KNOWN_TOLERANCE for e in earlier):
                c.alert, c.known = False, True
    return out


def representative(runs: list[str], values: list[float]) -> str:
    """The run whose value is closest to the median of ``values`` (ties: the earlier run)."""
    m = statistics.median(values)
    return min(zip(runs, values, strict=True), key=lambda rv: abs(rv[1] - m))[0]
