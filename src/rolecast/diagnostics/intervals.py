"""Exact intervals and tests for counts: how many runs fell (Clopper-Pearson), how many false alarms a rule
raises per calm run (Garwood's Poisson interval), and whether one arm's rate exceeds another's (Fisher's exact
test for independent runs, the exact McNemar test for runs paired by seed).

Pure functions of integers. They are computed from the binomial, Poisson and hypergeometric distributions
directly (sums of exact terms in log space, and bisection for the interval ends), because the project has no
scipy; tests check them against closed forms (0 of n, n of n, 1 of 2, 0 and 1 events).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

Alternative = Literal["greater", "less", "two-sided"]
_BISECTIONS = 200  # halves [0, hi] well past double precision


def _log_binom_pmf(i: int, n: int, p: float) -> float:
    if p <= 0.0:
        return 0.0 if i == 0 else -math.inf
    if p >= 1.0:
        return 0.0 if i == n else -math.inf
    return math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * math.log(p) + (n - i) * math.log1p(-p)


def binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    return min(1.0, sum(math.exp(_log_binom_pmf(i, n, p)) for i in range(k + 1)))


def poisson_cdf(k: int, mu: float) -> float:
    """P(X <= k) for X ~ Poisson(mu)."""
    if k < 0:
        return 0.0
    if mu <= 0.0:
        return 1.0
    return min(1.0, sum(math.exp(i * math.log(mu) - mu - math.lgamma(i + 1)) for i in range(k + 1)))


def _solve_decreasing(f: Callable[[float], float], target: float, hi: float) -> float:
    """The x in [0, hi] with f(x) = target, for f decreasing in x (bisection)."""
    lo = 0.0
    for _ in range(_BISECTIONS):
        mid = (lo + hi) / 2
        if f(mid) > target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _check_level(level: float) -> float:
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    return (1.0 - level) / 2


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) interval for a proportion k / n: the p whose binomial tails at k are
    (1 - level) / 2 each. (0, 1) for n = 0 (nothing observed)."""
    if n < 0 or not 0 <= k <= n:
        raise ValueError(f"clopper_pearson: need 0 <= k <= n, got k={k}, n={n}")
    tail = _check_level(level)
    if n == 0:
        return 0.0, 1.0
    # P(X >= k | p) = 1 - cdf(k - 1) grows with p; P(X <= k | p) = cdf(k) falls with p
    low = 0.0 if k == 0 else _solve_decreasing(lambda p: binomial_cdf(k - 1, n, p), 1.0 - tail, 1.0)
    high = 1.0 if k == n else _solve_decreasing(lambda p: binomial_cdf(k, n, p), tail, 1.0)
    return low, high


def poisson_interval(k: int, level: float = 0.95) -> tuple[float, float]:
    """The exact (Garwood) interval for the mean of a Poisson count observed as k."""
    if k < 0:
        raise ValueError(f"poisson_interval: need k >= 0, got {k}")
    tail = _check_level(level)
    hi = k + 20.0 * math.sqrt(k + 1.0) + 20.0  # far past the upper end
    low = 0.0 if k == 0 else _solve_decreasing(lambda mu: poisson_cdf(k - 1, mu), 1.0 - tail, hi)
    high = _solve_decreasing(lambda mu: poisson_cdf(k, mu), tail, hi)
    return low, high


@dataclass(frozen=True)
class Rate:
    """count / exposure (e.g. false alarms per calm run) with an exact interval."""

    count: int
    exposure: int
    low: float
    high: float

    @property
    def value(self) -> float:
        return self.count / self.exposure if self.exposure else math.nan


def rate_interval(count: int, exposure: int, level: float = 0.95) -> Rate:
    """Events per unit (false alarms per calm run): the count's Garwood interval divided by the exposure.
    NaN ends with no exposure."""
    if exposure <= 0:
        return Rate(count, exposure, math.nan, math.nan)
    low, high = poisson_interval(count, level)
    return Rate(count, exposure, low / exposure, high / exposure)


@dataclass(frozen=True)
class Proportion:
    """k of n with its exact (Clopper-Pearson) interval."""

    k: int
    n: int
    low: float
    high: float

    @property
    def value(self) -> float:
        return self.k / self.n if self.n else math.nan


def proportion(k: int, n: int, level: float = 0.95) -> Proportion:
    low, high = clopper_pearson(k, n, level)
    return Proportion(k, n, low, high)


def _hypergeom_pmf(x: int, total: int, hits: int, draws: int) -> float:
    return math.comb(hits, x) * math.comb(total - hits, draws - x) / math.comb(total, draws)


def fisher_exact(b_hits: int, b_n: int, a_hits: int, a_n: int, alternative: Alternative = "greater") -> float:
    """Fisher's exact test of b's rate against a's (independent runs): the p-value of b's hit count given the
    margins. "greater": b's rate exceeds a's; "two-sided": the tables no more likely than the observed one."""
    if not (0 <= b_hits <= b_n and 0 <= a_hits <= a_n):
        raise ValueError(f"fisher_exact: need 0 <= hits <= n, got {b_hits}/{b_n} and {a_hits}/{a_n}")
    total, hits = b_n + a_n, b_hits + a_hits
    support = range(max(0, hits - a_n), min(hits, b_n) + 1)
    pmf = {x: _hypergeom_pmf(x, total, hits, b_n) for x in support}
    if alternative == "greater":
        p = sum(v for x, v in pmf.items() if x >= b_hits)
    elif alternative == "less":
        p = sum(v for x, v in pmf.items() if x <= b_hits)
    else:
        observed = pmf[b_hits]
        p = sum(v for v in pmf.values() if v <= observed * (1 + 1e-9))
    return min(1.0, p)


def mcnemar_exact(b_only: int, a_only: int, alternative: Alternative = "greater") -> float:
    """The exact McNemar test for paired runs (one run per arm per seed): only the discordant seeds count,
    b_only (b hit, a did not) and a_only; under no difference each is b_only with probability 1/2."""
    if b_only < 0 or a_only < 0:
        raise ValueError(f"mcnemar_exact: counts must be >= 0, got {b_only} and {a_only}")
    n = b_only + a_only
    if alternative == "greater":
        return 1.0 - binomial_cdf(b_only - 1, n, 0.5)
    if alternative == "less":
        return binomial_cdf(b_only, n, 0.5)
    return min(1.0, 2 * min(binomial_cdf(b_only, n, 0.5), 1.0 - binomial_cdf(b_only - 1, n, 0.5)))
