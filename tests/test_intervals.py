"""Exact intervals and tests for counts (diagnostics/intervals.py) against closed forms worked by hand."""

from __future__ import annotations

import math

import pytest

from rolecast.diagnostics.intervals import (
    binomial_cdf,
    clopper_pearson,
    fisher_exact,
    mcnemar_exact,
    poisson_interval,
    proportion,
    rate_interval,
)


def test_clopper_pearson_closed_forms():
    # 0 of n: the upper end solves (1 - p)^n = 0.025; n of n: the lower end solves p^n = 0.025
    assert clopper_pearson(0, 10) == pytest.approx((0.0, 1 - 0.025 ** (1 / 10)), abs=1e-9)  # 0.30850
    assert clopper_pearson(10, 10) == pytest.approx((0.025 ** (1 / 10), 1.0), abs=1e-9)  # 0.69150
    # 1 of 2: 1 - (1 - p)^2 = 0.025 -> p = 1 - sqrt(0.975); 1 - p^2 = 0.025 -> p = sqrt(0.975)
    assert clopper_pearson(1, 2) == pytest.approx((1 - math.sqrt(0.975), math.sqrt(0.975)), abs=1e-9)
    assert clopper_pearson(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        clopper_pearson(3, 2)


def test_clopper_pearson_ends_have_the_tail_probability():
    low, high = clopper_pearson(4, 8)
    assert 1 - binomial_cdf(3, 8, low) == pytest.approx(0.025, abs=1e-9)
    assert binomial_cdf(4, 8, high) == pytest.approx(0.025, abs=1e-9)
    p = proportion(2, 3)
    assert (p.k, p.n, p.value) == (2, 3, pytest.approx(2 / 3)) and p.low < 2 / 3 < p.high


def test_garwood_poisson_interval_closed_forms():
    # 0 events: exp(-mu) = 0.025 -> mu = -ln 0.025 = 3.689
    assert poisson_interval(0) == pytest.approx((0.0, -math.log(0.025)), abs=1e-9)
    # 1 event: 1 - exp(-mu) = 0.025 -> mu = -ln 0.975; exp(-mu)(1 + mu) = 0.025 at mu = 5.5716 (tables: 5.572)
    low, high = poisson_interval(1)
    assert low == pytest.approx(-math.log(0.975), abs=1e-9)
    assert math.exp(-high) * (1 + high) == pytest.approx(0.025, abs=1e-12) and high == pytest.approx(5.5716, abs=1e-4)


def test_false_alarms_per_calm_run_divide_the_count_interval_by_the_runs():
    r = rate_interval(3, 20)
    low, high = poisson_interval(3)
    assert (r.value, r.low, r.high) == (pytest.approx(0.15), pytest.approx(low / 20), pytest.approx(high / 20))
    assert math.isnan(rate_interval(0, 0).low)


def test_fisher_exact_matches_the_cliff_labs_two_of_three_against_none():
    # Hypergeometric(N=6, K=2 hits, 3 drawn for b): P(X=2) = 4/20, P(X=1) = 12/20, P(X=0) = 4/20
    assert fisher_exact(2, 3, 0, 3, "greater") == pytest.approx(0.2)
    assert fisher_exact(2, 3, 0, 3, "two-sided") == pytest.approx(0.4)  # the p = 0.4
    assert fisher_exact(2, 3, 0, 3, "less") == pytest.approx(1.0)
    assert fisher_exact(0, 3, 2, 3, "greater") == pytest.approx(1.0)


def test_exact_mcnemar_counts_only_discordant_seeds():
    # 5 seeds where only b fell, 1 where only a fell: P(X >= 5 | 6, 1/2) = (6 + 1) / 64
    assert mcnemar_exact(5, 1, "greater") == pytest.approx(7 / 64)
    assert mcnemar_exact(5, 1, "two-sided") == pytest.approx(14 / 64)
    assert mcnemar_exact(0, 0, "greater") == pytest.approx(1.0)
