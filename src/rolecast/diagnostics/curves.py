"""Accuracy curves: base, peak, final, gain over base with intervals, and the terminal-cliff detector.

Pure functions over rows already read from `eval.jsonl` (one row per evaluation, see `evaluation.py`) or
`metrics.jsonl`; nothing here touches files or models. The rules, with their defaults, are documented in
docs/analysis.md and restated on each function.

Intervals: an evaluation row carries pass@1, its standard error across problems and the number of problems.
Rows do not store per-problem results today, so two evaluations are compared as independent samples
(unpaired): SE of a difference = sqrt(se_a^2 + se_b^2). The evaluations of one run use the same problems, so
their errors are positively correlated and the unpaired interval is conservative (too wide). When rows carry
`per_problem` (a list of per-problem pass fractions in the same problem order), comparisons are paired: the
SE of the mean of per-problem differences.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from statistics import NormalDist
from typing import Any, Literal, get_args

from rolecast.core.rundir import EVAL

Z_95 = 1.959963984540054  # two-sided 95% normal quantile

# Student's t quantiles by degrees of freedom (standard tables), for intervals over a few seeds: 0.975 (a
# two-sided 95% interval) and 0.80 (80% power, for the smallest detectable difference). Past the table, a df
# uses the nearest smaller entry (slightly conservative); df >= 120 is taken as normal.
_T975 = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262,
    10: 2.228,
    12: 2.179,
    15: 2.131,
    20: 2.086,
    30: 2.042,
    60: 2.000,
    120: 1.980,
}
_T80 = {
    1: 1.376,
    2: 1.061,
    3: 0.978,
    4: 0.941,
    5: 0.920,
    6: 0.906,
    7: 0.896,
    8: 0.889,
    9: 0.883,
    10: 0.879,
    12: 0.873,
    15: 0.866,
    20: 0.860,
    30: 0.854,
    60: 0.848,
    120: 0.845,
}


def t_quantile(p: float, df: float) -> float:
    """Student's t quantile for p in {0.975, 0.80}; df = inf (or >= 120 past the table) gives the normal one."""
    table = {0.975: _T975, 0.80: _T80}.get(p)
    if table is None:
        raise ValueError(f"t_quantile: p must be 0.975 or 0.80, got {p}")
    if df < 1:
        raise ValueError(f"t_quantile: need df >= 1, got {df}")
    if math.isinf(df) or df > 120:
        return NormalDist().inv_cdf(p)
    return table[max(d for d in table if d <= df)]


@dataclass
class PairedDifference:
    """b - a over paired seeds: mean, SE, the 95% interval's multiplier (t with k - 1 df over k >= 2 seeds;
    normal for one seed, whose SE is the two evaluations' own), and the smallest difference this design
    detects with 95% confidence and 80% power ((t_0.975 + t_0.80) x SE)."""

    mean: float
    se: float
    seeds: int
    multiplier: float
    detectable: float

    @property
    def low(self) -> float:
        return self.mean - self.multiplier * self.se

    @property
    def high(self) -> float:
        return self.mean + self.multiplier * self.se


def mean_over_seeds(values: Sequence[float], ses: Sequence[float]) -> PairedDifference:
    """The mean of one measurement per seed (`values`, each with its own evaluation SE in `ses`). The SE is the
    larger of the spread over seeds (sd / sqrt(k)) and the evaluations' own noise (sqrt(sum of their
    variances) / k): with 2-3 seeds the sample spread alone can come out implausibly small."""
    k = len(values)
    if k == 0 or len(ses) != k:
        raise ValueError(f"mean_over_seeds: need one SE per value and at least one value, got {k} and {len(ses)}")
    mean = sum(values) / k
    se = math.sqrt(sum(x**2 for x in ses)) / k
    if k >= 2:
        sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (k - 1))
        se = max(se, sd / math.sqrt(k))
    df = k - 1 if k >= 2 else math.inf
    q, power = t_quantile(0.975, df), t_quantile(0.80, df)
    return PairedDifference(mean, se, k, q, (q + power) * se)


def paired_difference(pairs: Sequence[tuple[CurvePoint, CurvePoint]]) -> PairedDifference:
    """`pairs`: (a, b) points of the same seed (same problems, same evaluation problems): the mean over seeds
    of b - a, each difference's own SE the two evaluations' combined."""
    if not pairs:
        raise ValueError("paired_difference: no pairs")
    return mean_over_seeds([b.value - a.value for a, b in pairs], [math.hypot(a.se, b.se) for a, b in pairs])


