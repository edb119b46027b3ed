"""The study's parsers and grader next to rolecast's: each rule pinned on the cases where they differ."""

from __future__ import annotations

import pytest
from echo_task import PROBLEM, EchoTask

from rolecast.policies.router import build_routing
from rolecast.prompts import PromptBook
from rolecast.rewards.math import extract_answer, score_math
from rolecast.rewards.math_study import study_equivalent, study_extract
from rolecast.rollout.engine import run_episodes
from rolecast.rollout.scripted import ScriptedBackend
from rolecast.scoring import attribute, score_episodes
from rolecast.workflows import get_workflow, parse_choice, parse_strategies, parse_verdict
from rolecast.workflows.parsing import study_parse_choice, study_parse_strategies, study_parse_verdict

# ------------------------------------------------------------------------------------------------ math grader


@pytest.mark.parametrize("text,gold", [(r"so \boxed{3+4}", "7"), (r"\boxed{17 \times 3}", "51")])
def test_an_unevaluated_expression_scores_for_rolecast_but_not_for_the_study(text, gold):
    assert score_math(text, gold).reward == 1.0  # rolecast evaluates the boxed expression
    assert not study_equivalent(gold, study_extract(text))  # the study compares the boxed answer itself


@pytest.mark.parametrize(
    "text,rolecast,study",
    [
        (r"\boxed 5", "5", None),  # brace-less box: rolecast reads the next token, the study nothing
        (r"\fbox{5}", "5", None),  # \fbox: rolecast reads it; the study looks only for \boxed
        (r"so \boxed{5", "5", None),  # unclosed (truncated): rolecast falls back to the last number; the study nothing
        (r"\boxed{2} then \boxed{3}", "3", "3"),  # both take the last box
        (r"<think>\boxed{1}</think> final \boxed{2}", "2", "2"),
    ],
)
def test_extraction_rules(text, rolecast, study):
    assert extract_answer(text) == rolecast
    assert study_extract(text) == study


def test_study_grader_equivalences():
    assert study_equivalent(r"\frac{1}{2}", r"\dfrac12")
    assert study_equivalent("0.5", r"\frac{1}{2}")
    assert study_equivalent("1000", "1,000")
    assert not study_equivalent("1/2", "2/4")  # unreduced fractions are not accepted
    assert study_equivalent("(1, 2)", "(1,2)")
    assert study_equivalent(r"\frac{\sqrt{2}}{2}", r"\sqrt{2}/2")  # non-integer gold: sympy decides
    assert study_equivalent(r"\boxed{7}", "7")  # a boxed gold is reduced to its box


# ------------------------------------------------------------------------------------------------ aggregator


@pytest.mark.parametrize(
    "text,rolecast,study",
    [
        (r"= 24 \boxed{4}", 1, 0),  # rolecast: box 4 out of range, then any digit: the 2 of "24"; study: first
        #                             standalone digit is the 4 (out of range) -> candidate 1
        (r"\boxed{2} on reflection \boxed{3}", 2, 1),  # rolecast: last box; study: first box
        ("I pick solution 3.", 2, 2),
        (r"\boxed{Solution 2}", 1, 1),  # study: no \boxed{<digits>}; first standalone digit 2
        ("candidate 12 or 3", 0, 2),  # rolecast: the first digit 1..n is the 1 of "12"; study: standalone 3
        ("none", 0, 0),
    ],
)
def test_aggregator_choice(text, rolecast, study):
    assert parse_choice(text, 3) == rolecast
    assert study_parse_choice(text, 3) == study


# ------------------------------------------------------------------------------------------------ verdict


@pytest.mark.parametrize(
    "text,rolecast,study",
    [
        (r"\boxed{Correct}", True, "correct"),
        (r"\boxed{incorrect}", False, "incorrect"),
        ("Looks fine to me.", False, "unknown"),  # rolecast: Incorrect; study: its own outcome
        (r"\boxed{Incorrect} ... actually \boxed{Correct}", True, "incorrect"),  # rolecast: last box; study: first
    ],
)
def test_evaluator_verdict(text, rolecast, study):
    assert parse_verdict(text) is rolecast
    assert study_parse_verdict(text) == study


# ------------------------------------------------------------------------------------------------ strategies

