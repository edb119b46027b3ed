"""Proportions and paired margins with 95% normal-approximation intervals, for role competence."""

from __future__ import annotations

import math
from collections.abc import Sequence


def half_width(p: float, n: int) -> float:
    """95% normal-approximation half-width of a proportion p over n trials."""
    return 1.96 * math.sqrt(max(p * (1 - p), 0.0) / max(n, 1))


def paired_margin(model: Sequence[bool], baseline: Sequence[float]) -> dict[str, float]:
    """Mean of model - baseline over the same examples, with a 95% half-width (paired, so tighter)."""
    d = [float(m) - b for m, b in zip(model, baseline, strict=True)]
    if not d:
        return {"margin": 0.0, "margin_ci": 0.0}
    mean = sum(d) / len(d)
    var = sum((x - mean) ** 2 for x in d) / max(len(d) - 1, 1)
    return {"margin": round(mean, 4), "margin_ci": round(1.96 * math.sqrt(var / len(d)), 4)}


def rate(flags: Sequence[bool | float]) -> tuple[float, float]:
    p = sum(flags) / max(len(flags), 1)
    return round(p, 4), round(half_width(p, len(flags)), 4)
