"""scripts/cliff_lab.py `corrections`: what the cliff lab write-up's 2026-12-02 corrections (issue 35) rest on,
checked against values worked by hand from the lab's committed raw results (docs/experiments/cliff_lab/raw)
and on hand-built curves and metrics."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from script_module import load_script

from rolecast.diagnostics.curves import CurvePoint, summarize_curve

ROOT = Path(__file__).resolve().parents[1]
LAB_RAW = ROOT / "docs" / "experiments" / "cliff_lab" / "raw"


@pytest.fixture(scope="module")
def lab() -> Any:
    return load_script("scripts/cliff_lab.py")


@pytest.fixture(scope="module")
def runs(lab: Any) -> list[Any]:
    return lab.runs(LAB_RAW)


@pytest.fixture(scope="module")
def recs(lab: Any) -> list[dict[str, Any]]:
    return lab.records(LAB_RAW)


def test_the_eight_flagged_runs_are_seven_declines_and_one_rise_then_fall(lab, runs):
    flagged = {r.name: r for r in runs if r.curve.cliff is not None}
    assert len(runs) == 54 and len(flagged) == 8
    types = sorted(r.cliff_type for r in flagged.values())
    assert types == ["decline_from_base"] * 7 + ["fall_after_gain"]
    # the one rise: base 0.815 (its SE floored at the smoothed binomial's over 100 problems: 0.03932), peak
    # 0.955 at step 15 (floored SE 0.02259): z = 0.140 / sqrt(0.03932^2 + 0.02259^2) = 3.087 > 2.64 (6 points)
    (rise,) = [r for r in flagged.values() if r.cliff_type == "fall_after_gain"]
    assert rise.name == "orch_workers lr1e-3 isolated-roleclock s0"
    k = rise.curve.cliff_class
    assert (k.rise_point_step, k.rise_step) == (15, 15)
    assert k.rise.value / k.rise.se == pytest.approx(0.140 / math.hypot(0.03932, 0.02259), rel=1e-3)
    # the study's clock at 3e-4, seed 1: up 0.085 at step 5 (floored SEs 0.03932 and 0.03102: z = 1.70), no gain
    s1 = flagged["orch_workers lr3e-4 isolated-roleclock s1"]
    assert s1.cliff_type == "decline_from_base" and s1.curve.cliff_class.rise_step is None
    assert s1.curve.cliff_class.rise.value / s1.curve.cliff_class.rise.se == pytest.approx(
        0.085 / math.hypot(0.03932, 0.03102), rel=1e-3
    )
    counts = "\n".join(lab.type_counts(runs))
    assert "| decline_from_base | 7/8 [0.47, 1.00] | 11/54 [0.11, 0.34] |" in counts
    assert "| fall_after_gain | 1/8 [0.00, 0.53] | 1/54 [0.00, 0.10] |" in counts


def test_isolated_against_shared_voting_is_fishers_p_0_4(lab, runs):
    rows = [line for line in lab.arm_tests(runs) if line.startswith("| voting | lr3e-4 | cliff rule | shared")]
    # 2 of 3 against 0 of 3: P(X = 2) = P(X = 0) = 3/15, P(X = 1) = 9/15 (hypergeometric, 2 hits in 6, 3 drawn)
    assert rows == [
        "| voting | lr3e-4 | cliff rule | shared 0/3 | isolated 2/3 | 0.40 (0.20) | 0.50, isolated only 2, shared only 0 |"
    ]


def test_shared_voting_seed_0_was_below_the_band_twice(lab, runs):
    (run,) = [r for r in runs if r.name == "voting lr3e-4 shared s0"]
    below, ratio = lab.band_margin(run.curve)
    assert below == [15, 20]
    # peak = base 0.725 (floored SE 0.04487), final 0.565 (0.04959); z for 7 points 2.690: 0.889 of the way
    assert ratio == pytest.approx(0.160 / (2.690 * math.hypot(0.04487, 0.04959)), rel=1e-3)


def test_band_margin_on_a_hand_built_curve(lab):
    # 4 points: z = Phi^-1(1 - 0.05 / 8) = 2.4977; every difference's SE is 0.04 sqrt(2) = 0.05657, so the band
    # lies 0.1413 under the peak 0.70: 0.60 is inside, 0.50 below, the final 0.62 inside at 0.08 / 0.1413
    cur = summarize_curve([CurvePoint(s, v, 0.04, 100) for s, v in ((0, 0.70), (5, 0.60), (10, 0.50), (15, 0.62))])
    below, ratio = lab.band_margin(cur)
    assert below == [10]
    assert ratio == pytest.approx(0.08 / (2.4977 * 0.04 * math.sqrt(2)), rel=1e-4)


def test_final_drift_keeps_each_policys_last_value(lab):
    rows = [
        {"step": 1, "update/generator/drift": 0.5, "update/generator/aggregator/drift": 9.0},
        {"step": 2, "update/aggregator/drift": 0.7, "accuracy": 0.5},
        {"step": 3, "update/generator/drift": 0.9, "update/generator/ratio": 0.01},
    ]
    assert lab.final_drift(rows) == {"generator": 0.9, "aggregator": 0.7}


def test_drift_does_not_separate_the_runs_that_fell(runs):
    def drift(name: str) -> tuple[float, float]:
        (r,) = [r for r in runs if r.name == name]
        return min(r.drift.values()), max(r.drift.values())

    # Voting at 3e-4: shared never fell and drifted as far as the isolated runs that did
    assert drift("voting lr3e-4 shared s2")[1] == pytest.approx(1.708, abs=1e-3)
    assert drift("voting lr3e-4 isolated s1") == pytest.approx((1.644, 1.659), abs=1e-3)
    assert drift("voting lr3e-4 isolated s2") == pytest.approx((1.617, 1.634), abs=1e-3)
    # Orch-Workers at 3e-4: the flagged run drifted less than every run on rolecast's clock
    assert drift("orch_workers lr3e-4 isolated-roleclock s1") == pytest.approx((1.467, 1.495), abs=1e-3)
    calm = [r for r in runs if r.workflow == "orch_workers" and r.lr == "lr3e-4" and r.arm in ("shared", "isolated")]
    assert min(min(r.drift.values()) for r in calm) == pytest.approx(1.604, abs=1e-3)


def test_which_se_set_the_section_2_intervals(lab, recs):
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lab.interval_sources(recs)[2:]]
    rows = {(c[0], c[2]): " | ".join(c) for c in cells}
    # Orch-Workers, isolated - shared per seed: -0.030, -0.040, +0.010: sd 0.02646, / sqrt(3) = 0.0153, below the
    # evaluations' floor 0.0226, so the interval is -0.020 +- 4.303 x 0.0226
    assert (
        "0.0153 | 0.0226 | evaluations' noise (the floor), x t = 4.303" in rows[("orch_workers", "isolated - shared")]
    )
    # Voting: -0.160, -0.175, +0.040: sd 0.1200, / sqrt(3) = 0.0693 > 0.0399: a t interval
    assert "0.0693 | 0.0399 | seeds' spread (a t interval)" in rows[("voting", "isolated - shared")]


def test_the_in_loop_warning_with_exact_intervals(lab, recs, runs):
    lines = lab.warning_exact(recs, runs)
    assert lines[0] == "- recall: 4/8 [0.16, 0.84], leads [1, 3, 7, 16] steps"
    assert lines[1] == "- calm runs warned: 33/46 [0.57, 0.84]"
    # 232 firing steps over 46 calm runs of 30 steps: 16.8 per 100 steps, as tables.md says
    assert lines[2].startswith("- steps fired on in calm runs: 232 of 1380, 5.04 per calm run")
