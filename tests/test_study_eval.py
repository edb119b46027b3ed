"""Evaluation as the study recipes set it: explicit sampling parameters (eval.top_p) and more than one held-out
set (eval.extra_sets, e.g. AIME 2024 beside DAPO-Math's test split), each reported on its own."""

from __future__ import annotations

import json

import pytest

from rolecast.config.load import load_config
from rolecast.core.errors import ConfigError
from rolecast.training.grpo import train


def _run(tmp_path, name, **overrides):
    base = {
        "run_dir": str(tmp_path / name),
        "train.steps": 0,
        "eval.protocol": "custom",  # the recipe's is study (temperature 0.7): these tests choose their own
        "eval.size": 12,
        "eval.at_end": False,
        "logging.progress": False,
        "checkpoint.every": 0,
    }
    train(load_config(None, {**base, **overrides}))
    return tmp_path / name


def _rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_an_extra_set_is_evaluated_and_reported_on_its_own(tmp_path):
    """The same 12 testbed problems as a second set, from the same seed: the same pass@1, in eval_again.jsonl
    (eval.jsonl holds the first set only)."""
    extra = [{"name": "again", "task": "testbed", "split": "test", "size": 12}]
    run = _run(tmp_path, "extra", **{"eval.extra_sets": extra, "eval.temperature": 1.0})
    (first,), (again,) = _rows(run / "eval.jsonl"), _rows(run / "eval_again.jsonl")
    assert again["eval_set"] == "again" and "eval_set" not in first
    assert (again["tag"], again["step"], again["n_problems"]) == ("base", 0, 12)
    assert again["pass@1"] == first["pass@1"]


def test_eval_top_p_is_the_evaluations_own(tmp_path):
    """At temperature 1 a nucleus of 1e-9 keeps only the most likely token: the evaluation decodes greedily."""
    greedy = _rows(_run(tmp_path, "greedy", **{"eval.temperature": 0.0}) / "eval.jsonl")[0]
    nucleus = _rows(_run(tmp_path, "nucleus", **{"eval.temperature": 1.0, "eval.top_p": 1e-9}) / "eval.jsonl")[0]
    sampled = _rows(_run(tmp_path, "sampled", **{"eval.temperature": 1.0}) / "eval.jsonl")[0]
    assert nucleus["pass@1"] == greedy["pass@1"]
    assert sampled["pass@1"] != greedy["pass@1"]  # top_p 1 (the rollout's): sampled


def test_extra_sets_checked_at_load():
    with pytest.raises(ConfigError, match="unknown task"):
        load_config(None, {"eval.extra_sets": [{"name": "x", "task": "nope"}]})
    with pytest.raises(ConfigError, match="'math' task"):
        load_config(None, {"eval.extra_sets": [{"name": "aime", "task": "aime2024"}]})  # testbed prompts
    with pytest.raises(ConfigError, match="names two sets"):
        load_config(None, {"eval.extra_sets": [{"name": "a", "task": "testbed"}, {"name": "a", "task": "testbed"}]})


def test_rolecast_eval_applies_eval_top_p(tmp_path):
    from rolecast.evaluate_cli import evaluate_steps

    def once(name, **overrides):
        cfg = load_config(None, {"eval.protocol": "custom", "eval.size": 12, "logging.progress": False, **overrides})
        evaluate_steps(cfg, out=str(tmp_path / f"{name}.jsonl"))
        return _rows(tmp_path / f"{name}.jsonl")[0]["pass@1"]

    assert once("nucleus", **{"eval.temperature": 1.0, "eval.top_p": 1e-9}) == once("greedy")
