"""The shipped code testbed (`testbed-code`, small): what issue 36 asks of a code task a map can be drawn on, re-measured
on each run of the suite so docs/testbed.md cannot drift from the weights.

- the solver's base pass@1 between 0.4 and 0.7 (greedy, all 80 held-out problems, graded in the sandbox);
- on the model's own workflow rollouts (`rolecast testbed rollouts --kind code`): the evaluator's balanced
  accuracy >= 0.8, the aggregator and the synthesizer above their trivial policies (intervals excluding 0).
"""

from __future__ import annotations

import pytest
import torch

from rolecast.policies.shipped import default_path
from rolecast.prompts import PromptBook
from rolecast.tasks import make_task
from rolecast.testbed import info
from rolecast.testbed.builder import greedy

torch.set_num_threads(2)


@pytest.fixture(scope="module")
def shipped():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    p = default_path("small", "code")
    return AutoModelForCausalLM.from_pretrained(p).eval(), AutoTokenizer.from_pretrained(p)


def test_the_code_solver_is_in_the_band_rl_can_improve(shipped):
    """Greedy, every held-out problem, each program run in the sandbox by the task's own scorer."""
    model, tok = shipped
    task = make_task("testbed_code")
    probs = list(task.problems("test"))
    book = PromptBook("testbed")
    prompts = [
        tok.apply_chat_template(
            book.render("solve", problem=p.text), add_generation_prompt=True, enable_thinking=False, tokenize=False
        )
        for p in probs
    ]
    outs = greedy(model, tok, [tok.encode(s, add_special_tokens=False) for s in prompts], 48)
    scores = task.score_many(probs, outs)
    acc = sum(s.reward for s in scores) / len(probs)
    assert len(probs) == 80
    assert 0.4 <= acc <= 0.7, acc
    # the build's own judge (without running anything) agrees with the sandbox on every one of them
    assert acc == info(default_path("small", "code"))["roles"]["testbed_code/solve"]["accuracy"]


def test_the_code_roles_do_their_job_on_their_own_rollouts():
    """The recorded rollout numbers are re-measured (equality), and each judging role clears the bar."""
    from rolecast.testbed.rollouts import rollout_competence

    path = default_path("small", "code")
    recorded = info(path)["rollouts"]
    p = recorded["protocol"]
    assert p["task"] == "testbed_code"
    measured = rollout_competence(path, task="testbed_code", problems=p["problems"], samples=p["samples"], threads=1)
    assert measured == recorded
    ev = measured["eval_opt"]
    assert ev["balanced_accuracy"] >= 0.8 and 0.15 < ev["accept_rate"] < 0.85, ev
    agg = measured["voting"]
    assert agg["vs_first"]["margin"] - agg["vs_first"]["margin_ci"] > 0, agg
    syn = measured["orch_workers"]["vs_first"]
    assert syn["margin"] - syn["margin_ci"] > 0, syn
