"""The embedded testbed: tasks, prompts, tokenizer, reproducible build, and the shipped artifact."""

from __future__ import annotations

import random
import re

import pytest
import torch

from rolecast.prompts import PromptBook
from rolecast.tasks import make_task
from rolecast.tasks.testbed import code_functions, code_program, code_value
from rolecast.testbed import default_path, info
from rolecast.testbed import transcripts as T
from rolecast.testbed.builder import Curriculum, encode, greedy

torch.set_num_threads(2)


@pytest.fixture(scope="module")
def arith():
    return make_task("testbed")


@pytest.fixture(scope="module")
def code():
    return make_task("testbed_code")


@pytest.fixture(scope="module")
def shipped():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    p = default_path()
    return AutoModelForCausalLM.from_pretrained(p).eval(), AutoTokenizer.from_pretrained(p)


# --- tasks -------------------------------------------------------------------------------------------


def test_held_out_questions_never_in_train_pool(arith, code):
    test, train = arith.problems("test"), arith.problems("train")
    assert len(test) == 400 and len(train) > 4000
    assert not {p.text for p in test} & {p.text for p in train}
    assert len({p.id for p in train}) == len(train) and len({p.id for p in test}) == len(test)
    # Both generators are in both splits, and the test split is the same object for the same seed.
    assert {p.meta["source"] for p in test} == {"chain_sum", "basic_arithmetic"}
    assert [p.text for p in make_task("testbed").problems("test")] == [p.text for p in test]
    # Code holds out whole functions, not just example inputs.
    assert not {p.reference for p in code.problems("test")} & {p.reference for p in code.problems("train")}


def test_problem_text_is_the_bare_expression(arith):
    p = arith.problems("test")[0]
    assert re.fullmatch(r"[-+()\d ]+", p.text), p.text
    assert int(p.reference) == eval(p.text)  # our own generator's expression, not model output


def test_arithmetic_scoring(arith):
    from rolecast.tasks.base import Problem

    p = Problem(id="t", text="4 + 3 - 2", reference="5")
    assert arith.score(p, "\\boxed{5}").reward == 1.0
    assert arith.score(p, "= 5 \\boxed{+5}").reward == 1.0
    assert arith.score(p, "\\boxed{3} no, \\boxed{5}").reward == 1.0  # the last box counts
    assert arith.score(p, "\\boxed{6}").reward == 0.0
    assert arith.score(p, "\\boxed{5} then \\boxed{6}").reward == 0.0
    wrong_kind = arith.score(p, "\\boxed{five}")
    assert wrong_kind.reward == 0.0 and wrong_kind.answer == "five" and wrong_kind.reason
    none = arith.score(p, "5")
    assert none.reward == 0.0 and none.answer is None and "boxed" in none.reason
    assert arith.score(p, None).reward == 0.0


def test_code_problems_are_consistent():
    fs = code_functions()
    assert len(fs) == len(set(fs)) > 150
    assert code_value("x*3-2", 4) == 10 and code_value("x*x+1", 3) == 10 and code_value("x-7", 1) == -6
    # No two hidden functions agree on the shown inputs, so every problem has one answer in the family.
    shown = {tuple(code_value(f, x) for x in range(1, 4)) for f in fs}
    assert len(shown) == len(fs)


def test_code_scoring_through_sandbox(code):
    pytest.importorskip("rolecast.rewards.code", reason="the code sandbox has not landed yet")
    p = next(q for q in code.problems("test") if re.fullmatch(r"x\*\d[+-]\d", q.reference))
    right = code_program(p.reference)
    # The same function written differently still passes: it is run, not string-compared.
    equivalent = code_program(p.reference.replace("x*", "(x+0)*"))
    wrong = code_program(T.near_misses(p)[0])
    # A lookup table of the shown examples fails the hidden inputs.
    pairs = ", ".join(f"{x}: {y}" for x, y in p.meta["tests"][:3])
    table = f"```python\ndef f(x): return {{{pairs}}}[x]\n```"
    texts = [right, equivalent, wrong, table, "```python\ndef f(x) return 1\n```", "no code at all"]
    scores = code.score_many([p] * len(texts), texts)
    assert [s.reward for s in scores] == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    # why each scored 0: plain wrong answers (the tests ran), a program that does not load, no program
    assert [s.reason for s in scores] == [None, None, None, None, "load_error: SyntaxError", "no_code"]
    assert code.score(p, right).reward == 1.0
    assert scores[5].answer is None


