"""Failure signatures and early warning on hand-built episodes and metric streams: each detector fires on the bad
case (with the right value and example turns) and stays silent on a healthy one."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import ClassVar

import pytest

from rolecast.core.episode import Episode, Turn
from rolecast.diagnostics import signatures as sig
from rolecast.diagnostics.warnings import EarlyWarning, WarningConfig, metric_entries

TH = sig.SignatureThresholds()


def turn(role, text, instance=None, claim=None, finish="stop", tokens=None):
    n = tokens if tokens is not None else max(len(text.split()), 1)
    return {
        "role": role,
        "instance": instance or role,
        "policy_id": "p",
        "prompt_ids": [1, 2],
        "completion_ids": [0] * n,
        "logprobs": [0.0] * n,
        "text": text,
        "finish_reason": finish,
        "index": 0,
        "claim": claim,
        "reward": 0.0,
        "advantage": 0.0,
    }


def ep(i, turns, sample=0):
    return {
        "problem_id": f"p{i}",
        "sample": sample,
        "turns": turns,
        "final_answer": None,
        "reward": 0.0,
        "metrics": {},
        "metadata": {},
    }


def names(findings):
    return [(f.name, f.subject) for f in findings]


# --- role leakage ---------------------------------------------------------------------------------------


def test_planner_that_solves_is_caught_and_a_planning_one_is_not():
    bad = [ep(i, [turn("orchestrator", f"{i} + 3 = {i + 3} so \\boxed{{{i + 3}}}")]) for i in range(4)]
    bad.append(ep(9, [turn("orchestrator", "STRATEGY 1: left to right")]))
    found = sig.episode_findings(7, bad)
    assert names(found) == [("planner_solves", "orchestrator")]
    f = found[0]
    assert f.value == pytest.approx(4 / 5) and f.step == 7 and len(f.examples) == 3
    assert f.examples[0].problem_id == "p0" and "\\boxed{3}" in f.examples[0].excerpt
    good = [ep(i, [turn("orchestrator", "STRATEGY 1: left to right\nSTRATEGY 2: right to left")]) for i in range(4)]
    assert sig.episode_findings(7, good) == []


LONG = "First add the two numbers, then subtract the third one, carefully, and box it: \\boxed{5}"


def test_parallel_workers_that_echo_each_other():
    echo = [
        ep(
            i,
            [
                turn("worker", LONG + "." * (k % 2), instance=f"worker/{k}", claim={"kind": "answer", "text": LONG})
                for k in range(3)
            ],
        )
        for i in range(4)
    ]
    found = [f for f in sig.episode_findings(3, echo) if f.name == "parallel_echo"]
    assert names(found) == [("parallel_echo", "worker")] and found[0].value == 1.0
    assert {e.instance for e in found[0].examples[:2]} == {"worker/0", "worker/1"}
    varied = [
        ep(
            i,
            [
                turn("worker", t, instance=f"worker/{k}")
                for k, t in enumerate(
                    [
                        LONG,
                        "Multiply everything out term by term and then simplify the result to \\boxed{5}",
                        "Work backwards from the candidate answers, checking each against the statement: \\boxed{5}",
                    ]
                )
            ],
        )
        for i in range(4)
    ]
    assert [f for f in sig.episode_findings(3, varied) if f.name == "parallel_echo"] == []
    # a bare answer that all instances agree on is agreement, not echo
    short = [ep(i, [turn("worker", "\\boxed{5}", instance=f"worker/{k}") for k in range(3)]) for i in range(4)]
    assert [f for f in sig.episode_findings(3, short) if f.name == "parallel_echo"] == []


def verdict(text, reviewed="\\boxed{5}", accept=True, reviewed_correct=True):
    return turn(
        "evaluator",
        text,
        claim={"kind": "verdict", "accept": accept, "reviewed": reviewed, "reviewed_correct": reviewed_correct},
    )


def test_evaluator_that_rewrites_the_solution():
    bad = [
        ep(0, [verdict("The answer is wrong. Here is mine:\n```python\ndef f(x): return x*2\n```")]),
        ep(1, [verdict("= 7 \\boxed{7}")]),
        ep(2, [verdict("Let me redo it. " + "step " * 60 + "\\boxed{Correct}")]),
        ep(3, [verdict("= 5 \\boxed{Correct}")]),
    ]
    found = [f for f in sig.episode_findings(1, bad) if f.name == "evaluator_rewrites"]
    assert len(found) == 1 and found[0].value == pytest.approx(3 / 4)
    assert [e.problem_id for e in found[0].examples] == ["p0", "p1", "p2"]
    good = [ep(i, [verdict("= 5 \\boxed{Correct}"), verdict("= 4 \\boxed{Incorrect}")]) for i in range(4)]
    assert sig.episode_findings(1, good) == []


def pick(text, picked, candidates, flags=None):
    claim = {"kind": "pick", "picked": picked, "candidates": candidates}
    if flags is not None:
        claim["candidates_correct"] = flags
    return turn("aggregator", text, claim=claim)


CANDS = ["\\boxed{5}", "\\boxed{6}", "\\boxed{5}"]


def test_aggregator_that_answers_instead_of_choosing():
    bad = [ep(i, [pick("it is \\boxed{42}", 0, CANDS)]) for i in range(3)]
    found = [f for f in sig.episode_findings(2, bad) if f.name == "aggregator_answers"]
    assert len(found) == 1 and found[0].value == 1.0 and "42" in found[0].examples[0].excerpt
    good = [ep(i, [pick("= 5 \\boxed{3}", 2, CANDS)]) for i in range(3)]
    assert sig.episode_findings(2, good) == []


def rotated(i):
    """Three candidates, exactly one correct, its position rotating with i."""
    flags = [k == i % 3 for k in range(3)]
    return ["\\boxed{5}" if f else f"\\boxed{{{9 + k}}}" for k, f in enumerate(flags)], flags


def test_position_bias_fires_on_one_index_and_not_on_picks_that_follow_the_correct_one():
    biased = []
    for i in range(9):
        c, flags = rotated(i)
        biased.append(ep(i, [pick("\\boxed{1}", 0, c, flags)]))
    found = [f for f in sig.episode_findings(4, biased) if f.name == "position_bias"]
    assert len(found) == 1 and found[0].value == 1.0 and "candidate 1" in found[0].message
    healthy = []
    for i in range(9):
        c, flags = rotated(i)
        healthy.append(ep(i, [pick(f"\\boxed{{{i % 3 + 1}}}", i % 3, c, flags)]))
    assert [f for f in sig.episode_findings(4, healthy) if f.name == "position_bias"] == []
    # uncontested picks (all candidates correct) are not evidence of bias
    same = [ep(i, [pick("\\boxed{1}", 0, ["\\boxed{5}"] * 3, [True] * 3)]) for i in range(9)]
    assert [f for f in sig.episode_findings(4, same) if f.name == "position_bias"] == []


def test_blind_majority():
    cands, flags = ["\\boxed{3}", "\\boxed{3}", "\\boxed{5}"], [False, False, True]
    blind = [ep(i, [pick("\\boxed{1}", i % 2, cands, flags)]) for i in range(6)]
    found = [f for f in sig.episode_findings(5, blind) if f.name == "blind_majority"]
    assert len(found) == 1 and found[0].value == 1.0
    wise = [ep(i, [pick("\\boxed{3}", 2, cands, flags)]) for i in range(6)]
    assert [f for f in sig.episode_findings(5, wise) if f.name == "blind_majority"] == []


def test_format_failure_per_role():
    bad = [
        ep(i, [turn("solver", "the answer is five", claim={"kind": "answer", "text": "the answer is five"})])
        for i in range(3)
    ] + [ep(3, [turn("solver", "\\boxed{5}", claim={"kind": "answer", "text": "\\boxed{5}"})])]
    found = sig.episode_findings(2, bad)
    assert names(found) == [("format_failure", "solver")] and found[0].value == pytest.approx(3 / 4)
    good = [ep(i, [turn("solver", "\\boxed{5}", claim={"kind": "answer", "text": "\\boxed{5}"})]) for i in range(4)]
    assert sig.episode_findings(2, good) == []
    # a task's own extractor decides what parses
    assert sig.episode_findings(2, bad, extract=lambda t: "5" if t and "five" in t else None) == []


# --- reading episodes defensively -----------------------------------------------------------------------


@dataclass
class TypedVerdict:  # a typed claim whose kind is a class constant, so asdict() drops it
    kind: ClassVar[str] = "verdict"
    accept: bool
    reviewed: str


def test_claims_as_typed_objects_or_dicts_without_kind():
    assert sig.claim_dict(TypedVerdict(True, "x"))["kind"] == "verdict"
    assert sig.claim_dict({"picked": 1, "candidates": []})["kind"] == "pick"
    assert sig.claim_dict({"text": "x"})["kind"] == "answer"
    turns = [
        Turn(
            "evaluator",
            "evaluator",
            "p",
            [1],
            [2],
            [0.0],
            "= 7 \\boxed{7}",
            "stop",
            claim=TypedVerdict(True, "\\boxed{5}"),
        )
    ]  # type: ignore[arg-type]
    found = sig.episode_findings(1, [Episode("q", 0, turns)])
    assert names(found) == [("evaluator_rewrites", "evaluator")]


def test_malformed_episode_rows_are_skipped_not_fatal():
    assert sig.episode_findings(1, [{"problem_id": "x"}, {"turns": [{"role": "solver"}]}]) == []


# --- series signatures ----------------------------------------------------------------------------------


def run_series(stream, th=None):
    s = sig.SeriesSignatures(th)
    return [(step, f.name, f.subject, f.value) for step, m in enumerate(stream, 1) for f in s.update(step, m)]


def test_length_collapse_fires_when_the_window_mean_halves():
    stream = [{"role/worker/length": x} for x in [20, 20, 20, 8, 8, 8, 8]]
    out = run_series(stream)
    # window of 3 from step 3: means 20, 16, 12, 8, 8 -> 8 <= 0.5 * 20 first at step 6
    assert [(s, n, r) for s, n, r, _ in out] == [(6, "length_collapse", "worker"), (7, "length_collapse", "worker")]
    assert out[0][3] == pytest.approx(0.4)
    healthy = [{"role/worker/length": 20 + 2 * (-1) ** i} for i in range(10)]
    assert run_series(healthy) == []


def test_length_blowup_entropy_collapse_truncation_surge():
    stream = [
        {"role/g/length": a, "role/g/entropy": e, "role/g/truncated": t}
        for a, e, t in [(10, 1.0, 0.0)] * 3 + [(30, 0.1, 0.6)] * 3
    ]
    fired = {(n, r) for _, n, r, _ in run_series(stream)}
    assert fired == {("length_blowup", "g"), ("entropy_collapse", "g"), ("truncation_surge", "g")}
    steady = [{"role/g/length": 10, "role/g/entropy": 1.0, "role/g/truncated": 0.05}] * 8
    assert run_series(steady) == []


def test_rubber_stamping_needs_accepting_more_and_precision_falling():
    stamping = [
        {"wf/evaluator_accept_rate": a, "wf/evaluator_precision": p} for a, p in [(0.5, 0.9)] * 3 + [(1.0, 0.6)] * 3
    ]
    assert [(s, n) for s, n, _, _ in run_series(stamping)] == [(6, "rubber_stamping")]
    good_generator = [
        {"wf/evaluator_accept_rate": a, "wf/evaluator_precision": 0.95} for a in [0.5, 0.5, 0.5, 1.0, 1.0, 1.0]
    ]
    assert run_series(good_generator) == []


def test_series_state_round_trips_through_json():
    stream = [{"role/worker/length": x} for x in [20, 20, 20, 8, 8, 8, 8]]
    a = sig.SeriesSignatures()
    for step, m in enumerate(stream[:4], 1):
        a.update(step, m)
    b = sig.SeriesSignatures()
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    assert [f.step for step, m in enumerate(stream[4:], 5) for f in b.update(step, m)] == [6, 7]


# --- early warning: gradient signals -------------------------------------------------------------------


def alerts_over(stream, cfg=None):
    w = EarlyWarning(cfg)
    return [(a.step, a.name, a.subject) for step, m in enumerate(stream, 1) for a in w.check(step, m)]


def test_amplification_threshold_depends_on_instance_count():
    thr3 = 1 + 0.75 * (3 - 1)  # 2.5 on the alignment scale: mean pairwise cosine 0.75 at equal norms
    w = EarlyWarning()
    a = w.check(1, {"grad/gen/generator/alignment": 2.6, "grad/gen/generator/instances": 3})
    assert [(x.name, x.subject) for x in a] == [("amplification", "gen/generator")]
    assert a[0].threshold == pytest.approx(thr3)
    assert w.check(2, {"grad/gen/generator/alignment": 2.4, "grad/gen/generator/instances": 3}) == []
    assert w.check(3, {"grad/gen/aggregator/alignment": 1.0, "grad/gen/aggregator/instances": 1}) == []
    # the old norm ratio is no longer judged: 3.00 for one active instance of three is not alignment
    assert w.check(4, {"grad/gen/generator/norm_ratio": 3.0, "grad/gen/generator/instances": 3}) == []
    assert w.check(5, {"grad/gen/generator/amplification": 3.0, "grad/gen/generator/instances": 3}) == []
    assert metric_entries(a) == {"warn/amplification": 1.0}


def test_capture_index_only_on_a_policy_shared_by_several_roles():
    shared = {
        "grad/shared/capture_index": 0.93,
        "grad/shared/capture_role": "worker",
        "grad/shared/worker/share": 0.93,
        "grad/shared/orchestrator/share": 0.07,
    }
    assert alerts_over([shared]) == [(1, "capture", "shared/worker")]
    isolated = {"grad/worker/capture_index": 1.0, "grad/worker/capture_role": "worker", "grad/worker/worker/share": 1.0}
    assert alerts_over([isolated]) == []


def test_persistence_over_a_window():
    assert alerts_over([{"grad/p/worker/persistence": x} for x in [0.9, 0.9, 0.9]]) == [(3, "persistence", "p/worker")]
    assert alerts_over([{"grad/p/worker/persistence": x} for x in [0.9, 0.9, 0.3]]) == []


def test_grad_norm_and_update_size_spikes_vs_running_median():
    calm = [{"grad/p/norm": 1.0 + 0.1 * (i % 2), "policy/p/grad_norm": 1.0, "update/p/size": 0.01} for i in range(6)]
    spike = {"grad/p/norm": 6.0, "policy/p/grad_norm": 6.0, "update/p/size": 0.011}
    assert alerts_over([*calm, spike]) == [(7, "grad_spike", "p")]  # the duplicated policy/ norm is judged once
    assert alerts_over([*calm, {"grad/p/norm": 4.0, "update/p/size": 0.2}]) == [(7, "update_spike", "p")]
    # fewer than spike_min_history earlier values: no judgement yet
    assert alerts_over([calm[0], calm[1], spike]) == []


def test_early_warning_resumes_from_its_state_exactly():
    stream = [{"grad/p/norm": 1.0, "role/g/length": 20.0, "grad/p/g/persistence": 0.85} for _ in range(6)]
    stream += [{"grad/p/norm": 9.0, "role/g/length": 5.0, "grad/p/g/persistence": 0.85}] * 3
    whole = alerts_over(stream)
    assert {n for _, n, _ in whole} == {"grad_spike", "length_collapse", "persistence"}
    first = EarlyWarning()
    for step, m in enumerate(stream[:5], 1):
        first.check(step, m)
    second = EarlyWarning(WarningConfig())
    second.load_state_dict(json.loads(json.dumps(first.state_dict())))
    resumed = [(a.step, a.name, a.subject) for step, m in enumerate(stream[5:], 6) for a in second.check(step, m)]
    assert resumed == [x for x in whole if x[0] >= 6]


def test_early_warning_runs_episode_signatures_with_examples():
    eps = [ep(i, [turn("orchestrator", "\\boxed{7}")]) for i in range(3)]
    alerts = EarlyWarning().check(4, {}, eps)
    assert [(a.name, a.kind, a.step) for a in alerts] == [("planner_solves", "signature", 4)]
    assert alerts[0].examples[0].role == "orchestrator"