@dataclass(frozen=True)
class CurvePoint:
    """One measurement of accuracy: an evaluation (or a window of training steps)."""

    step: int
    value: float  # pass@1 (or training accuracy)
    se: float  # its standard error, floored so that 0 and 1 still carry sampling error
    n: int  # problems (or episodes) behind it
    tag: str = ""
    per_problem: tuple[float, ...] | None = None  # for paired comparisons, when the source stores them


@dataclass(frozen=True)
class Difference:
    """b - a with a normal-approximation interval."""

    value: float
    se: float
    low: float
    high: float
    paired: bool

    @property
    def significant(self) -> bool:
        return self.low > 0 or self.high < 0


@dataclass
class Cliff:
    """A terminal cliff: from `step` to the end every evaluation is significantly below the peak."""

    step: int  # the first evaluation of the fall
    peak_step: int
    drop: Difference  # final - peak (negative), its interval at the rule's z
    points_below: int
    z: float


# The cliff types (docs/analysis.md, "Cliff types"; `classify_cliff`), the study's cliff first:
# fall_after_gain: some evaluation significantly above the base, then the terminal-fall rule (a rise, then a fall);
# decline_from_base: no evaluation significantly above the base, and the end significantly below it;
# fall_without_gain: the terminal-fall rule, but neither a significant gain nor a decline; none: no fall.
CliffType = Literal["fall_after_gain", "decline_from_base", "fall_without_gain", "none"]
CLIFF_TYPES: tuple[CliffType, ...] = get_args(CliffType)  # in that order


@dataclass
class CliffClass:
    """Which kind of fall a curve shows, and the two tests against the base that decide it.

    `rise` is the trained point with the largest z = (point - base) / SE against the base, at the Bonferroni
    z for the m trained points (`rise_z`); `rise_step` the first trained point significantly above the base
    (None: no significant gain anywhere). `decline` is final - base at the uncorrected z (`decline_z`): the
    final is fixed in advance, not chosen."""

    type: CliffType
    rise: Difference
    rise_point_step: int  # the step of the point `rise` compares with the base
    rise_step: int | None
    rise_z: float
    decline: Difference
    decline_z: float

    @property
    def gained(self) -> bool:
        return self.rise_step is not None

    @property
    def declined(self) -> bool:
        return self.decline.high < 0


@dataclass
class CurveSummary:
    source: str  # "eval.jsonl" or "metrics.jsonl:accuracy"
    points: list[CurvePoint]
    base: CurvePoint | None
    peak: CurvePoint
    final: CurvePoint
    gain: Difference | None  # final - base
    peak_gain: Difference | None  # peak - base
    final_vs_peak: Difference
    cliff: Cliff | None
    rule: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    cliff_class: CliffClass | None = None  # None without a base point or a trained point

    @property
    def cliff_type(self) -> CliffType | None:
        """The cliff's type (`classify_cliff`), or None when the curve has no base or nothing after it."""
        return self.cliff_class.type if self.cliff_class else None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for p in d["points"]:
            p.pop("per_problem", None)
        for key in ("base", "peak", "final"):
            if d[key]:
                d[key].pop("per_problem", None)
        return d


def floored_se(value: float, n: int, se: float | None = None) -> float:
    """The standard error of a proportion over n problems: the reported one, but never below the binomial SE
    of the Laplace-smoothed rate (c + 1) / (n + 2); so 0/n and n/n still carry sampling error."""
    n = max(int(n), 1)
    p = (value * n + 1.0) / (n + 2.0)
    floor = math.sqrt(p * (1 - p) / n)
    return max(se or 0.0, floor)


def difference(a: CurvePoint, b: CurvePoint, z: float = Z_95) -> Difference:
    """b - a; paired when both points carry per-problem results over the same number of problems."""
    if a.per_problem is not None and b.per_problem is not None and len(a.per_problem) == len(b.per_problem) > 1:
        d = [y - x for x, y in zip(a.per_problem, b.per_problem, strict=True)]
        mean = sum(d) / len(d)
        var = sum((x - mean) ** 2 for x in d) / (len(d) - 1)
        # a floor of half a problem's worth of error keeps identical per-problem vectors from claiming certainty
        se = max(math.sqrt(var / len(d)), 0.5 / len(d))
        return Difference(mean, se, mean - z * se, mean + z * se, True)
    value = b.value - a.value
    se = math.sqrt(a.se**2 + b.se**2)
    return Difference(value, se, value - z * se, value + z * se, False)