# --- prompts and transcripts -------------------------------------------------------------------------


def test_every_role_renders_with_the_workflow_variables(arith):
    book = PromptBook("testbed")
    prob = arith.problems("test")[0].text
    sol = "\\boxed{5}"
    rendered = {
        "solve": book.render("solve", problem=prob),
        "refine": book.render(
            "refine", problem=prob, history=[{"solution": sol, "critique": "4-1=3 vs 5 \\boxed{Incorrect}"}]
        ),
        "evaluate": book.render("evaluate", problem=prob, solution=sol, history=[]),
        "aggregate": book.render("aggregate", problem=prob, solutions=[sol, "\\boxed{4}", sol]),
        "orchestrate": book.render("orchestrate", problem=prob, k=3),
        "work": book.render("work", problem=prob, strategy="left to right"),
        "synthesize": book.render("synthesize", problem=prob, strategies=["a", "b"], solutions=[sol, sol]),
        "synthesize_pick": book.render("synthesize_pick", problem=prob, strategies=["a", "b"], solutions=[sol, sol]),
    }
    assert set(rendered) == book.names()
    for name, msgs in rendered.items():
        assert [m["role"] for m in msgs] == ["user"], name
        assert prob in msgs[0]["content"], name
    assert rendered["aggregate"][0]["content"].endswith("3: \\boxed{5}")
    # Orch-Workers' `synthesis: pick` asks with its own tag, over the same list
    merge, name = rendered["synthesize"][0]["content"], rendered["synthesize_pick"][0]["content"]
    assert merge.startswith("merge: ") and name == "name: " + merge.removeprefix("merge: ")


def test_teacher_labels_are_balanced_and_consistent():
    cur = Curriculum(0)
    rng = random.Random(1)
    exs = cur.sample(rng, 3000)
    by_role = {r: [e for e in exs if e.role == r] for r in T.ROLES}
    assert all(by_role[r] for r in T.ROLES)
    for e in exs:
        # The teacher's own completion must pass the judge, or the eval numbers mean nothing; the synthesizer's
        # follows its procedure (two agreeing workers), which is wrong when two workers agree on a wrong answer.
        ok_format, right, _ = T.judge(e, e.target)
        assert ok_format and (right or e.role == "synthesize"), (e.role, e.messages, e.target)
    verdicts = [e.target.endswith("{Correct}") for e in by_role["evaluate"]]
    assert 0.35 < sum(verdicts) / len(verdicts) < 0.65  # a constant verdict must not score well
    picks = [e.target[-2] for e in by_role["aggregate"]]
    assert max(picks.count(c) for c in "123") / len(picks) < 0.7
    # Near misses are wrong answers.
    for e in exs[:300]:
        assert not any(T.is_correct(e.problem, T.answer_text(e.problem, m)) for m in T.near_misses(e.problem))


def test_strategies_are_distinct_and_parse_like_the_workflow():
    from rolecast.workflows.parsing import parse_strategies

    cur = Curriculum(0)
    for p in list(cur.arith.problems("test")[:50]) + list(cur.code.problems("test")[:20]):
        for k in (1, 3, 4):
            plan = T.strategies_for(p, k)
            assert len(plan) == len(set(plan)) == k
            assert parse_strategies(T.plan_text(plan), k) == plan


def test_signed_terms_apply_signs_through_parentheses():
    assert T.signed_terms("7 - 8 + 9") == [7, -8, 9]
    assert T.signed_terms("-3 - -2") == [-3, 2]
    assert T.signed_terms("-( 4 - -5 )") == [-4, -5]
    assert T.signed_terms("-( -( -3 + 2 ) )") == [-3, 2]
    with pytest.raises(ValueError, match="not a sum"):
        T.signed_terms("3 * 4")


