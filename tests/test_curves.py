"""Curve analysis: base / peak / final / gain with intervals, the terminal-cliff rule, and the evaluation and
checkpoint defaults that give a finished run a curve."""

from __future__ import annotations

import math
import random

import pytest

from rolecast.config import dump_config
from rolecast.config.load import load_config
from rolecast.core.errors import ConfigError
from rolecast.diagnostics.curves import (
    CurvePoint,
    classify_cliff,
    detect_cliff,
    difference,
    eval_points,
    floored_se,
    summarize_curve,
    training_points,
)
from rolecast.training.checkpoint import list_checkpoints, save_checkpoint


def curve(values, n=400, every=10):
    """Points as a greedy evaluation on n problems would report them (stderr of 0/1 outcomes)."""
    return [
        CurvePoint(i * every, v, floored_se(v, n, math.sqrt(v * (1 - v) / (n - 1))), n) for i, v in enumerate(values)
    ]


# --- the cliff rule on synthetic curves ------------------------------------------------------------------


def test_rise_then_fall_is_a_cliff_at_the_first_step_that_stays_down():
    values = [0.40, 0.50, 0.60, 0.65, 0.70, 0.70, 0.69, 0.55, 0.50, 0.45, 0.40]
    cliff = detect_cliff(curve(values))
    assert cliff is not None
    # peak 0.70 first reached at step 40; 0.70 and 0.69 are within the band; from step 70 on all are below
    assert (cliff.peak_step, cliff.step, cliff.points_below) == (40, 70, 4)
    assert cliff.drop.value == pytest.approx(0.40 - 0.70)


def test_rise_then_plateau_is_no_cliff():
    values = [0.40, 0.50, 0.60, 0.65, 0.70, 0.69, 0.70, 0.68, 0.70, 0.69, 0.71]
    assert detect_cliff(curve(values)) is None


def test_noise_only_is_no_cliff():
    # 30 evaluations of a model whose true accuracy never moves: binomial noise on 200 problems
    for seed in range(20):
        rng = random.Random(seed)
        values = [sum(rng.random() < 0.5 for _ in range(200)) / 200 for _ in range(30)]
        assert detect_cliff(curve(values, n=200)) is None, seed


def test_a_dip_that_recovers_is_no_cliff_and_a_later_fall_is():
    dip = [0.4, 0.7, 0.5, 0.5, 0.7, 0.69]
    assert detect_cliff(curve(dip)) is None
    cliff = detect_cliff(curve(dip + [0.5, 0.45]))
    assert cliff is not None and cliff.step == 60


def test_one_low_final_point_needs_min_points_1():
    values = [0.4, 0.7, 0.7, 0.5]
    assert detect_cliff(curve(values)) is None
    assert detect_cliff(curve(values), min_points=1).step == 30


def test_a_significant_but_tiny_drop_is_below_min_drop():
    # 100k problems: a 0.01 drop is significant but smaller than min_drop (0.02)
    values = [0.5, 0.8, 0.79, 0.79]
    assert detect_cliff(curve(values, n=100_000)) is None
    assert detect_cliff(curve(values, n=100_000), min_drop=0.005) is not None


# --- cliff types: a rise then a terminal fall vs a decline from the base ------------------------------------


def pts(values, se, every=10, base_se=None):
    """Points with hand-chosen SEs (n large enough that the binomial floor stays below them)."""
    return [
        CurvePoint(i * every, v, base_se if i == 0 and base_se is not None else se, 10_000)
        for i, v in enumerate(values)
    ]