def eval_points(rows: Iterable[dict[str, Any]], notes: list[str] | None = None) -> list[CurvePoint]:
    """Curve points from eval.jsonl rows: one per step, in step order.

    Rows of another (task, split, workflow) than the most common one are left out (e.g. a base-model
    `rolecast eval --workflow ...` appended to the same file); when a step was evaluated more than once the
    evaluation with the most samples (n_problems * n_samples) wins, the later one on ties."""
    notes = notes if notes is not None else []
    rows = [
        r
        for r in rows
        if isinstance(r, dict) and isinstance(r.get("pass@1"), (int, float)) and isinstance(r.get("step"), int)
    ]
    if not rows:
        return []
    keys = Counter((r.get("task"), r.get("split"), r.get("workflow")) for r in rows)
    main, _ = keys.most_common(1)[0]
    if len(keys) > 1:
        dropped = sum(c for k, c in keys.items() if k != main)
        notes.append(f"{EVAL}: {dropped} row(s) of another task/split/workflow than {main} left out")
    best: dict[int, dict[str, Any]] = {}
    for r in rows:
        if (r.get("task"), r.get("split"), r.get("workflow")) != main:
            continue
        size = int(r.get("n_problems") or 0) * int(r.get("n_samples") or 1)
        old = best.get(r["step"])
        if old is None or size >= int(old.get("n_problems") or 0) * int(old.get("n_samples") or 1):
            best[r["step"]] = r
    out = []
    for step in sorted(best):
        r = best[step]
        n = int(r.get("n_problems") or 0)
        per = r.get("per_problem")
        per_t = tuple(float(x) for x in per) if isinstance(per, list) and len(per) == n and n else None
        out.append(
            CurvePoint(
                step,
                float(r["pass@1"]),
                floored_se(float(r["pass@1"]), n, r.get("stderr")),
                n,
                str(r.get("tag", "")),
                per_t,
            )
        )
    return out


def training_points(metrics: Sequence[dict[str, Any]], key: str = "accuracy", window: int = 5) -> list[CurvePoint]:
    """Curve points from a per-step training metric (e.g. "accuracy"): the mean over consecutive windows of
    `window` steps, with a binomial SE over the episodes behind them (metrics' "episodes" count, else 1 per step).
    A fallback for runs without evaluations; training accuracy is on training problems and sampled."""
    rows = [m for m in metrics if isinstance(m.get(key), (int, float)) and isinstance(m.get("step"), int)]
    out = []
    for i in range(0, len(rows), max(window, 1)):
        chunk = rows[i : i + window]
        n = int(sum(float(m.get("episodes") or 1) for m in chunk))
        v = sum(float(m[key]) for m in chunk) / len(chunk)
        out.append(CurvePoint(int(chunk[-1]["step"]), v, floored_se(v, n), n, "train"))
    return out


def cliff_z(n_points: int, alpha: float = 0.05) -> float:
    """The z a fall must exceed: two-sided alpha, Bonferroni-corrected for the n_points candidate peaks (the
    peak is the maximum of n noisy points, so it sits above the truth; an uncorrected 1.96 calls noise a cliff)."""
    return NormalDist().inv_cdf(1 - alpha / (2 * max(n_points, 1)))


def detect_cliff(
    points: Sequence[CurvePoint],
    *,
    min_points: int = 2,
    alpha: float = 0.05,
    z: float | None = None,
    min_drop: float = 0.02,
) -> Cliff | None:
    """The terminal-cliff rule. Let the peak be the highest point (the earliest on ties). A cliff starts at the
    first point after the peak from which *every* later point, to the end of the curve, is below the peak by more
    than z standard errors of the difference (unpaired, or paired where per-problem results exist) and by at
    least `min_drop` in absolute terms; there must be at least `min_points` such points. A point back within
    the band ("recovery") resets the search, so a dip that recovers is no cliff.

    Defaults: min_points 2, min_drop 0.02, z = `cliff_z(len(points), alpha=0.05)` (e.g. 2.84 for 11 points)."""
    if len(points) < 2:
        return None
    z = cliff_z(len(points), alpha) if z is None else z
    peak_i = max(range(len(points)), key=lambda i: (points[i].value, -i))
    peak = points[peak_i]

    def below(p: CurvePoint) -> bool:
        d = difference(peak, p, z)
        return d.high < 0 and -d.value >= min_drop

    start = None
    for i in range(peak_i + 1, len(points)):
        if below(points[i]):
            start = i if start is None else start
        else:
            start = None  # recovered: a later fall must start again
    if start is None or len(points) - start < min_points:
        return None
    return Cliff(points[start].step, peak.step, difference(peak, points[-1], z), len(points) - start, z)