def test_workers_follow_their_strategy(arith):
    from rolecast.tasks.base import Problem

    p = Problem(id="x", text="7 - 8 + 9", reference="8")
    traces = {s: T.work_trace(p, s) for s in T.ARITH_STRATEGIES}
    assert traces["left to right"] == "7-8=-1 -1+9=8 \\boxed{8}"
    assert traces["right to left"] == "9-8=1 1+7=8 \\boxed{8}"
    assert traces["positives first"] == "7+9=16 16-8=8 \\boxed{8}"
    assert traces["count on"] == "9+7=16 16-8=8 \\boxed{8}"
    assert traces["double check"] == "7-8=-1 -1+9=8 =8 \\boxed{8}"
    # The fallback strategy (an orchestrator with no parseable plan) and code answer directly.
    assert T.work_trace(p, T.FALLBACK_STRATEGY) == "\\boxed{8}"
    # Every trace of every problem is arithmetic that checks out and ends at the answer.
    for q in arith.problems("test"):
        for s in T.ARITH_STRATEGIES:
            trace = T.work_trace(q, s)
            for a, op, b, total in re.findall(r"(-?\d+)([+-])(\d+)=(-?\d+)", trace):
                assert int(a) + (int(b) if op == "+" else -int(b)) == int(total), (q.text, s, trace)
            assert T.is_correct(q, trace) and trace.split()[-2].endswith(f"={q.reference}"), (q.text, s, trace)


def test_the_synthesizer_reads_each_workers_final_answer():
    """The testbed's synthesize prompt shows answers, as its warm start was trained on: a worker's trace
    is cut to its last boxed answer; a completion with none is shown whole."""
    book = PromptBook("testbed")
    sols = ["7-8=-1 -1+9=8 \\boxed{8}", "9-8=1 1+7", "\\boxed{}", "```python\ndef f(x): return x\n```"]
    text = book.render("synthesize", problem="7 - 8 + 9", strategies=[], solutions=sols)[-1]["content"]
    assert text == (
        "merge: 7 - 8 + 9\n1: \\boxed{8}\n2: 9-8=1 1+7\n3: \\boxed{}\n4: ```python\ndef f(x): return x\n```"
    )
    # The warm start's own candidates are bare answers, so its prompts render exactly as before the filter.
    rng = random.Random(0)
    for q in make_task("testbed").problems("test")[:100]:
        ex = T.make_example("synthesize", q, rng, book)
        lines = ex.messages[-1]["content"].split("\n")[1:]
        assert lines == [f"{i}: {c}" for i, c in enumerate(ex.info["candidates"], 1)]


def _derivation(p, text: str) -> tuple[str, str]:
    """(the judging role's own answer, the rest of its output), checking the derivation it starts with: for
    arithmetic the left-to-right running sums, each step correct; for code `= <expression>`."""
    if "tests" in p.meta:
        own, rest = re.fullmatch(r"= (\S+) (.*)", text, re.S).groups()
        return own, rest
    steps = T.work_trace(p, "left to right").removesuffix(f" \\boxed{{{p.reference}}}")
    assert text.startswith(steps + " "), (p.text, text)
    return steps.rsplit("=", 1)[1], text[len(steps) + 1 :]


def test_judging_roles_rederive_the_answer_then_compare_adjacent_spans(arith, code):
    book, rng = PromptBook("testbed"), random.Random(3)
    for task in (arith, code):
        for p in task.problems("train")[:40]:
            ex = T.make_example("evaluate", p, rng, book)
            candidate = ex.messages[0]["content"].split("try: ", 1)[1]
            own, rest = _derivation(p, ex.target)
            assert own == p.reference
            shown, verdict = re.fullmatch(r"vs (.+) \\boxed\{(Correct|Incorrect)\}", rest).groups()
            assert shown == (T.extract(p, candidate) or "?").removeprefix("def f(x): return ")
            assert (verdict == "Correct") == T.is_correct(p, candidate)
            assert [ex.target[a:b] for a, b in ex.decisions] == [verdict]

            ex = T.make_example("aggregate", p, rng, book)
            own, rest = _derivation(p, ex.target)
            assert own == p.reference
            rows = re.findall(r"(\d):(\S+) vs (\S+) (yes|no) ", rest)
            assert rows and {o for _, _, o, _ in rows} == {own}
            # Candidates in order up to the first match; the pick is the matching row's label.
            assert [int(i) for i, _, _, _ in rows] == list(range(1, len(rows) + 1))
            assert [v for _, _, _, v in rows[:-1]] == ["no"] * (len(rows) - 1)
            pick = ex.target.rsplit("{", 1)[1].rstrip("}")
            if rows[-1][3] == "yes":
                assert pick == rows[-1][0] and T.is_correct(p, ex.info["candidates"][int(pick) - 1])
            else:
                assert len(rows) == len(ex.info["candidates"])
            assert [ex.target[a:b] for a, b in ex.decisions] == [v for *_, v in rows] + [pick]

            ex = T.make_example("refine", p, rng, book)
            if task is arith:
                assert _derivation(p, ex.target) == (p.reference, f"\\boxed{{{p.reference}}}")
                # The critiques it reads are evaluator outputs: a derivation (here ending at a slip), the verdict.
                for critique in re.findall(r"check: (.*)", ex.messages[0]["content"]):
                    assert re.fullmatch(r"(-?\d+[+-]\d+=-?\d+ )+vs \S+ \\boxed\{Incorrect\}", critique), critique


