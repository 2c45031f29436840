"""The statistics of ``tracekit check``: two-sample tests (PR tier) and change-point detection
(main-branch tier), each a strategy registered by name, as Apache Otava's detector is.

Two-sample tests (:data:`TWO_SAMPLE_TESTS`), one-sided, asking "is the candidate worse?":

* ``mann-whitney`` (default): Mann–Whitney U on the runs' values. Exact p-value from the null
  distribution of U (the coefficients of the Gaussian binomial, by dynamic programming) when there
  are no ties; with ties, exact by enumerating every split of the pooled mid-ranks while there are
  ≤ :data:`EXACT_ENUMERATION_LIMIT` splits, else the normal approximation with tie and continuity
  corrections. Rank-based: one outlier run counts as "the largest", not by how far it is.
* ``welch``: Welch's t on the means, Welch–Satterthwaite degrees of freedom, p from Student's t
  (regularized incomplete beta, Lentz's continued fraction). Assumes roughly normal run values.

Change-point detection (:data:`CHANGE_POINT_DETECTORS`):

* ``e-divisive``: E-Divisive means (Matteson & James 2014, the method of MongoDB and Otava): the
  split with the largest energy statistic, tested with Student's t between the two segments it
  creates (Otava's deterministic test; the original permutation test is available), recursively.
  Robust by default: outlier runs (off their neighbours on both sides) are replaced before the
  search, and segments have ≥ ``min_size`` runs.

No scipy: everything is numpy and :mod:`math`; tests check the p-values against brute-force
enumeration and numerical integration.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np

Alternative = Literal["greater", "less"]

#: Tied samples are tested exactly while the number of ways to split them is at most this.
EXACT_ENUMERATION_LIMIT = 20_000
#: Samples without ties are tested exactly (DP over U) while n₁·n₂ is at most this.
EXACT_DP_LIMIT = 2_500


@dataclass(frozen=True)
class TwoSampleResult:
    """Outcome of a one-sided two-sample test: ``p_value`` of "candidate > baseline" (``greater``)
    or "candidate < baseline" (``less``); ``statistic`` is U (Mann–Whitney, the candidate's) or t
    (Welch); ``method`` says how the p-value was obtained."""

    statistic: float
    p_value: float
    method: str


class Strategy:
    """A statistic registered by name: ``class X(Base, name="x")`` adds X to ``Base.registry``
    (each direct base below declares its own registry)."""

    name: ClassVar[str]
    #: One line for the message and docs.
    description: ClassVar[str] = ""
    registry: ClassVar[dict[str, type[Any]]]

    def __init_subclass__(cls, name: str | None = None, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if name is not None:
            cls.name = name
            cls.registry[name] = cls


class TwoSampleTest(Strategy):
    """Base class of the two-sample tests (stateless), registered in :data:`TWO_SAMPLE_TESTS`."""

    registry: ClassVar[dict[str, type[Any]]] = {}
    #: Fewest runs a side needs: with fewer the result is p = 1, statistic NaN, method ``too_few``.
    min_runs: ClassVar[int] = 1
    too_few: ClassVar[str] = "no data"

    def test(self, baseline: Sequence[float], candidate: Sequence[float],
             alternative: Alternative) -> TwoSampleResult:
        """p-value of the candidate being greater (or less) than the baseline."""
        x = np.asarray(candidate, dtype=float)
        y = np.asarray(baseline, dtype=float)
        if len(x) < self.min_runs or len(y) < self.min_runs:
            return TwoSampleResult(math.nan, 1.0, self.too_few)
        return self.compare(x, y, alternative)

    def compare(self, x: np.ndarray, y: np.ndarray, alternative: Alternative) -> TwoSampleResult:
        """The test proper on the candidate's values ``x`` and the baseline's ``y`` (each side has
        at least ``min_runs``)."""
        raise NotImplementedError


TWO_SAMPLE_TESTS: dict[str, type[TwoSampleTest]] = TwoSampleTest.registry


def normal_sf(z: float) -> float:
    """Upper tail P(Z ≥ z) of the standard normal."""
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b), 0 ≤ x ≤ 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbeta = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    front = math.exp(lbeta + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def student_t_sf(t: float, df: float) -> float:
    """Upper tail P(T ≥ t) of Student's t with ``df`` degrees of freedom (df > 0, may be fractional)."""
    if math.isinf(df):
        return normal_sf(t)
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


def _rank(values: np.ndarray) -> np.ndarray:
    """Mid-ranks (1-based, ties share the mean of their ranks)."""
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(len(values), dtype=float)
    sorted_vals = values[order]
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and sorted_vals[j + 1] == sorted_vals[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


@functools.lru_cache(maxsize=256)
def u_null_counts(n1: int, n2: int) -> np.ndarray:
    """Number of the C(n1+n2, n1) equally likely arrangements with U = u, for u = 0 … n1·n2
    (U counts the (x, y) pairs with x from the first sample greater than y; no ties)."""
    # f[i][j] = distribution for sizes (i, j); f(i, j, u) = f(i-1, j, u-j) + f(i, j-1, u)
    prev = [np.ones(1, dtype=np.float64) for _ in range(n2 + 1)]  # i = 0: U = 0 only
    for i in range(1, n1 + 1):
        cur = [np.ones(1, dtype=np.float64)]  # j = 0: U = 0 only
        for j in range(1, n2 + 1):
            out = np.zeros(i * j + 1)
            a = prev[j]  # f(i-1, j) shifted by j
            out[j:j + len(a)] += a
            b = cur[j - 1]  # f(i, j-1)
            out[:len(b)] += b
            cur.append(out)
        prev = cur
    return prev[n2]


class MannWhitneyU(TwoSampleTest, name="mann-whitney"):
    description = "Mann–Whitney U (rank test; exact p without ties, else exact/normal with tie correction)"

    def compare(self, x: np.ndarray, y: np.ndarray, alternative: Alternative) -> TwoSampleResult:
        n1, n2 = len(x), len(y)
        ranks = _rank(np.concatenate([x, y]))
        u = float(ranks[:n1].sum() - n1 * (n1 + 1) / 2.0)
        ties = len(np.unique(ranks)) < n1 + n2
        sign = 1.0 if alternative == "greater" else -1.0
        if not ties and n1 * n2 <= EXACT_DP_LIMIT:
            counts = u_null_counts(min(n1, n2), max(n1, n2))  # symmetric in (n1, n2)
            k = round(u)
            tail = counts[k:].sum() if alternative == "greater" else counts[:k + 1].sum()
            return TwoSampleResult(u, float(min(1.0, tail / counts.sum())), "exact")
        if math.comb(n1 + n2, n1) <= EXACT_ENUMERATION_LIMIT:
            # exact conditional distribution of the candidate's rank sum over all splits
            sums = np.fromiter(
                (sum(c) for c in itertools.combinations(ranks.tolist(), n1)), dtype=float
            ) - n1 * (n1 + 1) / 2.0
            eps = 1e-9
            hits = (sums >= u - eps) if alternative == "greater" else (sums <= u + eps)
            return TwoSampleResult(u, float(hits.mean()), "exact (ties)")
        n = n1 + n2
        _, tie_counts = np.unique(ranks, return_counts=True)
        var = n1 * n2 / 12.0 * ((n + 1) - float((tie_counts**3 - tie_counts).sum()) / (n * (n - 1)))
        if var <= 0:
            return TwoSampleResult(u, 1.0, "normal (all tied)")
        z = (sign * (u - n1 * n2 / 2.0) - 0.5) / math.sqrt(var)
        return TwoSampleResult(u, normal_sf(z), "normal approximation")


class WelchT(TwoSampleTest, name="welch"):
    description = "Welch's t (unequal variances, Welch–Satterthwaite df; assumes near-normal run values)"
    min_runs = 2
    too_few = "too few runs (needs ≥ 2 per side)"

    def compare(self, x: np.ndarray, y: np.ndarray, alternative: Alternative) -> TwoSampleResult:
        n1, n2 = len(x), len(y)
        v1, v2 = float(x.var(ddof=1)) / n1, float(y.var(ddof=1)) / n2
        diff = float(x.mean() - y.mean()) * (1.0 if alternative == "greater" else -1.0)
        if v1 + v2 == 0.0:
            return TwoSampleResult(math.inf if diff > 0 else 0.0, 0.0 if diff > 0 else 1.0, "no variance")
        t = diff / math.sqrt(v1 + v2)
        df = (v1 + v2) ** 2 / (v1**2 / (n1 - 1) + v2**2 / (n2 - 1))
        return TwoSampleResult(t, student_t_sf(t, df), f"Student t, df {df:.1f}")


def pooled_t_p(x: np.ndarray, y: np.ndarray) -> float:
    """Two-sided p of Student's two-sample t with pooled variance (df = n₁ + n₂ − 2)."""
    n1, n2 = len(x), len(y)
    if n1 < 2 or n2 < 2:
        return 1.0
    df = n1 + n2 - 2
    pooled = (float(x.var(ddof=1)) * (n1 - 1) + float(y.var(ddof=1)) * (n2 - 1)) / df
    diff = float(y.mean() - x.mean())
    if pooled == 0.0:
        return 1.0 if diff == 0.0 else 0.0
    t = abs(diff) / math.sqrt(pooled * (1 / n1 + 1 / n2))
    return min(1.0, 2 * student_t_sf(t, df))


# --- change-point detection -----------------------------------------------------------------


@dataclass(frozen=True)
class ChangePoint:
    """A change in a series: ``index`` is the first element of the new segment; ``p_value`` of the
    test that accepted it; ``statistic`` the energy statistic Q̂ at the split."""

    index: int
    p_value: float
    statistic: float


class ChangePointDetector(Strategy):
    """Base class of the change-point detectors, registered in :data:`CHANGE_POINT_DETECTORS`."""

    registry: ClassVar[dict[str, type[Any]]] = {}

    def detect(self, series: Sequence[float]) -> list[ChangePoint]:
        """Change points of ``series``, sorted by index."""
        raise NotImplementedError


CHANGE_POINT_DETECTORS: dict[str, type[ChangePointDetector]] = ChangePointDetector.registry


def _prefix2(d: np.ndarray) -> np.ndarray:
    """2-D prefix sums with a zero border: P[..., i, j] = Σ d[..., :i, :j]."""
    shape = d.shape[:-2] + (d.shape[-2] + 1, d.shape[-1] + 1)
    p = np.zeros(shape)
    p[..., 1:, 1:] = d.cumsum(axis=-2).cumsum(axis=-1)
    return p


def energy_q(d: np.ndarray, min_size: int) -> tuple[np.ndarray, np.ndarray]:
    """E-Divisive statistic Q̂(τ) for every split τ of segments with pairwise distances ``d``
    (shape (..., T, T)); left = [0, τ), right = [τ, T), both ≥ ``min_size``. Returns (taus, Q̂
    of shape (..., len(taus)))::

        Ê = 2/(n₁n₂) Σ_{i<τ≤j} d_ij − 1/C(n₁,2) Σ_{i<k<τ} d_ik − 1/C(n₂,2) Σ_{τ≤j<k} d_jk
        Q̂ = n₁n₂/(n₁+n₂) · Ê
    """
    t_len = d.shape[-1]
    taus = np.arange(min_size, t_len - min_size + 1)
    if len(taus) == 0:
        return taus, np.zeros(d.shape[:-2] + (0,))
    p = _prefix2(d)
    n1 = taus.astype(float)
    n2 = (t_len - taus).astype(float)
    within_l = p[..., taus, taus]  # ordered pairs: 2 Σ_{i<k}
    cross = p[..., taus, t_len] - within_l
    within_r = p[..., t_len, t_len][..., None] - 2 * p[..., taus, t_len] + within_l
    e = 2 * cross / (n1 * n2)
    e = e - np.where(n1 > 1, within_l / np.maximum(n1 * (n1 - 1), 1), 0.0)
    e = e - np.where(n2 > 1, within_r / np.maximum(n2 * (n2 - 1), 1), 0.0)
    return taus, n1 * n2 / (n1 + n2) * e


def robust_series(z: np.ndarray, c: float = 3.0, w: int = 3) -> np.ndarray:
    """The series with its outlier runs replaced, positions kept.

    Run i is an outlier when it lies more than c·σ̂ above (or below) the median of the ``w`` runs
    before it **and** the median of the ``w`` runs after it (one side at the ends of the series);
    it is replaced by the median of the runs before it (after it, for the first run). σ̂ = 1.4826·median|z_{i+1} − z_i|/√2, the
    normal-consistent scale of run-to-run noise, which a step does not inflate. A noisy neighbour
    or a throttled clock slows one run (or two in a row: each still has a normal neighbourhood
    median); a real change moves every run after it, so its runs match the runs after them.
    Unchanged when fewer than 3 runs or σ̂ is 0."""
    n = len(z)
    if n < 3:
        return z
    s = 1.4826 * float(np.median(np.abs(np.diff(z)))) / math.sqrt(2.0)
    if s == 0.0:
        return z
    out = z.copy()
    for i in range(n):
        sides = [side for side in (z[max(0, i - w):i], z[i + 1:i + 1 + w]) if len(side)]
        meds = [float(np.median(side)) for side in sides]
        if all(z[i] - m > c * s for m in meds) or all(m - z[i] > c * s for m in meds):
            out[i] = meds[0]  # the level before it (after it, for the first run)
    return out


@dataclass
class EDivisive(ChangePointDetector, name="e-divisive"):
    """E-Divisive means: split where the energy statistic Q̂ is largest, test, recurse.

    ``significance``: ``t`` (default, Otava's choice) tests the chosen split with Student's
    two-sample t between the two segments it creates (deterministic); ``permutation`` is the original test
    (max Q̂ over ``permutations`` within-segment permutations, seeded by the data).
    ``p_value``: a change point is accepted when its two-sided p ≤ this (and, with the t test,
    the two segments' Mann–Whitney U two-sided p ≤ ``rank_p_value`` too: the change must show in
    the ranks, so a streak of runs from a slow mode seen before, or heavy tails, are not one); ``min_size``: runs per
    segment at least; ``robust``: work on :func:`robust_series` (outlier runs, more than ``clip``
    robust σ off their neighbours on both sides, replaced by the neighbours' median); ``exponent``: α of the energy
    distance |x − y|^α (0 < α < 2; 1 detects changes in mean); ``refine``: with the t test, the
    split moves to the best t within ± this many runs of Q̂'s choice.
    """

    description: ClassVar[str] = "E-Divisive means"
    p_value: float = 0.005
    permutations: int = 499
    min_size: int = 3
    robust: bool = True
    clip: float = 3.0
    exponent: float = 1.0
    significance: str = "t"
    rank_p_value: float = 0.02
    refine: int = 2
    _rng: np.random.Generator = field(init=False, repr=False, default_factory=np.random.default_rng)

    def detect(self, series: Sequence[float]) -> list[ChangePoint]:
        z = np.asarray(series, dtype=float)
        if len(z) < 2 * self.min_size:
            return []
        seed = int.from_bytes(hashlib.sha256(z.tobytes()).digest()[:8], "little")
        self._rng = np.random.default_rng(seed)
        if self.robust:
            z = robust_series(z, self.clip)
        d = np.abs(z[:, None] - z[None, :]) ** self.exponent
        bounds = [0, len(z)]
        found: list[ChangePoint] = []
        while True:
            best = self._best_split(d, bounds)
            if best is None:
                break
            tau, q = best
            if self.significance == "t":
                tau = self._refine(z, bounds, tau)
                p = self._t_p(z, bounds, tau)
                if self._rank_p(z, bounds, tau) > self.rank_p_value:
                    break
            else:
                p = self._permutation_p(d, bounds, q)
            if p > self.p_value:
                break
            found.append(ChangePoint(index=tau, p_value=p, statistic=q))
            bounds = sorted([*bounds, tau])
        return sorted(found, key=lambda c: c.index)

    def _best_split(self, d: np.ndarray, bounds: list[int]) -> tuple[int, float] | None:
        best: tuple[int, float] | None = None
        for lo, hi in itertools.pairwise(bounds):
            taus, q = energy_q(d[lo:hi, lo:hi], self.min_size)
            if len(taus) == 0:
                continue
            i = int(np.argmax(q))
            if best is None or q[i] > best[1]:
                best = (lo + int(taus[i]), float(q[i]))
        return best

    def _refine(self, z: np.ndarray, bounds: list[int], tau: int) -> int:
        """The split within ±``refine`` runs of ``tau`` (segment sizes kept ≥ ``min_size``) with the
        smallest t-test p: Q̂'s weight n₁n₂/(n₁+n₂) pulls a change near the end of a segment
        towards its middle by a run or two."""
        lo = max(b for b in bounds if b < tau)
        hi = min(b for b in bounds if b > tau)
        cands = [t for t in range(tau - self.refine, tau + self.refine + 1)
                 if t - lo >= self.min_size and hi - t >= self.min_size]
        return min(cands, key=lambda t: (pooled_t_p(z[lo:t], z[t:hi]), abs(t - tau)))

    def _rank_p(self, z: np.ndarray, bounds: list[int], tau: int) -> float:
        """Two-sided Mann–Whitney p of the segments left and right of ``tau``."""
        lo = max(b for b in bounds if b < tau)
        hi = min(b for b in bounds if b > tau)
        left, right = z[lo:tau].tolist(), z[tau:hi].tolist()
        mwu = MannWhitneyU()
        return min(1.0, 2 * min(mwu.test(left, right, "greater").p_value, mwu.test(left, right, "less").p_value))

    def _t_p(self, z: np.ndarray, bounds: list[int], tau: int) -> float:
        """Two-sided Student t p-value (pooled variance: under "no change" both segments have
        the same distribution) of the segments left and right of ``tau``."""
        lo = max(b for b in bounds if b < tau)
        hi = min(b for b in bounds if b > tau)
        return pooled_t_p(z[lo:tau], z[tau:hi])

    def _permutation_p(self, d: np.ndarray, bounds: list[int], observed: float) -> float:
        """(1 + #{permutations whose max Q̂ ≥ observed}) / (1 + permutations), permuting within each
        segment; stops early once p is certain to exceed the threshold."""
        allowed = self.p_value * (self.permutations + 1) - 1  # exceedances compatible with p ≤ p_value
        exceed, done, batch = 0, 0, 100
        while done < self.permutations:
            r = min(batch, self.permutations - done)
            best = np.full(r, -np.inf)
            for lo, hi in itertools.pairwise(bounds):
                n = hi - lo
                if n < 2 * self.min_size:
                    continue
                idx = np.argsort(self._rng.random((r, n)), axis=1)
                seg = d[lo:hi, lo:hi]
                dp = seg[idx[:, :, None], idx[:, None, :]]
                _, q = energy_q(dp, self.min_size)
                best = np.maximum(best, q.max(axis=1))
            exceed += int((best >= observed - 1e-12).sum())
            done += r
            if exceed > allowed:  # p > p_value already: stop, report the estimate so far
                return (1 + exceed) / (1 + done)
        return (1 + exceed) / (1 + self.permutations)
