"""Calibration by simulation: how often ``tracekit check`` alerts on noise, and how soon it sees a
real step. Used by ``benchmarks/bench_check.py`` (the figures in docs/MATH.md) and by
``tests/test_check_stats.py`` (which import it as ``check_simulation``; ``tests/conftest.py`` puts
``benchmarks/`` on the import path). Not part of the package.

A history is one metric (lower is better, e.g. device time in ms, level 100) over runs of one
workload. Run-to-run noise models (:data:`NOISE_MODELS`), all multiplicative:

* ``lognormal``: exp(N(0, σ));
* ``bimodal``: two clock/placement states 3 % apart, each run in the slow one with probability
  0.3, times lognormal σ/2;
* ``student_t3``: Student t with 3 degrees of freedom, scaled so its standard deviation is σ
  (heavy tails);

and on top of each, **slow outliers**: with probability ``outlier_rate`` a run takes ×U(1.1, 1.5)
(a noisy neighbour, a throttled clock, a cold cache). The checks run exactly the code of
``tracekit check`` (:func:`tracekit.check.gate.history_changes` and
:func:`tracekit.check.gate.pr_verdict`) on the simulated values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tracekit.check.gate import CheckConfig, MetricRule, Series, history_changes, pr_verdict

LEVEL = 100.0


def _lognormal(rng: np.random.Generator, n: int, sigma: float) -> np.ndarray:
    return np.asarray(np.exp(rng.normal(0.0, sigma, n)))


def _bimodal(rng: np.random.Generator, n: int, sigma: float) -> np.ndarray:
    mode = np.where(rng.random(n) < 0.3, 1.03, 1.0)
    return np.asarray(mode * np.exp(rng.normal(0.0, sigma / 2, n)))


def _student_t3(rng: np.random.Generator, n: int, sigma: float) -> np.ndarray:
    return np.asarray(np.maximum(0.5, 1.0 + sigma * rng.standard_t(3, n) / np.sqrt(3.0)))


NOISE_MODELS: dict[str, Callable[[np.random.Generator, int, float], np.ndarray]] = {
    "lognormal": _lognormal, "bimodal": _bimodal, "student_t3": _student_t3,
}


def noisy(rng: np.random.Generator, n: int, sigma: float, model: str = "lognormal",
          outlier_rate: float = 0.03) -> np.ndarray:
    """``n`` run values at level :data:`LEVEL` with the model's noise and slow outliers."""
    v = LEVEL * NOISE_MODELS[model](rng, n, sigma)
    out = rng.random(n) < outlier_rate
    return np.asarray(v * np.where(out, rng.uniform(1.1, 1.5, n), 1.0))


def _series(values: np.ndarray) -> Series:
    return Series("sim_time_ms", "sim", "ms", "lower", [f"r{i}" for i in range(len(values))],
                  [float(x) for x in values])


def history_alerts(values: np.ndarray, cfg: CheckConfig) -> list[int]:
    """Indices (first run of the change) of the alerting change points of a history check."""
    rule = MetricRule("sim_time_ms")
    return [c.index for c in history_changes(rule, _series(values), cfg) if c.alert]


@dataclass
class Rate:
    """``hits`` of ``n`` trials, with the exact (Clopper–Pearson) 95 % interval."""

    hits: int
    n: int

    @property
    def rate(self) -> float:
        return self.hits / self.n if self.n else float("nan")

    def interval(self) -> tuple[float, float]:
        return clopper_pearson(self.hits, self.n)


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Exact binomial interval for k successes in n trials (bisection on the binomial tails)."""
    from math import exp, lgamma, log

    def pmf(i: int, p: float) -> float:
        if p <= 0.0:
            return 1.0 if i == 0 else 0.0
        if p >= 1.0:
            return 1.0 if i == n else 0.0
        return exp(lgamma(n + 1) - lgamma(i + 1) - lgamma(n - i + 1) + i * log(p) + (n - i) * log(1 - p))

    def cdf(j: int, p: float) -> float:  # P(X ≤ j)
        return sum(pmf(i, p) for i in range(j + 1))

    def solve(f: Callable[[float], float]) -> float:  # f increasing in p, one root
        lo, hi = 0.0, 1.0
        for _ in range(50):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if f(mid) < 0 else (lo, mid)
        return (lo + hi) / 2

    a = (1 - level) / 2
    lower = 0.0 if k == 0 else solve(lambda p: (1 - cdf(k - 1, p)) - a)
    upper = 1.0 if k == n else solve(lambda p: a - cdf(k, p))
    return lower, upper


def false_alert_rate(rng: np.random.Generator, cfg: CheckConfig, *, histories: int, length: int = 60,
                     first_check: int = 20, sigma: float = 0.02, model: str = "lognormal",
                     outlier_rate: float = 0.03) -> Rate:
    """Noise-only histories, checked after every new run from ``first_check`` runs to ``length``
    (as main-branch CI does): the share of checks that alert."""
    hits = n = 0
    for _ in range(histories):
        v = noisy(rng, length, sigma, model, outlier_rate)
        for t in range(first_check, length + 1):
            n += 1
            hits += bool(history_alerts(v[:t], cfg))
    return Rate(hits, n)


def detection_rate(rng: np.random.Generator, cfg: CheckConfig, *, trials: int, before: int = 30, step: float = 0.05,
                   sigma: float = 0.02, within: int = 5, model: str = "lognormal", outlier_rate: float = 0.03,
                   tolerance: int = 0) -> tuple[Rate, list[int]]:
    """A step of ``step`` (relative, bad direction) after ``before`` runs; the history is checked
    after each of the next ``within`` runs. Detected = a check alerts with a change point whose
    first run is the step's first run (± ``tolerance``). Returns the rate and, per trial, the
    number of post-change runs the first detection needed (0 = not detected)."""
    hits = 0
    needed = []
    for _ in range(trials):
        v = noisy(rng, before + within, sigma, model, outlier_rate)
        v[before:] *= 1 + step
        first = 0
        for k in range(1, within + 1):
            if any(abs(i - before) <= tolerance for i in history_alerts(v[:before + k], cfg)):
                first = k
                break
        hits += first > 0
        needed.append(first)
    return Rate(hits, trials), needed


def pr_rates(rng: np.random.Generator, cfg: CheckConfig, *, trials: int, runs: int = 5, step: float = 0.0,
             sigma: float = 0.02, model: str = "lognormal", outlier_rate: float = 0.03) -> Rate:
    """PR tier: ``runs`` baseline and ``runs`` candidate runs, the candidate slower by ``step``;
    the share of checks that call it a regression (false alerts when ``step`` is 0, power else)."""
    rule = MetricRule("sim_time_ms")
    hits = 0
    for _ in range(trials):
        b = noisy(rng, runs, sigma, model, outlier_rate)
        c = noisy(rng, runs, sigma, model, outlier_rate) * (1 + step)
        hits += pr_verdict(rule, _series(b), _series(c), cfg).verdict == "regression"
    return Rate(hits, trials)