def test_the_synthesizer_gives_the_first_answer_two_workers_agree_on(arith, code):
    """Pairs in order (1-2, 1-3, 2-3, 1-4, ...) up to the first agreement, whose answer it gives, even a wrong
    one; with no agreement, its own derivation. Each yes/no is a decision."""
    book, rng = PromptBook("testbed"), random.Random(5)
    seen = {"agree": 0, "agree_wrong": 0, "none": 0}
    for task in (arith, code):
        for p in task.problems("train")[:150]:
            ex = T.make_example("synthesize", p, rng, book)
            shown = [(T.extract(p, c) or "?").removeprefix("def f(x): return ") for c in ex.info["candidates"]]
            rows = re.findall(r"(\d):(\S+) vs (\d):(\S+) (yes|no) ", ex.target)
            pairs = [(j, i) for i in range(len(shown)) for j in range(i)]
            assert [(int(a) - 1, int(b) - 1) for a, _, b, _, _ in rows] == pairs[: len(rows)]
            assert all(shown[int(a) - 1] == x and shown[int(b) - 1] == y for a, x, b, y, _ in rows)
            assert [v for *_, v in rows] == ["yes" if x == y != "?" else "no" for _, x, _, y, _ in rows]
            assert [ex.target[a:b] for a, b in ex.decisions] == [v for *_, v in rows]
            if rows and rows[-1][4] == "yes":
                agreed = rows[-1][1]
                assert T.extract(p, ex.target).removeprefix("def f(x): return ") == agreed
                seen["agree"] += 1
                seen["agree_wrong"] += not T.is_correct(p, ex.target)
            else:
                assert len(rows) == len(pairs)
                tail = ex.target[ex.target.rindex(" no ") + 4 :] if rows else ex.target
                assert _derivation(p, tail)[0] == p.reference and T.is_correct(p, ex.target)
                seen["none"] += 1
    assert seen["agree"] > 50 and seen["none"] > 30 and seen["agree_wrong"] > 5, seen


def test_decision_tokens_weigh_more_in_the_warm_start(shipped):
    from rolecast.testbed.builder import completion_weights

    _, tok = shipped
    book, rng = PromptBook("testbed"), random.Random(0)
    p = make_task("testbed").problems("train")[0]
    ex = T.make_example("evaluate", p, rng, book)
    ids = encode(tok, ex)[1]
    w = completion_weights(tok, ex, len(ids), 5.0)
    heavy = [tok.decode([i]) for i, x in zip(ids, w, strict=False) if x == 5.0]
    assert "".join(heavy).strip("{") in ("Correct", "Incorrect") and w.count(1.0) == len(ids) - len(heavy)
    assert completion_weights(tok, T.make_example("solve", p, rng, book), 4, 5.0) == [1.0] * 4


# --- tokenizer and model ------------------------------------------------------------------------------


def test_tokenizer_splits_digits_and_has_qwen_specials(shipped):
    model, tok = shipped
    ids = tok.encode("12 + 3045", add_special_tokens=False)
    digits = [t for t in tok.convert_ids_to_tokens(ids) if any(c.isdigit() for c in t)]
    assert digits == ["1", "2", "3", "0", "4", "5"]
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    for s in ("<|endoftext|>", "<|im_start|>", "<|im_end|>"):
        assert tok.encode(s, add_special_tokens=False) == [tok.convert_tokens_to_ids(s)]
    assert model.config.eos_token_id == tok.eos_token_id and model.config.pad_token_id == tok.pad_token_id
    assert 2000 <= len(tok) <= 4096 and model.config.vocab_size == len(tok)


