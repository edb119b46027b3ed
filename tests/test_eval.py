"""Evaluation: pass@k arithmetic, eval.jsonl rows, checkpoints, and the CLI on real offline data."""

from __future__ import annotations

import json
import math

import pytest

from rolecast.cli import main
from rolecast.config import load_config
from rolecast.evaluate_cli import run_eval_command
from rolecast.evaluation import pass_at_k
from rolecast.train.grpo import train


def test_pass_at_k_by_hand():
    assert pass_at_k(4, 0, 1) == 0.0 and pass_at_k(4, 4, 2) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - (3 / 4) * (2 / 3))  # 1 - C(3,2)/C(4,2) = 0.5
    assert pass_at_k(5, 2, 3) == pytest.approx(1 - math.comb(3, 3) / math.comb(5, 3))


def rows(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_eval_base_and_every_checkpoint(tiny_model_dir, tmp_path):
    over = {
        "model.path": tiny_model_dir,
        "model.trainable": "lora",
        "model.lora.r": 4,
        "run_dir": str(tmp_path / "run"),
        "train.steps": 2,
        "train.problems_per_step": 2,
        "train.group_size": 2,
        "rollout.max_new_tokens": 4,
        "eval.size": 3,
        "eval.at_start": False,
        "eval.at_end": False,
        "logging.progress": False,
        "checkpoint.every": 1,
        "checkpoint.keep_last": 5,
    }
    cfg = load_config(None, over)
    train(cfg)
    out = tmp_path / "eval.jsonl"
    run_eval_command(cfg, out=str(out), n_samples=2)  # the base model
    run_eval_command(cfg, checkpoint=str(tmp_path / "run"), every=1, out=str(out))
    got = rows(out)
    assert [(r["tag"], r["step"]) for r in got] == [("base", 0), ("checkpoint", 1), ("checkpoint", 2)]
    for r in got:
        assert {"run", "step", "workflow", "task", "split", "sharing", "model", "pass@1", "stderr"} <= set(r)
        assert r["n_problems"] == 3 and r["task"] == "testbed"
    assert got[0]["n_samples"] == 2 and "pass@2" in got[0]


def test_eval_cli_gsm8k_voting(tiny_model_dir, tmp_path, data_dir):
    out = tmp_path / "eval.jsonl"
    code = main(
        [
            "eval",
            "--task",
            "gsm8k",
            "--workflow",
            "voting",
            "--model",
            tiny_model_dir,
            "--size",
            "2",
            "--set",
            "rollout.max_new_tokens=4",
            "--set",
            "model.trainable=lora",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    [r] = rows(out)
    assert (r["task"], r["workflow"], r["split"], r["n_problems"]) == ("gsm8k", "voting", "test", 2)
