"""Evaluation: pass@k arithmetic, eval.jsonl rows, checkpoints, the CLI on real offline data, and one evaluation
path: `rolecast eval` samples what the trainer's evaluation of the same step sampled."""

from __future__ import annotations

import json
import math

import pytest
from echo_task import EchoTask

from rolecast.cli import main
from rolecast.config.load import load_config
from rolecast.core.errors import ConfigError
from rolecast.evaluate_cli import evaluate_steps
from rolecast.evaluation import EVAL_SEED_STREAM, EvalPlan, eval_plan, evaluate, pass_at_k
from rolecast.policies.router import build_routing
from rolecast.prompts import PromptBook
from rolecast.rollout.engine import Sampling, step_seed
from rolecast.rollout.scripted import ScriptedBackend
from rolecast.runtime import Runtime
from rolecast.tasks.base import Problem
from rolecast.training.grpo import train
from rolecast.workflows import get_workflow


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
    evaluate_steps(cfg, out=str(out), n_samples=2)  # the base model
    evaluate_steps(cfg, checkpoint=str(tmp_path / "run"), every=1, out=str(out))
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


# --------------------------------------------------------------------------------------------------------
# one evaluation path


def test_eval_plan_resolves_the_eval_section_once():
    cfg = load_config(None, {"eval.protocol": "study", "eval.top_p": 0.9, "seed": 5})
    plan = eval_plan(cfg, 10)
    assert plan == EvalPlan(
        n_samples=4, ks=(1, 4), sampling=Sampling(temperature=0.7, top_p=0.9), seed=step_seed(5, 10, EVAL_SEED_STREAM)
    )
    assert eval_plan(cfg, 10, n_samples=1).ks == (1,) and eval_plan(cfg, 0).seed != plan.seed
    assert eval_plan(load_config(None, {"eval.protocol": "greedy"}), 0).sampling == Sampling(0.0, None)


def test_several_greedy_samples_are_a_config_error():
    with pytest.raises(ConfigError, match="eval.n_samples 4 at eval.temperature 0 decodes the same greedy answer 4"):
        load_config(None, {"eval.protocol": "custom", "eval.temperature": 0, "eval.n_samples": 4})
    greedy = load_config(None, {"eval.protocol": "custom", "eval.temperature": 0})
    with pytest.raises(ConfigError, match="--n 3 at eval.temperature 0 decodes the same greedy answer 3 times"):
        eval_plan(greedy, 0, n_samples=3)


def test_evaluate_passes_the_plans_sampling_with_every_call_and_leaves_the_backend_as_it_was():
    spec = get_workflow("voting")
    backend = ScriptedBackend(lambda pid, m: r"\boxed{1}", temperature=1.0)
    problems = [Problem(f"p{i}", f"{i} + 0", str(i)) for i in range(3)]
    plan = EvalPlan(n_samples=2, ks=(1, 2), sampling=Sampling(temperature=0.3, top_p=0.5), seed=11)
    common = dict(task=EchoTask(), prompts=PromptBook("testbed"), router=build_routing(spec.roles, "shared"))
    res = evaluate(spec, problems, plan, backend=backend, **common)
    assert backend.seeds == [11] and backend.samplings == [plan.sampling] * 2  # generators, then aggregators
    assert backend.temperature == 1.0 and res.n_samples == 2 and set(res.pass_k) == {1, 2}
    assert res.pass1 == pytest.approx(1 / 3)  # problem p1 is answered right
    evaluate(spec, problems, EvalPlan(), backend=backend, **common)  # no plan: the backend's own, not reseeded
    assert backend.seeds == [11] and backend.samplings[-1] == Sampling()


def _samples(res):
    return [
        (
            ep.problem_id,
            ep.sample,
            ep.final_text,
            ep.reward,
            [(t.instance, t.completion_ids, t.logprobs) for t in ep.turns],
        )
        for ep in res.episodes
    ]


def test_rolecast_eval_samples_what_the_trainers_evaluations_sampled(tiny_model_dir, tmp_path, monkeypatch):
    """The same config, evaluated by the trainer (its base, periodic and final evaluations, recorded where the
    session calls the runtime) and by `rolecast eval` (the base model, then each checkpoint): the same episodes,
    token for token, sampled at temperature 0.7 with two samples per problem."""
    cfg = load_config(
        None,
        {
            "model.path": tiny_model_dir,
            "model.trainable": "lora",
            "model.lora.r": 4,
            "workflow.name": "voting",
            "run_dir": str(tmp_path / "run"),
            "train.steps": 2,
            "train.problems_per_step": 2,
            "train.group_size": 2,
            "rollout.max_new_tokens": 6,
            "eval.protocol": "custom",
            "eval.temperature": 0.7,
            "eval.n_samples": 2,
            "eval.size": 3,
            "eval.every": 1,
            "logging.progress": False,
            "checkpoint.every": 1,
            "checkpoint.keep_last": 5,
        },
    )
    trainer = []
    session_evaluate = Runtime.evaluate

    def recorded(self, *args, **kwargs):
        trainer.append(session_evaluate(self, *args, **kwargs))
        return trainer[-1]

    monkeypatch.setattr(Runtime, "evaluate", recorded)
    train(cfg)
    monkeypatch.undo()
    assert len(trainer) == 3  # base (step 0), periodic (step 1), final (step 2)
    quiet = dict(out=str(tmp_path / "eval.jsonl"), echo=lambda line: None)
    cli = evaluate_steps(cfg, **quiet) + evaluate_steps(cfg, checkpoint=str(tmp_path / "run"), every=1, **quiet)
    assert len(cli) == 3
    for ours, theirs in zip(cli, trainer, strict=True):
        assert _samples(ours) == _samples(theirs) and ours.row() == theirs.row()
    first = cli[0].episodes
    assert [t.text for t in first[0].turns] != [t.text for t in first[1].turns]  # two samples, sampled apart