def test_chat_template_renders_qwen_layout(shipped):
    _, tok = shipped
    msgs = [{"role": "user", "content": "solve: 4 + 3"}]
    text = tok.apply_chat_template(msgs, add_generation_prompt=True, enable_thinking=False, tokenize=False)
    assert text == "<|im_start|>user\nsolve: 4 + 3<|im_end|>\n<|im_start|>assistant\n"
    assert (
        tok.apply_chat_template(msgs, add_generation_prompt=False, tokenize=False)
        == "<|im_start|>user\nsolve: 4 + 3<|im_end|>\n"
    )


def test_training_sequences_match_what_a_rollout_sees(shipped):
    _, tok = shipped
    ex = Curriculum(0).sample(random.Random(0), 1)[0]
    prompt_ids, completion_ids = encode(tok, ex)
    via_template = tok.apply_chat_template(
        ex.messages, add_generation_prompt=True, enable_thinking=False, tokenize=True
    )
    via_template = via_template["input_ids"] if hasattr(via_template, "keys") else via_template
    assert prompt_ids == list(via_template)
    assert completion_ids[-1] == tok.eos_token_id
    assert tok.decode(completion_ids, skip_special_tokens=True) == ex.target


def test_shipped_artifact_size_and_fp32_load(shipped):
    model, _ = shipped
    size = sum(f.stat().st_size for f in default_path().iterdir())
    assert size <= 10 * 2**20, size
    assert model.dtype == torch.float32
    n = sum(p.numel() for p in model.parameters())
    assert 2.0e6 < n < 3.2e6
    d = info()
    assert d["params"] == n and set(d["roles"]) >= {f"testbed/{r}" for r in T.ROLES}


def test_left_padded_batch_decodes_like_single_prompts(shipped):
    model, tok = shipped
    exs = Curriculum(0).held_out(0, per_role=4)
    prompts = [encode(tok, e)[0] for e in exs if e.role in ("solve", "aggregate")][:8]
    assert len({len(p) for p in prompts}) > 1  # the batch really is ragged
    batched = greedy(model, tok, prompts, 12)
    single = [greedy(model, tok, [p], 12)[0] for p in prompts]
    assert batched == single


def test_shipped_solver_accuracy_leaves_room_for_rl(shipped, arith):
    model, tok = shipped
    probs = arith.problems("test")[:100]
    book = PromptBook("testbed")
    prompts = [
        tok.apply_chat_template(
            book.render("solve", problem=p.text), add_generation_prompt=True, enable_thinking=False, tokenize=False
        )
        for p in probs
    ]
    outs = greedy(model, tok, [tok.encode(s, add_special_tokens=False) for s in prompts], 8)
    acc = sum(arith.score(p, o).reward for p, o in zip(probs, outs, strict=True)) / len(probs)
    assert all(o.startswith("\\boxed{") for o in outs)
    assert 0.2 < acc < 0.75, acc


def test_shipped_judging_roles_do_their_job(shipped):
    """On held-out problems, each judging role beats the trivial policy it could collapse to (the first
    build's evaluator said Correct 97% of the time and its aggregator always picked candidate 1)."""
    from rolecast.testbed.builder import evaluate_roles

    model, tok = shipped
    exs = [e for e in Curriculum(0).held_out(0, per_role=200) if e.task == "testbed"]
    exs = [e for e in exs if e.role in ("evaluate", "aggregate", "synthesize", "work")]
    r = evaluate_roles(model, tok, exs, strategy_problems=50)
    ev = r["testbed/evaluate"]
    assert ev["balanced_accuracy"] - ev["balanced_accuracy_ci"] > 0.5, ev
    assert 0.15 < ev["said_correct"] < 0.85, ev
    agg = r["testbed/aggregate"]
    for margin in (agg["vs_first"], agg["vs_random"]):  # where a correct candidate exists
        assert margin["margin"] - margin["margin_ci"] > 0, agg
    syn = r["testbed/synthesize"]["vs_first"]
    assert syn["margin"] - syn["margin_ci"] > 0, syn
    strategies = r["testbed/work"]["strategies"]
    assert strategies["outputs_differ"] > 0.8 and strategies["answers_differ"] > 0.1, strategies
    # The recorded numbers are this evaluation's (same held-out examples, greedy).
    recorded = info()["roles"]
    assert recorded["testbed/evaluate"]["balanced_accuracy"] == ev["balanced_accuracy"]
    assert recorded["testbed/aggregate"]["vs_first"] == agg["vs_first"]