def test_a_rise_then_a_terminal_fall_is_the_studys_cliff():
    points = pts([0.50, 0.60, 0.70, 0.70, 0.50, 0.45, 0.44], se=0.02)
    cliff = detect_cliff(points)
    assert cliff is not None and cliff.step == 40
    c = classify_cliff(points, cliff)
    # m = 6 trained points: z_rise = Phi^-1(1 - 0.05/12) = 2.638; the SE of a difference with the base is
    # sqrt(0.02^2 + 0.02^2) = 0.02828, so step 10 (+0.10, z 3.54) is the first point significantly above
    assert c.rise_z == pytest.approx(2.638257, abs=1e-5)
    assert c.rise_step == 10 and c.gained
    assert c.rise.se == pytest.approx(math.hypot(0.02, 0.02))
    assert c.rise_point_step == 20 and c.rise.value == pytest.approx(0.20)  # the largest z: the peak
    assert c.decline.value == pytest.approx(-0.06) and c.decline_z == pytest.approx(1.959964, abs=1e-6)
    assert c.declined  # -0.06 / 0.02828 = -2.12: it also ends below its base, but it rose first
    assert c.type == "fall_after_gain"


def test_a_fall_from_the_untrained_base_is_a_decline_not_the_studys_cliff():
    # the cliff lab's Voting at lr 3e-4: the peak is the base itself, so the terminal-fall rule fires from it
    points = pts([0.725, 0.72, 0.60, 0.55, 0.50, 0.45, 0.40], se=0.03)
    cliff = detect_cliff(points)
    assert cliff is not None and cliff.peak_step == 0 and cliff.step == 20  # 0.125 / 0.0424 = 2.95 > 2.69
    c = classify_cliff(points, cliff)
    assert c.rise_step is None and c.rise.value == pytest.approx(-0.005)  # no point above the base at all
    assert c.type == "decline_from_base"


def test_a_slow_decline_below_the_base_without_the_fall_rule_is_a_decline():
    points = pts([0.70, 0.70, 0.69, 0.68, 0.66, 0.64, 0.60], se=0.03)
    assert detect_cliff(points) is None  # 0.10 / 0.0424 = 2.36 < the corrected 2.69
    c = classify_cliff(points, None)
    assert c.decline.value == pytest.approx(-0.10) and c.decline.high < 0  # -2.36 < -1.96
    assert c.type == "decline_from_base"


def test_a_fall_from_a_peak_within_noise_of_the_base_is_neither_type():
    points = pts([0.50, 0.58, 0.60, 0.45, 0.44], se=0.03)
    cliff = detect_cliff(points)
    assert cliff is not None and cliff.step == 30
    c = classify_cliff(points, cliff)
    # +0.10 over the base is z = 0.10 / 0.0424 = 2.36: past an uncorrected 1.96, short of the best-of-4 z 2.498
    assert c.rise.value / c.rise.se == pytest.approx(2.357, abs=1e-3)
    assert c.rise_z == pytest.approx(2.497705, abs=1e-5) and c.rise_step is None
    assert not c.declined  # -0.06 / 0.0424 = -1.41
    assert c.type == "fall_without_gain"


def test_the_bases_own_noise_decides_whether_a_gain_is_significant():
    values = [0.50, 0.60, 0.60, 0.60, 0.60, 0.60, 0.60]
    precise = classify_cliff(pts(values, se=0.02), None)
    # +0.10 against sqrt(0.02^2 + 0.02^2): z 3.54 > 2.638
    assert precise.rise_step == 10 and precise.type == "none"
    noisy = classify_cliff(pts(values, se=0.02, base_se=0.04), None)
    # the same +0.10 against sqrt(0.04^2 + 0.02^2) = 0.0447: z 2.24 < 2.638
    assert noisy.rise.se == pytest.approx(math.hypot(0.04, 0.02)) and noisy.rise_step is None


def test_no_base_no_type_and_the_summary_carries_the_type():
    assert classify_cliff(pts([0.5, 0.6], se=0.02)[1:], None) is None  # no step-0 point
    assert classify_cliff(pts([0.5], se=0.02), None) is None  # nothing after the base
    s = summarize_curve(pts([0.725, 0.72, 0.60, 0.55, 0.50, 0.45, 0.40], se=0.03))
    assert s.cliff is not None and s.cliff_type == "decline_from_base"
    assert (s.rule["gain_alpha"], s.rule["decline_alpha"]) == (0.05, 0.05)
    assert s.to_dict()["cliff_class"]["type"] == "decline_from_base"
    # a stricter gain level (a plan's cliff.gain_alpha) moves the same curve's gain below significance
    rise = pts([0.50, 0.60, 0.70, 0.70, 0.50, 0.45, 0.44], se=0.02)
    assert summarize_curve(rise).cliff_type == "fall_after_gain"
    assert summarize_curve(rise, gain_alpha=1e-12, decline_alpha=1e-12).cliff_type == "fall_without_gain"