CASES = {
    "numbered": "1. Use algebra on the equation\n2. Draw a diagram and use geometry\n3. Try small cases",
    "paren": "1) Use algebra on the equation\n2) Draw a diagram and use geometry",
    "bullets": "- Use algebra on the equation\n- Draw a diagram and use geometry\n- Try small cases first",
    "dash": "Strategy 1 - Use algebra on the equation\nStrategy 2 - Draw a diagram and use geometry",
}


@pytest.mark.parametrize("name,study_n", [("numbered", 3), ("paren", 2), ("bullets", 3), ("dash", 2)])
def test_strategy_fallbacks(name, study_n):
    assert parse_strategies(CASES[name], 3) == []  # rolecast: nothing parsed -> one fallback worker
    got = study_parse_strategies(CASES[name], 3)
    assert len(got) == study_n and "Use algebra on the equation" in got[0]


def test_strategy_order_duplicates_and_cap():
    text = "STRATEGY 2: geometry\nSTRATEGY 1: algebra\nSTRATEGY 1: algebra\nSTRATEGY 4: cases"
    assert parse_strategies(text, 3) == ["geometry", "algebra", "cases"]  # rolecast: order kept, deduplicated
    assert study_parse_strategies(text, 3) == ["algebra", "algebra", "geometry"]  # study: sorted, duplicates kept
    assert study_parse_strategies("", 3) == [""]  # the whole (empty) reply is the one strategy
    assert study_parse_strategies("short\nlines", 3) == ["short\nlines"]  # no line > 10 chars: whole reply


# ------------------------------------------------------------------------------------------------ in the workflows


def _run(name, respond, prompts=None, **options):
    spec = get_workflow(name)
    backend = ScriptedBackend(respond)
    eps = run_episodes(
        spec,
        [PROBLEM],
        1,
        task=EchoTask(),
        prompts=prompts or PromptBook("testbed"),
        router=build_routing(spec.roles, "isolated"),
        backend=backend,
        options=options,
    )
    return eps, backend


def test_orch_workers_worker_count_depends_on_the_parser():
    plan = CASES["numbered"]
    respond = lambda pid, m: plan if pid == "orchestrator" else r"\boxed{5}"  # noqa: E731
    for parsers, workers in (("rolecast", 1), ("first_match", 3)):
        eps, _ = _run("orch_workers", respond, parsers=parsers)
        assert sum(t.role == "worker" for t in eps[0].turns) == workers


def test_study_unknown_verdict_never_counts_as_right_under_role_rewards():
    respond = lambda pid, m: "2 + 3 = \\boxed{6}" if pid == "generator" else "Hmm."  # noqa: E731
    for parsers, expected in (("rolecast", True), ("first_match", False)):
        eps, _ = _run("eval_opt", respond, max_rounds=1, parsers=parsers)
        score_episodes(eps, {PROBLEM.id: PROBLEM}, EchoTask())
        attribute(eps, "role")
        verdict = next(t for t in eps[0].turns if t.role == "evaluator")
        # the answer is wrong: rolecast reads "Hmm." as Incorrect and pays the evaluator for it
        assert verdict.claim.correct is expected


def test_eval_opt_multi_turn_is_one_conversation(tmp_path):
    override = tmp_path / "turns.yaml"
    override.write_text("evaluate_turn:\n  user: Review the solution above.\nrefine_turn:\n  user: Improve it.\n")
    verdicts = iter([r"\boxed{Incorrect}", r"\boxed{Correct}"])
    respond = lambda pid, m: next(verdicts) if pid == "evaluator" else f"try {len(m)}"  # noqa: E731
    eps, backend = _run(
        "eval_opt",
        respond,
        prompts=PromptBook("testbed", override),
        max_rounds=3,
        parsers="first_match",
        conversation="multi_turn",
    )
    calls = [r for batch in backend.batches for r in batch]
    assert [r.role for r in calls] == ["generator", "evaluator", "generator", "evaluator"]
    last = calls[-1].messages  # the second evaluation sees the whole exchange
    assert [m["role"] for m in last if m["role"] != "system"] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
    assistant = [m["content"] for m in last if m["role"] == "assistant"]
    assert assistant == [eps[0].turns[0].text, r"\boxed{Incorrect}", eps[0].turns[2].text]
    assert last[-1]["content"] == "Review the solution above."
    with pytest.raises(RuntimeError, match="evaluate_turn"):  # the shipped testbed prompts lack the turn prompts
        _run("eval_opt", respond, conversation="multi_turn")