def test_shipped_judging_roles_do_their_job_on_their_own_rollouts():
    """What the map trains on: the judging roles read what the same model just wrote (T = 0.7), and each beats
    its trivial policy there too (docs/testbed.md). The recorded numbers are re-measured, so the docs cannot
    drift. The first rebuild passed on noise-model candidates and failed here: its judges' one-step answers
    repeated the candidates' mistakes."""
    from rolecast.testbed.rollouts import rollout_competence

    recorded = info()["rollouts"]
    p = recorded["protocol"]
    measured = rollout_competence(default_path(), problems=p["problems"], samples=p["samples"], threads=1)
    assert measured == recorded
    ev = measured["eval_opt"]
    assert ev["balanced_accuracy"] - ev["balanced_accuracy_ci"] > 0.5 and 0.15 < ev["accept_rate"] < 0.85, ev
    agg = measured["voting"]
    for margin in (agg["vs_first"], agg["vs_random"]):  # where some voter is right
        assert margin["margin"] - margin["margin_ci"] > 0, agg
    syn = measured["orch_workers"]["vs_first"]
    assert syn["margin"] - syn["margin_ci"] > 0, syn


def test_rollout_synthesizer_summary_counts_workers_by_hand():
    """What the workers gave the synthesizer, on three hand-built episodes (truth 8): disagreement, accuracy by
    position and the majority-vote ceiling (ties and no majority: worker 1)."""
    from rolecast.core.episode import AnswerClaim, Episode, Turn
    from rolecast.testbed.rollouts import _synthesizer

    def ep(workers: list[str], final: str) -> Episode:
        turns = []
        for role, text in [*(("worker", w) for w in workers), ("synthesizer", final)]:
            t = Turn(role, role, "p", [1], [2], [0.0], text, "stop", claim=AnswerClaim(text))
            t.claim.correct = text == "\\boxed{8}"  # what scoring sets
            turns.append(t)
        return Episode("q", 0, turns)

    b = "\\boxed{{{}}}".format
    r = _synthesizer(
        [
            ep([b(7), b(8), b(8)], b(8)),  # majority right, worker 1 wrong, synthesizer right
            ep([b(8), b(8), b(8)], b(7)),  # all agree and right, synthesizer wrong
            ep([b(8), b(6), b("-0")], b(8)),  # no majority: worker 1
        ]
    )
    assert r["accuracy"] == round(2 / 3, 4) and r["baseline_first"] == round(2 / 3, 4)
    assert r["vs_first"]["margin"] == 0.0
    assert r["workers_disagree"] == round(2 / 3, 4)
    assert r["worker_accuracy"] == {"1": round(2 / 3, 4), "2": round(2 / 3, 4), "3": round(2 / 3, 4)}
    assert r["majority_vote"] == 1.0


def test_large_testbed_is_the_same_recipe_at_four_times_the_size():
    from rolecast.config.load import load_config

    small, large = info(default_path("small")), info(default_path("large"))
    assert (small["size"], large["size"]) == ("small", "large")
    assert 3.3 < large["params"] / small["params"] < 4.5
    recipe = (
        "seed", "steps", "batch_size", "lr", "threads", "role_weights", "code_share", "solver_phase_steps",
        "solver_phase_roles", "solver_phase_code_share", "decision_weight", "corpus", "vocab_size",
    )  # fmt: skip
    assert {k: small[k] for k in recipe} == {k: large[k] for k in recipe}
    assert set(large["roles"]) == set(small["roles"])
    assert load_config(overrides={"model.path": "testbed-large"}).model.path == "testbed-large"
    with pytest.raises(ValueError, match="sizes"):
        default_path("huge")