# --- summary numbers against hand values ------------------------------------------------------------------


def test_summary_base_peak_final_gain_with_unpaired_intervals():
    pts = [CurvePoint(0, 0.50, 0.030, 400), CurvePoint(20, 0.80, 0.020, 400), CurvePoint(40, 0.70, 0.025, 400)]
    s = summarize_curve(pts)
    assert (s.base.step, s.peak.step, s.final.step) == (0, 20, 40)
    se = math.sqrt(0.030**2 + 0.025**2)
    assert s.gain.value == pytest.approx(0.20) and s.gain.se == pytest.approx(se) and not s.gain.paired
    assert (s.gain.low, s.gain.high) == pytest.approx((0.20 - 1.959964 * se, 0.20 + 1.959964 * se), abs=1e-6)
    assert s.peak_gain.value == pytest.approx(0.30)
    assert s.final_vs_peak.value == pytest.approx(-0.10) and s.final_vs_peak.significant
    assert s.cliff is None  # one point below the peak: min_points is 2


def test_paired_difference_when_rows_carry_per_problem_results():
    a = CurvePoint(0, 0.5, 0.1, 4, per_problem=(1.0, 0.0, 1.0, 0.0))
    b = CurvePoint(10, 0.75, 0.1, 4, per_problem=(1.0, 1.0, 1.0, 0.0))
    d = difference(a, b)
    # per-problem differences 0, 1, 0, 0: mean 0.25, sample sd 0.5, SE 0.25
    assert d.paired and d.value == pytest.approx(0.25) and d.se == pytest.approx(0.25)
    assert not difference(a, CurvePoint(10, 0.75, 0.1, 4)).paired


def test_floored_se_keeps_error_at_zero_and_one():
    assert floored_se(1.0, 100, 0.0) == pytest.approx(math.sqrt((101 / 102) * (1 / 102) / 100))
    assert floored_se(0.5, 100, 0.2) == 0.2  # a larger reported SE wins


def test_eval_points_choose_one_row_per_step_and_skip_other_workflows():
    rows = [
        {
            "step": 0,
            "tag": "base",
            "task": "t",
            "split": "test",
            "workflow": "single",
            "pass@1": 0.5,
            "stderr": 0.05,
            "n_problems": 100,
            "n_samples": 1,
        },
        {
            "step": 10,
            "tag": "periodic",
            "task": "t",
            "split": "test",
            "workflow": "single",
            "pass@1": 0.6,
            "stderr": 0.05,
            "n_problems": 100,
            "n_samples": 1,
        },
        {
            "step": 10,
            "tag": "checkpoint",
            "task": "t",
            "split": "test",
            "workflow": "single",
            "pass@1": 0.62,
            "stderr": 0.03,
            "n_problems": 100,
            "n_samples": 4,
        },  # more samples: wins
        {
            "step": 0,
            "tag": "base",
            "task": "t",
            "split": "test",
            "workflow": "voting",
            "pass@1": 0.9,
            "stderr": 0.05,
            "n_problems": 100,
            "n_samples": 1,
        },  # another workflow's base eval
        {"step": 20, "pass@1": None},
        "garbage",
    ]
    notes = []
    pts = eval_points(rows, notes)
    assert [(p.step, p.value, p.tag) for p in pts] == [(0, 0.5, "base"), (10, 0.62, "checkpoint")]
    assert "1 row(s)" in notes[0]