def classify_cliff(
    points: Sequence[CurvePoint],
    cliff: Cliff | None,
    *,
    gain_alpha: float = 0.05,
    decline_alpha: float = 0.05,
) -> CliffClass | None:
    """Tell the study's cliff (a rise, then a terminal fall) from a decline from the base.

    `points` in step order, the first the base (step 0); `cliff` what `detect_cliff` found on the same points.
    Every comparison with the base is a `difference` (unpaired SE sqrt(se_base^2 + se_point^2), or paired
    per-problem), so the base's own sampling noise is in each test.
    - gain: some trained point (one after the base) is above the base by more than z_rise SEs of the
      difference, z_rise = `cliff_z(m, gain_alpha)` with m the number of trained points (the best of m noisy
      points is selected, as the peak is for the cliff rule): 2.64 for 6 trained points at 0.05;
    - decline: final - base below 0 by more than z = Phi^-1(1 - decline_alpha / 2) SEs (1.96 at 0.05).
    Type: `fall_after_gain` when there is a gain and a cliff; else `decline_from_base` when there is no gain and
    a decline (with or without the cliff rule); else `fall_without_gain` when there is a cliff; else `none`.
    None when the curve has no base at step 0 or no point after it."""
    points = sorted(points, key=lambda p: p.step)
    if len(points) < 2 or points[0].step != 0:
        return None
    base, trained = points[0], points[1:]
    z_rise = cliff_z(len(trained), gain_alpha)
    diffs = [difference(base, p, z_rise) for p in trained]
    best = max(range(len(trained)), key=lambda i: (diffs[i].value / diffs[i].se if diffs[i].se > 0 else 0.0, -i))
    rise_step = next((p.step for p, d in zip(trained, diffs, strict=True) if d.low > 0), None)
    z_decline = NormalDist().inv_cdf(1 - decline_alpha / 2)
    decline = difference(base, trained[-1], z_decline)
    gained, declined = rise_step is not None, decline.high < 0
    if gained and cliff is not None:
        kind: CliffType = "fall_after_gain"
    elif not gained and declined:
        kind = "decline_from_base"
    elif cliff is not None:
        kind = "fall_without_gain"
    else:
        kind = "none"
    return CliffClass(kind, diffs[best], trained[best].step, rise_step, z_rise, decline, z_decline)


def summarize_curve(
    points: Sequence[CurvePoint],
    *,
    source: str = EVAL,
    min_points: int = 2,
    alpha: float = 0.05,
    min_drop: float = 0.02,
    z: float = Z_95,
    gain_alpha: float = 0.05,
    decline_alpha: float = 0.05,
    notes: list[str] | None = None,
) -> CurveSummary | None:
    """Base (the step-0 point, if evaluated), peak (highest, earliest on ties), final (last point), gain = final -
    base and peak gain = peak - base with z-intervals (95% by default), the cliff per `detect_cliff` (its own
    corrected z from alpha) and its type per `classify_cliff` (gain_alpha, decline_alpha). None for an empty
    curve."""
    if not points:
        return None
    points = sorted(points, key=lambda p: p.step)
    base = points[0] if points[0].step == 0 else None
    peak = max(points, key=lambda p: (p.value, -p.step))
    final = points[-1]
    cliff = detect_cliff(points, min_points=min_points, alpha=alpha, min_drop=min_drop)
    cliff_class = classify_cliff(points, cliff, gain_alpha=gain_alpha, decline_alpha=decline_alpha)
    return CurveSummary(
        source=source,
        points=list(points),
        base=base,
        peak=peak,
        final=final,
        gain=difference(base, final, z) if base is not None and final is not base else None,
        peak_gain=difference(base, peak, z) if base is not None and peak is not base else None,
        final_vs_peak=difference(peak, final, z),
        cliff=cliff,
        rule={
            "min_points": min_points,
            "alpha": alpha,
            "cliff_z": cliff_z(len(points), alpha),
            "min_drop": min_drop,
            "interval_z": z,
            "gain_alpha": gain_alpha,
            "decline_alpha": decline_alpha,
        },
        notes=list(notes or []),
        cliff_class=cliff_class,
    )
