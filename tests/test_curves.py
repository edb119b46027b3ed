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
    detect_cliff,
    difference,
    eval_points,
    floored_se,
    summarize_curve,
    training_points,
)
from rolecast.train.checkpoint import list_checkpoints, save_checkpoint


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


def test_a_run_with_periodic_evaluations_keeps_only_keep_last_checkpoints(tiny_model_dir, tmp_path):
    """`make run` kept all six checkpoints of every cell (keep_every "auto" followed eval.every); now keep_last
    decides, and the latest checkpoint (what a resume needs) is among them."""
    from rolecast.train.grpo import train

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
        "checkpoint.keep_last": 2,
        "logging.progress": False,
        "threads": 1,
    }
    cfg = load_config(None, over)
    assert cfg.checkpoint.keep_every == 0
    train(cfg)
    assert list_checkpoints(tmp_path / "run") == [3, 4]


def test_keep_every_spares_evaluated_checkpoints_from_pruning(tmp_path):
    for s in range(5, 35, 5):
        save_checkpoint(tmp_path, s, {"trainer": {"step": s}}, keep_last=2, keep_every=10)
    assert list_checkpoints(tmp_path) == [10, 20, 25, 30]