def test_training_points_average_windows():
    rows = [{"step": i + 1, "accuracy": a, "episodes": 10} for i, a in enumerate([0.1, 0.3, 0.5, 0.7])]
    pts = training_points(rows, window=2)
    assert [(p.step, p.value, p.n) for p in pts] == [(2, pytest.approx(0.2), 20), (4, pytest.approx(0.6), 20)]


# --- defaults that give a run a curve ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides,every,keep",
    [
        ({}, 20, 0),  # the embedded recipe: 60 steps, checkpoints every 20 -> evals at 20, 40 (+ base, final)
        ({"train.steps": 3}, 0, 0),  # short runs: start and end only, as before
        ({"train.steps": 19}, 0, 0),
        ({"train.steps": 100, "checkpoint.every": 10}, 10, 0),  # keep_last alone decides what stays on disk
        ({"train.steps": 300, "checkpoint.every": 10}, 30, 0),  # ~10 points, on checkpointed steps
        ({"train.steps": 100, "checkpoint.every": 0}, 10, 0),
        ({"train.steps": 30, "checkpoint.every": 0}, 5, 0),
        # a rollback goes back to the best evaluated checkpoint: the evaluated ones are kept
        ({"train.steps": 30, "checkpoint.every": 5, "interventions.rollback.signals": ["grad_spike"]}, 5, 5),
        ({"train.steps": 100, "eval.every": 7}, 7, 0),  # explicit values are kept
        ({"train.steps": 100, "eval.every": 0, "checkpoint.keep_every": 50}, 0, 50),
    ],
)
def test_auto_eval_every_and_keep_every(overrides, every, keep):
    cfg = load_config(None, overrides)
    assert (cfg.eval.every, cfg.checkpoint.keep_every) == (every, keep)


def test_auto_is_accepted_explicitly_and_bad_values_still_name_their_field(tmp_path):
    p = tmp_path / "run.yaml"
    p.write_text("train: {steps: 50}\neval: {every: auto}\ncheckpoint: {every: 5, keep_every: auto}\n")
    cfg = load_config(p)
    assert (cfg.eval.every, cfg.checkpoint.keep_every) == (5, 0)
    assert "every: 5" in dump_config(cfg)  # the resolved config.yaml holds the number
    p.write_text("eval: {every: sometimes}\n")
    with pytest.raises(ConfigError, match=r"eval\.every"):
        load_config(p)
    p.write_text("eval: 5\n")
    with pytest.raises(ConfigError, match=r"eval"):
        load_config(p)


@pytest.mark.parametrize("keep_last,kept", [(None, [4]), (2, [3, 4])])
def test_a_run_with_periodic_evaluations_keeps_only_keep_last_checkpoints(tiny_model_dir, tmp_path, keep_last, kept):
    """`make run` kept all six checkpoints of every cell (keep_every "auto" followed eval.every); now keep_last
    decides (by default 1: the newest, all a resume needs), and the latest checkpoint is among them."""
    from rolecast.training.grpo import train

    over = {
        "model.path": tiny_model_dir,
        "model.trainable": "lora",
        "model.lora.r": 4,
        "run_dir": str(tmp_path / "run"),
        "train.steps": 4,
        "train.problems_per_step": 2,
        "train.group_size": 2,
        "train.epochs": 1,
        "rollout.max_new_tokens": 4,
        "eval.size": 2,
        "eval.every": 1,
        "checkpoint.every": 1,
        "logging.progress": False,
        "threads": 1,
        **({} if keep_last is None else {"checkpoint.keep_last": keep_last}),
    }
    cfg = load_config(None, over)
    assert cfg.checkpoint.keep_every == 0
    train(cfg)
    assert list_checkpoints(tmp_path / "run") == kept


def test_keep_every_spares_evaluated_checkpoints_from_pruning(tmp_path):
    for s in range(5, 35, 5):
        save_checkpoint(tmp_path, s, {"trainer": {"step": s}}, keep_last=2, keep_every=10)
    assert list_checkpoints(tmp_path) == [10, 20, 25, 30]
