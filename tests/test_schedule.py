"""Learning-rate schedules: rolecast's and verl's, and the study's Isolated-Policy clock (one schedule advanced
once per role update), drawn per policy and per step from real runs and checked against values worked by hand."""

from __future__ import annotations

import json

import pytest
import torch

from rolecast.config.load import load_config
from rolecast.training.grpo import train
from rolecast.training.optimizer import build, warmup_cosine
from rolecast.training.schedule import verl_constant_factor, verl_cosine_factor

# verl's cosine with warmup 2 over 6 steps (min lr ratio 0), by hand: warmup c / 2 for c = 0, 1; then
# 0.5 (1 + cos(pi p)) with p = (c - 2) / 4, NOT clamped at p = 1: cos(pi/4) = 0.70711 gives 0.85355 and
# cos(3 pi/4) = -0.70711 gives 0.14645; past the end (p > 1) the values come back up in mirror image.
HI, LO = 0.8535533905932737, 0.14644660940672627
VERL_W2_T6 = [0.0, 0.5, 1.0, HI, 0.5, LO, 0.0, LO, 0.5, HI, 1.0, HI, 0.5, LO, 0.0, LO, 0.5, HI]


def test_verl_cosine_factor_matches_the_hand_worked_values():
    assert [verl_cosine_factor(c, 2, 6) for c in range(18)] == pytest.approx(VERL_W2_T6, abs=1e-12)
    # a floor: m + (1 - m) x, never below 0 (verl's max(0, ...))
    assert verl_cosine_factor(6, 2, 6, min_lr_ratio=0.1) == pytest.approx(0.1)
    assert verl_cosine_factor(4, 2, 6, min_lr_ratio=0.1) == pytest.approx(0.1 + 0.9 * 0.5)
    # verl's warmup starts at lr 0; rolecast's at (k + 1) / (warmup + 1)
    assert [verl_constant_factor(c, 4) for c in range(6)] == [0.0, 0.25, 0.5, 0.75, 1.0, 1.0]
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    ours = warmup_cosine(opt, 2, 6)
    assert [ours.lr_lambdas[0](c) for c in (0, 1, 7)] == pytest.approx([1 / 3, 2 / 3, 0.0])  # clamped past the end


def test_seek_sets_the_optimizer_lr_and_a_new_base():
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=2.0)
    sched = build(opt, "verl_cosine", 2, 6)
    assert sched.seek(3) == pytest.approx(2.0 * HI)
    assert opt.param_groups[0]["lr"] == pytest.approx(2.0 * HI) and sched.get_last_lr()[0] == pytest.approx(2.0 * HI)
    assert sched.seek(8, base_lr=4.0) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="train.lr_schedule"):
        build(opt, "linear", 0, 6)


def _lrs(tiny_model_dir, run_dir, **overrides):
    cfg = load_config(
        None,
        {
            "model.path": tiny_model_dir,
            "model.trainable": "lora",
            "model.lora.r": 2,
            "run_dir": str(run_dir),
            "train.steps": 6,
            "train.problems_per_step": 1,
            "train.group_size": 2,
            "train.lr": 1e-3,
            "train.lr_schedule": "verl_cosine",
            "train.warmup_steps": 2,
            "rollout.max_new_tokens": 4,
            "eval.at_start": False,
            "eval.at_end": False,
            "logging.progress": False,
            "checkpoint.every": 0,
            **overrides,
        },
    )
    train(cfg)
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    pids = sorted({k.split("/")[1] for k in rows[0] if k.startswith("policy/") and k.endswith("/lr")})
    return {pid: [r[f"policy/{pid}/lr"] / 1e-3 for r in rows] for pid in pids}


def test_one_clock_per_role_update_runs_the_schedule_k_times_faster(tiny_model_dir, tmp_path):
    """Policies update in routing order (alphabetical); under `role_update` the j-th of k policies trains step
    t at schedule position k t + j. By hand, from VERL_W2_T6's positions:"""
    v = VERL_W2_T6
    # k = 1 (shared): the clock is the step, identical to the per-step schedule
    assert _lrs(tiny_model_dir, tmp_path / "k1", **{"workflow.name": "voting", "train.lr_clock": "role_update"}) == {
        "shared": pytest.approx([0.0, 0.5, 1.0, HI, 0.5, LO])
    }
    # k = 2 (isolated Voting): aggregator at 0, 2, 4, ..., generator at 1, 3, 5, ...: 0 at position 6 (step 4
    # of the aggregator), back to the full lr at position 10 (step 6)
    k2 = _lrs(
        tiny_model_dir,
        tmp_path / "k2",
        **{"workflow.name": "voting", "routing.sharing": "isolated", "train.lr_clock": "role_update"},
    )
    assert k2 == {
        "aggregator": pytest.approx([0.0, 1.0, 0.5, 0.0, 0.5, 1.0]),
        "generator": pytest.approx([0.5, HI, LO, LO, HI, HI]),
    }
    assert k2["aggregator"] == pytest.approx([v[2 * t] for t in range(6)])
    # k = 3 (isolated Orch-Workers): orchestrator, synthesizer, worker at 3t, 3t + 1, 3t + 2
    k3 = _lrs(
        tiny_model_dir,
        tmp_path / "k3",
        **{"workflow.name": "orch_workers", "routing.sharing": "isolated", "train.lr_clock": "role_update"},
    )
    assert k3 == {
        "orchestrator": pytest.approx([0.0, HI, 0.0, HI, 0.5, LO]),
        "synthesizer": pytest.approx([0.5, 0.5, LO, 1.0, LO, 0.5]),
        "worker": pytest.approx([1.0, LO, 0.5, HI, 0.0, HI]),
    }
    # the default clock: each policy's own schedule, once per step, whatever k
    k2_step = _lrs(tiny_model_dir, tmp_path / "k2s", **{"workflow.name": "voting", "routing.sharing": "isolated"})
    assert k2_step == {p: pytest.approx([0.0, 0.5, 1.0, HI, 0.5, LO]) for p in ("aggregator", "generator")}
