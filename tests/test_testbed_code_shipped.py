"""The shipped code testbeds (`testbed-code`, small, and `testbed-code-large`), re-measured on each run of the suite
so docs/testbed.md cannot drift from the weights.

Issue 36 asks of a code task a map can be drawn on, in both sizes: the solver's base pass@1 between 0.4 and 0.7
(checked here: greedy, all 80 held-out problems, graded in the sandbox); on the model's own workflow rollouts the
evaluator's balanced accuracy >= 0.8 and the aggregator and synthesizer above their trivial policies. The small
build (2026-12-06, its judges checking candidates on the shown examples) meets all of it but the synthesizer's part:
evaluator 0.87 +- 0.05, aggregator +0.08 +- 0.05 over voter 1, synthesizer -0.02 +- 0.06 against worker 1. The
large build (the same recipe from the large math build) meets the solver's and the aggregator's parts: evaluator
0.78 +- 0.06 (under the bar), aggregator +0.14 +- 0.06, synthesizer -0.03 +- 0.08 (docs/testbed.md; every interval
clustered by hidden function since 2026-12-08, by problem before: the same to +-0.01). The tests
re-measure the recorded numbers (equality), check which parts are met and which are not, and the small build's
judging roles against their trivial policies on the noise model's candidates.
"""

from __future__ import annotations

import pytest
import torch

from rolecast.policies.shipped import default_path
from rolecast.tasks import make_task
from rolecast.testbed import info
from rolecast.testbed.builder import Curriculum, encode, greedy

torch.set_num_threads(2)


def _load(size: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    p = default_path(size, "code")
    return AutoModelForCausalLM.from_pretrained(p).eval(), AutoTokenizer.from_pretrained(p)


@pytest.fixture(scope="module")
def shipped():
    return _load("small")


@pytest.mark.parametrize("size", ["small", "large"])
def test_the_code_solver_is_in_the_band_rl_can_improve(size):
    """Greedy, every held-out problem, each program run in the sandbox by the task's own scorer."""
    model, tok = _load(size)
    task = make_task("testbed_code")
    exs = [e for e in Curriculum(0, "code").held_out(0, per_role=1) if e.role == "solve"]
    probs = [e.problem for e in exs]
    prompts = [encode(tok, e)[0] for e in exs]  # rendered exactly as a rollout renders them
    outs = greedy(model, tok, prompts, 48)
    scores = task.score_many(probs, outs)
    acc = sum(s.reward for s in scores) / len(probs)
    assert len(probs) == 80
    assert 0.4 <= acc <= 0.7, acc
    # the build's own judge (without running anything) agrees with the sandbox on every one of them
    assert acc == info(default_path(size, "code"))["roles"]["testbed_code/solve"]["accuracy"]


@pytest.mark.parametrize("size", ["small", "large"])
def test_the_code_roles_do_their_job_on_their_own_rollouts(size):
    """The recorded rollout numbers are re-measured (equality)."""
    from rolecast.testbed.rollouts import rollout_competence

    path = default_path(size, "code")
    recorded = info(path)["rollouts"]
    p = recorded["protocol"]
    assert p["task"] == "testbed_code"
    measured = rollout_competence(path, task="testbed_code", problems=p["problems"], samples=p["samples"], threads=1)
    assert measured == recorded
    ev = measured["eval_opt"]
    if size == "small":
        assert ev["balanced_accuracy"] - ev["balanced_accuracy_ci"] >= 0.8, ev  # the bar, with its interval
    else:
        assert ev["balanced_accuracy"] < 0.8 < ev["balanced_accuracy"] + ev["balanced_accuracy_ci"], ev  # not met
    agg = measured["voting"]["vs_first"]
    assert agg["margin"] - agg["margin_ci"] > 0, agg  # above always-voter-1
    syn = measured["orch_workers"]["vs_first"]
    assert abs(syn["margin"]) <= syn["margin_ci"], syn  # level with worker 1, not above (the bar not met)


def test_the_code_judging_roles_beat_their_trivial_policies_on_the_noise_model(shipped):
    from rolecast.testbed.builder import evaluate_roles

    model, tok = shipped
    exs = [
        e for e in Curriculum(0, "code").held_out(0, per_role=200) if e.role in ("evaluate", "aggregate", "synthesize")
    ]
    r = evaluate_roles(model, tok, exs)
    ev = r["testbed_code/evaluate"]
    assert ev["balanced_accuracy"] - ev["balanced_accuracy_ci"] >= 0.8, ev
    for margin in (r["testbed_code/aggregate"]["vs_first"], r["testbed_code/synthesize"]["vs_first"]):
        assert margin["margin"] - margin["margin_ci"] > 0, margin
    recorded = info(default_path("small", "code"))["roles"]
    assert recorded["testbed_code/evaluate"]["balanced_accuracy"] == ev["balanced_accuracy"]