def test_build_is_deterministic(tmp_path):
    from safetensors.torch import load_file

    from rolecast.testbed import build

    # A tiny budget: same seed twice must give the same (newly trained) tokenizer and bit-identical weights.
    kw = dict(
        tokenizer_dir=None,
        seed=3,
        steps=20,
        solver_steps=10,
        batch_size=16,
        evaluate=False,
        corpus_transcripts=300,
        filler_per_generator=10,
        log=lambda _: None,
    )
    a = build(tmp_path / "a", **kw)
    b = build(tmp_path / "b", **kw)
    assert (a / "tokenizer.json").read_text() == (b / "tokenizer.json").read_text()
    wa, wb = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert wa.keys() == wb.keys()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    # By default a build reuses the shipped tokenizer (as the shipped builds do), whatever the corpus is.
    c = build(tmp_path / "c", **{**{k: v for k, v in kw.items() if k != "tokenizer_dir"}, "steps": 2})
    assert (c / "tokenizer.json").read_text() == (default_path() / "tokenizer.json").read_text()
    assert info(c)["tokenizer_sha256"] == info()["tokenizer_sha256"] != info(a)["tokenizer_sha256"]
    # the machine it was built on, beside the weights: another CPU can round them differently
    assert info(a)["machine"]["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert info(a)["machine"]["torch_threads"] == 2 and info(a)["threads"] == 2


def test_code_build_is_deterministic(tmp_path):
    """The code build's own path (its curriculum of checks, the solver phase, warm start from the shipped math build):
    the same short build twice gives bit-identical weights, which its 6 steps moved away from the math build's."""
    from safetensors.torch import load_file

    from rolecast.testbed import build

    kw = dict(kind="code", seed=3, steps=6, solver_steps=3, batch_size=8, evaluate=False, log=lambda _: None)
    a, b = build(tmp_path / "a", **kw), build(tmp_path / "b", **kw)
    wa, wb, init = (load_file(p / "model.safetensors") for p in (a, b, default_path()))
    assert wa.keys() == wb.keys() == init.keys()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert not all(torch.equal(wa[k], init[k]) for k in wa)  # it trained: equal builds are not the untouched start
    assert info(a)["kind"] == "code" and info(a)["steps"] == 6


def test_testbed_build_command_line_options_reach_the_build(tmp_path):
    """`--steps`, `--threads`, `--eval-every` and `--tokenizer` (default: the shipped one; `train`: a new one; DIR:
    that build's) are what the build records."""
    from rolecast.cli import main

    def built(name: str, *flags: str) -> dict:
        assert main(["testbed", "build", "--out", str(tmp_path / name), "--steps", "2", "--no-eval", *flags]) == 0
        return info(tmp_path / name)

    shipped = info()["tokenizer_sha256"]
    a = built("a", "--threads", "1", "--eval-every", "2")
    assert (a["steps"], a["threads"], a["tokenizer_sha256"]) == (2, 1, shipped)
    assert [point["step"] for point in a["solver_curve"]] == [2]
    b = built("b", "--tokenizer", "train")
    assert b["threads"] == 2 and b["tokenizer_sha256"] != shipped
    assert built("c", "--tokenizer", str(tmp_path / "b"))["tokenizer_sha256"] == b["tokenizer_sha256"]


def test_the_solver_curve_is_recorded_every_n_steps_and_leaves_the_weights_alone(tmp_path):
    """`eval_every` keeps the held-out solver's accuracy every N steps in build_info.json; the greedy evaluation
    between steps changes nothing the build trains (the same weights as a build without it)."""
    from safetensors.torch import load_file

    from rolecast.testbed import build

    kw = dict(steps=2, batch_size=16, evaluate=False, corpus_transcripts=300, filler_per_generator=10)
    with_curve = build(tmp_path / "curve", eval_every=1, log=lambda _: None, **kw)
    default = build(tmp_path / "default", log=lambda _: None, **kw)  # every 100 steps: none in 2
    curve = info(with_curve)["solver_curve"]
    assert [point["step"] for point in curve] == [1, 2]
    assert all(0.0 <= point["solver_accuracy"] <= 1.0 for point in curve)
    assert info(default)["solver_curve"] == []
    wa, wb = (load_file(p / "model.safetensors") for p in (with_curve, default))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    with pytest.raises(ValueError, match="eval_every must be >= 0"):
        build(tmp_path / "bad", eval_every=-1, **kw)


def test_one_command_line_for_the_testbed(capsys):
    """`rolecast testbed info` prints the build's per-role table; the package has no second CLI of its own."""
    import rolecast.testbed
    from rolecast.cli import main

    assert main(["testbed", "info"]) == 0
    out = capsys.readouterr().out
    assert "testbed/solve" in out and "params" in out
    assert not hasattr(rolecast.testbed, "main")
