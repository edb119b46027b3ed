"""What a run tells its user and its dashboards: without a terminal (a batch job's log) the run directory first, one
line per step with reward, accuracy and step time, and every evaluation with its protocol; TensorBoard gets the
base and final evaluations as well as the periodic ones."""

from __future__ import annotations

import json
import re

import pytest

from rolecast.config.load import load_config
from rolecast.training.grpo import train


def tiny(model_dir, run_dir, **overrides):
    return load_config(
        None,
        {
            "model.path": model_dir,
            "model.trainable": "lora",
            "model.lora.r": 4,
            "run_dir": str(run_dir),
            "train.steps": 3,
            "train.problems_per_step": 2,
            "train.group_size": 4,
            "train.epochs": 1,
            "rollout.max_new_tokens": 6,
            "eval.size": 2,
            "eval.every": 1,
            "checkpoint.every": 1,
            "logging.episodes_every": 0,
            "threads": 1,
            **overrides,
        },
    )


def eval_rows(run_dir):
    return [json.loads(x) for x in (run_dir / "eval.jsonl").read_text().splitlines()]


def test_without_a_terminal_each_step_and_each_evaluation_is_one_line(tiny_model_dir, tmp_path, capsys):
    run_dir = tmp_path / "run"
    train(tiny(tiny_model_dir, run_dir))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"run directory: {run_dir}"
    protocol = r"study protocol: T=0\.7, pass@1 over 4 samples"
    assert re.fullmatch(
        rf"base accuracy \(test, 2 problems; {protocol}\): \d\.\d{{3}} ± \d\.\d{{3}} \(± 1 SE\)", lines[1]
    )
    steps = [line for line in lines if line.startswith("step ")]
    assert len(steps) == 3
    for i, line in enumerate(steps, 1):
        assert re.fullmatch(rf"step {i}/3  reward \d\.\d{{3}}  accuracy \d\.\d{{3}}  \d+\.\d s/step", line), line
    periodic = [r for r in eval_rows(run_dir) if r["tag"] == "periodic"]
    assert [r["step"] for r in periodic] == [1, 2]
    for r in periodic:
        line = f"eval at step {r['step']} (2 problems; study protocol: T=0.7, pass@1 over 4 samples): "
        assert f"{line}{r['pass@1']:.3f} ± {r['stderr']:.3f} (± 1 SE)" in lines
    assert re.fullmatch(
        rf"final accuracy \(test, 2 problems; {protocol}\): \d\.\d{{3}} ± \d\.\d{{3}} \(± 1 SE\)", lines[-1]
    )


def test_tensorboard_receives_the_base_periodic_and_final_evaluations(tiny_model_dir, tmp_path):
    pytest.importorskip("tensorboard", reason="logging.tensorboard needs the tensorboard extra")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir = tmp_path / "run"
    train(tiny(tiny_model_dir, run_dir, **{"logging.tensorboard": True, "logging.progress": False}))
    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    want = {r["step"]: r["pass@1"] for r in eval_rows(run_dir)}
    assert sorted(want) == [0, 1, 2, 3]  # base, periodic at 1 and 2, final
    got = {e.step: e.value for e in events.Scalars("eval/pass@1")}
    assert got == pytest.approx(want)
    assert [(e.step, pytest.approx(e.value)) for e in events.Scalars("eval/base/pass@1")] == [(0, want[0])]
    assert [(e.step, pytest.approx(e.value)) for e in events.Scalars("eval/final/pass@1")] == [(3, want[3])]
    assert [e.step for e in events.Scalars("reward")] == [1, 2, 3]
