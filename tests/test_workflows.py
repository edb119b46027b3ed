"""Workflow control flow with a scripted policy (no model): what each workflow asks, in which order and batch."""

from __future__ import annotations

import pytest
from echo_task import PROBLEM, EchoTask

from rolecast.policies.router import build_routing
from rolecast.prompts import PromptBook
from rolecast.rollout.engine import RolloutStats, run_episodes
from rolecast.rollout.scripted import ScriptedBackend
from rolecast.tasks.base import Problem
from rolecast.workflows import PickClaim, VerdictClaim, get_workflow, parse_choice, parse_strategies, parse_verdict
from rolecast.workflows.parsing import last_boxed


def run(name, respond, problems=(PROBLEM,), samples=1, sharing="isolated", **options):
    spec = get_workflow(name)
    backend = ScriptedBackend(respond)
    stats = RolloutStats()
    eps = run_episodes(
        spec,
        list(problems),
        samples,
        task=EchoTask(),
        prompts=PromptBook("testbed"),
        router=build_routing(spec.roles, sharing),
        backend=backend,
        options=options,
        stats=stats,
    )
    return eps, backend, stats


def user_text(messages):
    return messages[-1]["content"]


def test_parsers_and_fallbacks():
    assert last_boxed(r"x \boxed{1} then \boxed{\frac{1}{2}}") == r"\frac{1}{2}"
    assert parse_choice(r"I pick \boxed{2}", 3) == 1
    assert parse_choice(r"\boxed{7} no, candidate 3 is best", 3) == 2  # boxed out of range -> first digit 1..n
    assert parse_choice("none of them", 3) == 0  # -> candidate 1
    assert parse_verdict(r"looks right \boxed{Correct}") is True
    assert parse_verdict(r"\boxed{Incorrect}") is False
    assert parse_verdict("Correct!") is False  # unparseable counts as Incorrect
    assert parse_strategies("STRATEGY 1: a\nSTRATEGY 2: b\nSTRATEGY 3: a\nSTRATEGY 4: c", 3) == ["a", "b", "c"]


def test_single_one_call():
    eps, backend, _ = run("single", lambda pid, m: r"\boxed{5}")
    [ep] = eps
    assert [t.role for t in ep.turns] == ["solver"] and ep.final_text == r"\boxed{5}"
    assert ep.turns[0].policy_id == "solver"


def test_voting_batches_generators_then_aggregator_and_follows_the_pick():
    answers = iter([r"\boxed{4}", r"\boxed{5}", r"\boxed{6}"])

    def respond(pid, messages):
        return r"\boxed{2}" if pid == "aggregator" else next(answers)

    eps, backend, stats = run("voting", respond)
    [ep] = eps
    assert [len(b) for b in backend.batches] == [3, 1]  # all generators in one batch, then the aggregator
    assert [t.instance for t in ep.turns] == ["generator/0", "generator/1", "generator/2", "aggregator"]
    assert ep.final_text == r"\boxed{5}"  # candidate 2
    assert "1: \\boxed{4}" in user_text(backend.batches[1][0].messages)
    assert ep.turns[-1].claim == PickClaim(1, [r"\boxed{4}", r"\boxed{5}", r"\boxed{6}"])


def test_voting_aggregator_garbage_falls_back_to_candidate_1():
    eps, _, _ = run("voting", lambda pid, m: "???" if pid == "aggregator" else r"\boxed{9}", n=2)
    assert eps[0].final_text == r"\boxed{9}" and eps[0].turns[-1].claim.picked == 0


def test_eval_opt_stops_on_correct():
    verdicts = iter([r"= 4 \boxed{Incorrect}", r"= 5 \boxed{Correct}"])
    gens = iter([r"\boxed{4}", r"\boxed{5}", r"\boxed{6}"])

    def respond(pid, messages):
        return next(verdicts) if pid == "evaluator" else next(gens)

    eps, backend, _ = run("eval_opt", respond)
    [ep] = eps
    assert [t.role for t in ep.turns] == ["generator", "evaluator", "generator", "evaluator"]
    assert ep.final_text == r"\boxed{5}" and ep.metrics["rounds"] == 2
    refine_prompt = user_text(backend.batches[2][0].messages)
    assert refine_prompt.startswith("fix:") and r"\boxed{4}" in refine_prompt  # shared history reaches the generator
    assert ep.turns[1].claim == VerdictClaim(False, r"\boxed{4}")


def test_eval_opt_unparseable_verdict_counts_as_incorrect_until_max_rounds():
    eps, _, _ = run("eval_opt", lambda pid, m: "hmm" if pid == "evaluator" else r"\boxed{1}", max_rounds=3)
    [ep] = eps
    assert [t.role for t in ep.turns] == ["generator", "evaluator"] * 3
    assert ep.metrics["rounds"] == 3 and ep.metrics["accepted"] == 0.0


