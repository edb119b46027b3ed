"""What the lab scripts share (scripts/cliff_lab.py, scripts/lab2.py): copying a sweep's small raw results, run
points as JSON, the mean over seeds per step with its band, runs paired by seed, and the paired t-test a plan's
`final` / `peak` / `gain` decisions name.

A lab commits its raw results (metrics, evaluations, configs; never checkpoints or episodes) so that its tables
and figures regenerate from them without retraining; `collect_sweep` is that copy. Pure but for it.
"""

from __future__ import annotations

import filecmp
import math
import shutil
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rolecast.core.rundir import CONFIG, DONE, ERROR, EVAL, METRICS, RESUMES, STOPPED, SWEEP_STATUS
from rolecast.diagnostics.curves import CurvePoint, mean_over_seeds
from rolecast.plan.registration import REGISTRATION

CELL_FILES = (CONFIG, METRICS, EVAL, DONE, STOPPED, ERROR, RESUMES)  # per cell; what a table or figure can read
SWEEP_FILES = (SWEEP_STATUS, REGISTRATION)  # the sweep's own record: its cells, and its registered design


def _copy(src: Path, dest: Path) -> bool:
    """Copy a file unless an identical one is there already (so a second collect touches nothing)."""
    if dest.is_file() and filecmp.cmp(src, dest, shallow=False):
        return False
    shutil.copy2(src, dest)
    return True


def collect_sweep(sweep: Path, dest: Path) -> tuple[int, int]:
    """Copy a sweep's small raw results into `dest`: `SWEEP_FILES`, and for every cell directory (one holding a
    config.yaml) its `CELL_FILES`; nothing else (no checkpoints, no episodes). Idempotent: files already there
    with the same bytes are left alone. Returns (cells, files copied). ValueError when `sweep` is no directory."""
    if not sweep.is_dir():
        raise ValueError(f"{sweep}: not a directory (the sweep's run root)")
    dest.mkdir(parents=True, exist_ok=True)
    copied = 0
    for name in SWEEP_FILES:
        if (sweep / name).is_file():
            copied += _copy(sweep / name, dest / name)
    cells = sorted(p for p in sweep.iterdir() if (p / CONFIG).is_file())
    for cell in cells:
        (dest / cell.name).mkdir(exist_ok=True)
        for name in CELL_FILES:
            if (cell / name).is_file():
                copied += _copy(cell / name, dest / cell.name / name)
    return len(cells), copied


def point_record(p: CurvePoint) -> dict[str, Any]:
    """A curve point as JSON (per-problem results and the tag left out)."""
    return {"step": p.step, "value": p.value, "se": p.se, "n": p.n}


def curve_point(d: Mapping[str, Any]) -> CurvePoint:
    return CurvePoint(d["step"], d["value"], d["se"], d["n"])


def band(runs: Sequence[Mapping[str, Any]]) -> dict[int, tuple[float, float, float]]:
    """step -> (mean, low, high) over runs (each with `points`, as `point_record` writes them): the mean over
    the seeds that evaluated the step with its 95% interval (t over seeds, its SE the larger of their spread
    and the evaluations' own noise; one seed: the evaluation's own interval, so one evaluation's noise never
    reads as signal)."""
    by_step: dict[int, list[Mapping[str, Any]]] = defaultdict(list)
    for r in runs:
        for p in r["points"]:
            by_step[p["step"]].append(p)
    out = {}
    for step, ps in sorted(by_step.items()):
        m = mean_over_seeds([p["value"] for p in ps], [p["se"] for p in ps])
        out[step] = (m.mean, m.low, m.high)
    return out


def seeds_text(counts: set[int]) -> str:
    """How many seeds a band averages, for a legend: '1 seed: its evaluation's 95% interval', 'mean of 3
    seeds, 95% interval', 'mean of 2-3 seeds, 95% interval'."""
    n = min(counts), max(counts)
    if n == (1, 1):
        return "1 seed: its evaluation's 95% interval"
    seeds = f"{n[0]} seeds" if n[0] == n[1] else f"{n[0]}-{n[1]} seeds"
    return f"mean of {seeds}, 95% interval" if n[0] > 1 else f"{seeds}: mean, 95% interval"


def seed_pairs(arms: Mapping[str, Mapping[int, Any]], a: str | None, b: str) -> list[tuple[Any, Any]]:
    """(arm a's run, arm b's run) for every seed both ran (`arms`: arm -> seed -> run), in seed order; empty
    when either arm is missing."""
    if a is None or a not in arms or b not in arms:
        return []
    return [(arms[a][s], arms[b][s]) for s in sorted(set(arms[a]) & set(arms[b]))]


def mean(xs: Any) -> float:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else math.nan


# ---------------------------------------------------------------------------------------------------------
# The paired t-test (no scipy in the project: Student's t distribution for whole degrees of freedom in closed
# form, Abramowitz and Stegun 26.7.3-4)


def t_sf(t: float, df: int) -> float:
    """P(T > t) for Student's t with a whole number df >= 1 of degrees of freedom, exactly: with theta =
    atan(t / sqrt(df)), P(|T| < t) = 2/pi (theta + sin theta cos theta (1 + 2/3 cos^2 + 2*4/(3*5) cos^4 + ...))
    for odd df, sin theta (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ...) for even df (df - 2 terms of cos)."""
    if df < 1 or int(df) != df:
        raise ValueError(f"t_sf: df must be a whole number >= 1, got {df}")
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    theta = math.atan(t / math.sqrt(df))
    c2 = math.cos(theta) ** 2
    if df % 2 == 1:
        term, total = 1.0, 0.0
        for j in range((df - 1) // 2):  # j = 0 .. (df - 3) / 2
            total += term
            term *= c2 * (2 * j + 2) / (2 * j + 3)
        inside = 2 / math.pi * (theta + math.sin(theta) * math.cos(theta) * total)
    else:
        term, total = 1.0, 0.0
        for j in range(df // 2):  # j = 0 .. (df - 2) / 2
            total += term
            term *= c2 * (2 * j + 1) / (2 * j + 2)
        inside = math.sin(theta) * total
    return min(1.0, max(0.0, (1.0 - inside) / 2))


@dataclass(frozen=True)
class PairedT:
    """The paired t-test of b - a over seeds: the mean difference, its SE over seeds, t, df and the p-value
    for `alternative` (greater: b exceeds a). p is NaN with fewer than 2 seeds, or with no spread at all."""

    mean: float
    se: float
    t: float
    df: int
    p: float
    n: int


def paired_t_test(
    differences: Sequence[float], alternative: Literal["greater", "less", "two-sided"] = "greater"
) -> PairedT:
    """Student's paired t-test on per-seed differences b - a (t = mean / (sd / sqrt(n)), n - 1 df)."""
    n = len(differences)
    m = mean(differences)
    if n < 2:
        return PairedT(m, math.nan, math.nan, max(n - 1, 0), math.nan, n)
    sd = math.sqrt(sum((d - m) ** 2 for d in differences) / (n - 1))
    se = sd / math.sqrt(n)
    if se == 0:
        return PairedT(m, se, math.nan, n - 1, math.nan, n)
    t = m / se
    if alternative == "greater":
        p = t_sf(t, n - 1)
    elif alternative == "less":
        p = t_sf(-t, n - 1)
    else:
        p = min(1.0, 2 * t_sf(abs(t), n - 1))
    return PairedT(m, se, t, n - 1, p, n)
