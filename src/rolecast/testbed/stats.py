"""Proportions and paired margins with 95% normal-approximation intervals, for role competence.

Two kinds of sample. The noise-model evaluation (`builder.evaluate_roles`) draws one example per problem, so its
examples are independent (`rate`, `paired_margin`). The model's own rollouts are not: several samples of the same
problem, and up to three evaluator verdicts per episode, share the problem's difficulty, so treating them as
independent understates the interval. The `clustered_*` functions use the cluster-robust (sandwich) variance with
the problem as the cluster, the standard error a clustered eval reports (Miller 2024, "Adding Error Bars to
Evals"): the influence of each cluster is the sum of its members' deviations, and the variance is
G/(G-1) * sum of squared cluster influences. With one member per cluster it is the ordinary paired variance.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

Z95 = 1.96


def half_width(p: float, n: int) -> float:
    """95% normal-approximation half-width of a proportion p over n trials."""
    return Z95 * math.sqrt(max(p * (1 - p), 0.0) / max(n, 1))


def paired_margin(model: Sequence[bool], baseline: Sequence[float]) -> dict[str, float]:
    """Mean of model - baseline over the same examples, with a 95% half-width (paired, so tighter)."""
    d = [float(m) - b for m, b in zip(model, baseline, strict=True)]
    if not d:
        return {"margin": 0.0, "margin_ci": 0.0}
    mean = sum(d) / len(d)
    var = sum((x - mean) ** 2 for x in d) / max(len(d) - 1, 1)
    return {"margin": round(mean, 4), "margin_ci": round(Z95 * math.sqrt(var / len(d)), 4)}


def rate(flags: Sequence[bool | float]) -> tuple[float, float]:
    p = sum(flags) / max(len(flags), 1)
    return round(p, 4), round(half_width(p, len(flags)), 4)


def _cluster_sums(values: Sequence[float], clusters: Sequence[Hashable]) -> dict[Hashable, float]:
    sums: dict[Hashable, float] = {}
    for v, c in zip(values, clusters, strict=True):
        sums[c] = sums.get(c, 0.0) + v
    return sums


def _robust_half_width(influence: Sequence[float]) -> float:
    """95% half-width from per-cluster influences (each already divided by the total count)."""
    g = len(influence)
    if g < 2:
        return 0.0
    return Z95 * math.sqrt(g / (g - 1) * sum(u * u for u in influence))


def clustered_mean(values: Sequence[float], clusters: Sequence[Hashable]) -> tuple[float, float]:
    """Mean of `values` and its 95% half-width, the observations clustered by `clusters` (e.g. problem ids)."""
    n = len(values)
    if n == 0:
        return 0.0, 0.0
    mean = sum(values) / n
    sums = _cluster_sums([v - mean for v in values], clusters)
    return mean, _robust_half_width([s / n for s in sums.values()])


def clustered_rate(flags: Sequence[bool | float], clusters: Sequence[Hashable]) -> tuple[float, float]:
    """A proportion and its clustered 95% half-width, rounded as `rate` rounds."""
    p, hw = clustered_mean([float(f) for f in flags], clusters)
    return round(p, 4), round(hw, 4)


def clustered_margin(
    model: Sequence[bool], baseline: Sequence[float], clusters: Sequence[Hashable]
) -> dict[str, float]:
    """`paired_margin` with the pairs clustered: the mean of model - baseline and its clustered half-width."""
    d = [float(m) - b for m, b in zip(model, baseline, strict=True)]
    mean, hw = clustered_mean(d, clusters)
    return {"margin": round(mean, 4), "margin_ci": round(hw, 4)}


def clustered_balanced_accuracy(
    accept: Sequence[bool], truth: Sequence[bool], clusters: Sequence[Hashable]
) -> tuple[float, float, float, float]:
    """A judge's (true-positive rate, true-negative rate, balanced accuracy, its clustered 95% half-width).

    Each rate is a ratio over the clustered verdicts; a cluster's influence on the balanced accuracy is half the
    sum of its influences on the two rates (linearized), so a problem whose verdicts are right or wrong together,
    on both sides, counts once.
    """
    pos = sum(truth)
    neg = len(truth) - pos
    tpr = sum(a for a, t in zip(accept, truth, strict=True) if t) / max(pos, 1)
    tnr = sum(not a for a, t in zip(accept, truth, strict=True) if not t) / max(neg, 1)
    infl: dict[Hashable, float] = {}
    for a, t, c in zip(accept, truth, clusters, strict=True):
        u = (float(a) - tpr) / pos if t else (float(not a) - tnr) / neg
        infl[c] = infl.get(c, 0.0) + u / 2
    return tpr, tnr, (tpr + tnr) / 2, _robust_half_width(list(infl.values()))


def margin_text(m: dict[str, float], digits: int = 2) -> str:
    """A margin dict (`paired_margin`, `clustered_margin`) as `+0.05 ± 0.04`."""
    return f"{m['margin']:+.{digits}f} ± {m['margin_ci']:.{digits}f}"