def test_eval_opt_defaults_to_two_rounds_for_code():
    class CodeEcho(EchoTask):
        family = "code"

    spec = get_workflow("eval_opt")
    # code-family prompts are rendered from the math/code prompt files; the testbed book serves here
    eps = run_episodes(
        spec,
        [PROBLEM],
        1,
        task=CodeEcho(),
        prompts=PromptBook("testbed"),
        router=build_routing(spec.roles, "shared"),
        backend=ScriptedBackend(lambda pid, m: "no verdict"),
    )
    assert eps[0].metrics["rounds"] == 2


@pytest.mark.parametrize("k_out,expected_workers", [(3, 3), (2, 2), (0, 1)])
def test_orch_workers_k_strategies_make_k_workers(k_out, expected_workers):
    plan = "\n".join(f"STRATEGY {i + 1}: way{i}" for i in range(k_out)) or "I will not plan"

    def respond(pid, messages):
        return {"orchestrator": plan, "worker": r"\boxed{5}", "synthesizer": r"\boxed{5}"}[pid]

    eps, backend, _ = run("orch_workers", respond)
    [ep] = eps
    assert [len(b) for b in backend.batches] == [1, expected_workers, 1]
    workers = [t for t in ep.turns if t.role == "worker"]
    assert len(workers) == expected_workers
    if k_out:
        assert "way: way1" in user_text(backend.batches[1][1].messages)
    assert ep.metrics["strategy_count"] == k_out


def test_orch_workers_pick_returns_the_named_workers_solution():
    """`synthesis: pick`: the synthesizer is asked to name a worker (the synthesize_pick prompt), its \\boxed{i} is
    read by the aggregator's rule, and the episode's answer is worker i's own text, not the synthesizer's."""
    plan = "STRATEGY 1: a\nSTRATEGY 2: b\nSTRATEGY 3: c"
    answers = iter([r"w \boxed{4}", r"w \boxed{5}", r"w \boxed{6}"])

    def respond(pid, messages):
        return {"orchestrator": plan, "synthesizer": r"1:4 no 2:5 yes \boxed{2}"}.get(pid) or next(answers)

    eps, backend, _ = run("orch_workers", respond, synthesis="pick")
    [ep] = eps
    prompt = user_text(backend.batches[2][0].messages)
    assert prompt.startswith("name:") and "2: \\boxed{5}" in prompt  # workers' final answers, as `synthesize`
    assert ep.final_text == r"w \boxed{5}"
    assert ep.turns[-1].claim == PickClaim(1, [r"w \boxed{4}", r"w \boxed{5}", r"w \boxed{6}"])
    # the default contract: the synthesizer's own text is the answer
    answers = iter([r"w \boxed{4}", r"w \boxed{5}", r"w \boxed{6}"])
    eps, backend, _ = run("orch_workers", respond)
    assert user_text(backend.batches[2][0].messages).startswith("merge:")
    assert eps[0].final_text == r"1:4 no 2:5 yes \boxed{2}"


def test_whole_batch_is_generated_together():
    problems = [Problem(f"p{i}", f"{i} + 1", str(i + 1)) for i in range(4)]
    eps, backend, stats = run("voting", lambda pid, m: r"\boxed{1}", problems=problems, samples=8, sharing="shared")
    # 4 problems x 8 samples x 3 generators in the first wave, 32 aggregators in the second
    assert [len(b) for b in backend.batches] == [96, 32]
    assert stats.backend_calls == 2 and len(eps) == 32
    assert [ep.problem_id for ep in eps[:9]] == ["p0"] * 8 + ["p1"]
    assert {t.policy_id for ep in eps for t in ep.turns} == {"shared"}


def test_custom_workflow_example_debate():
    """The documented example (examples/debate.py) loads by file path and runs with no trainer change."""
    from pathlib import Path

    path = Path(__file__).parents[1] / "examples" / "debate.py"
    spec = get_workflow(f"{path}:debate")
    assert spec.roles == ["debater", "judge"] and spec.defaults == {"rounds": 2}

    def respond(pid, messages):
        text = user_text(messages)
        if pid == "judge":
            return r"\boxed{2}"
        return r"\boxed{5}" if text.startswith("fix:") else r"\boxed{4}"

    backend = ScriptedBackend(respond)
    eps = run_episodes(
        spec,
        [PROBLEM],
        2,
        task=EchoTask(),
        prompts=PromptBook("testbed"),
        router=build_routing(spec.roles, "isolated"),
        backend=backend,
    )
    assert [len(b) for b in backend.batches] == [4, 4, 2]  # 2 samples x 2 debaters, twice, then 2 judges
    assert [t.instance for t in eps[0].turns] == ["debater/0", "debater/1", "debater/0", "debater/1", "judge"]
    assert eps[0].final_text == r"\boxed{5}"
    assert {t.policy_id for t in eps[0].turns} == {"debater", "judge"}
