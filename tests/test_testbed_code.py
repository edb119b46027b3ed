"""The code build of the testbed (`testbed-code`): its teacher's derivations, how its roles read each other, the
shipped names, and the build's options. The shipped code models' competence is checked in
test_testbed_code_shipped.py."""

from __future__ import annotations

import random
import re

import pytest

from rolecast.prompts import PromptBook, final_answer
from rolecast.tasks import make_task
from rolecast.tasks.testbed import code_value
from rolecast.testbed import transcripts as T
from rolecast.testbed.builder import Curriculum


@pytest.fixture(scope="module")
def code():
    return make_task("testbed_code")


def _check_steps(text: str) -> int:
    """Every `a-b=c`, `a+b=c`, `a-b*x=c`, `a*b+c=d`-style step of a derivation computes what it says; returns
    how many were checked."""
    n = 0
    for expr, value in re.findall(r"(-?\d+(?:[-+*]\d+)+)=(-?\d+)", text):
        # only digits and + - *: the step is its own arithmetic, checked by Python's integer rules
        assert re.fullmatch(r"-?\d+(?:[-+*]\d+)+", expr)
        assert eval(expr) == int(value), (text, expr, value)  # noqa: S307 - a regex-checked integer expression
        n += 1
    return n


def test_every_strategy_derives_the_hidden_function_by_its_own_computation(code):
    """On every train and held-out problem each strategy ends at the reference, each step of its trace is right,
    and the strategies write different traces (so workers' slips differ)."""
    problems = list(code.problems("train")) + list(code.problems("test"))
    distinct = 0
    for p in problems:
        traces = {s: T.code_trace(p, s) for s in T.CODE_STRATEGIES}
        assert {expr for _, expr in traces.values()} == {p.reference}, p
        assert all(_check_steps(steps) >= 1 for steps, _ in traces.values())
        assert "--" not in " ".join(steps for steps, _ in traces.values())
        distinct += len({steps for steps, _ in traces.values()}) == len(T.CODE_STRATEGIES)
    assert distinct == len(problems)


def test_code_trace_by_hand():
    """Hand-computed traces for a line and a square (f(1)=3 f(2)=5 f(3)=7 is x*2+1; f(1)=-6 f(2)=-3 f(3)=2 is
    x*x-7)."""
    from rolecast.tasks.testbed import CodeTestbed

    p = CodeTestbed.make_problem("x*2+1", 1, "test")
    assert T.code_trace(p, "use differences") == ("5-3=2 7-5=2 3-2*1=1", "x*2+1")
    assert T.code_trace(p, "find slope") == ("7-5=2 5-3=2 3-2*1=1", "x*2+1")
    assert T.code_trace(p, "check offset") == ("5-3=2 7-5=2 3-2*1=1 2*2+1=5", "x*2+1")
    assert T.code_trace(p, "try squares") == ("3-1*1=2 5-2*2=1 7-3*3=-2 5-3=2 3-2*1=1", "x*2+1")
    assert T.code_trace(p, "guess and check") == ("x*2+1 3*2+1=7", "x*2+1")
    q = CodeTestbed.make_problem("x*x-7", 1, "test")
    assert T.code_trace(q, "use differences") == ("-3+6=3 2+3=5 -6-1*1=-7", "x*x-7")
    assert T.code_trace(q, "try squares") == ("-6-1*1=-7 -3-2*2=-7 2-3*3=-7", "x*x-7")
    assert T.code_solver_text(q) == "-3+6=3 ```python\ndef f(x): return x*x-7\n```"
    # from x = 0 the offset is f(0)
    z = CodeTestbed.make_problem("x*4-3", 0, "test")
    assert z.text == "f(0)=-3 f(1)=1 f(2)=5" and [x for x, _ in z.meta["tests"]] == [0, 1, 2, 5, 7]
    assert T.code_trace(z) == ("1+3=4 5-1=4 -3-4*0=-3", "x*4-3")
    assert [T.code_expression(s, b) for s, b in ((1, 3), (1, -2), (4, 0), (None, 0), (None, 5))] == [
        "x+3",
        "x-2",
        "x*4",
        "x*x",
        "x*x+5",
    ]


def test_code_check_by_hand():
    """A candidate evaluated at each shown example, up to the first that differs (f(1)=3 f(2)=5 f(3)=7)."""
    from rolecast.tasks.testbed import CodeTestbed

    p = CodeTestbed.make_problem("x*2+1", 1, "test")
    assert T.code_check(p, "x*2+1") == ("x*2+1 1*2+1=3 vs 3 2*2+1=5 vs 5 3*2+1=7 vs 7", True)
    assert T.code_check(p, "x*2+2") == ("x*2+2 1*2+2=4 vs 3", False)
    assert T.code_check(p, "x*3") == ("x*3 1*3=3 vs 3 2*3=6 vs 5", False)
    assert T.code_check(p, "x*x+2") == ("x*x+2 1*1+2=3 vs 3 2*2+2=6 vs 5", False)
    assert T.code_check(p, "?") == ("?", False)
    z = CodeTestbed.make_problem("x-4", 0, "test")
    assert T.code_check(z, "x-4") == ("x-4 0-4=-4 vs -4 1-4=-3 vs -3 2-4=-2 vs -2", True)


def test_the_code_builds_judges_check_and_its_solvers_derive(code):
    """With `derive_code` the evaluator, aggregator and synthesizer check candidates on the shown examples
    (`code_check`) and decide by what the check says; the refiner and a synthesizer with no passing candidate
    derive (`use differences`) before their function; workers follow their strategy; the solver writes the first
    difference and then the function. Without it (the math build's code share), `= <function>`."""
    book, rng = PromptBook("testbed"), random.Random(7)
    seen = {"Correct": 0, "Incorrect": 0, "derived": 0}
    for p in code.problems("train")[:60]:
        steps, expr = T.code_trace(p)
        ev = T.make_example("evaluate", p, rng, book, derive_code=True)
        candidate = ev.messages[0]["content"].split("try: ", 1)[1]
        check, passed = T.code_check(p, T._shown(p, candidate))
        verdict = ev.target.rsplit("{", 1)[1].rstrip("}")
        assert ev.target == f"{check} \\boxed{{{verdict}}}"
        assert (verdict == "Correct") == T.is_correct(p, candidate) == passed
        assert _check_steps(check) >= (check != "?")
        seen[verdict] += 1
        agg = T.make_example("aggregate", p, rng, book, derive_code=True)
        rows = re.findall(r"(\d):(.*?) (yes|no)", agg.target)
        assert [int(i) for i, _, _ in rows] == list(range(1, len(rows) + 1))
        for i, text, said in rows:
            assert (text, said == "yes") == T.code_check(p, T._shown(p, agg.info["candidates"][int(i) - 1]))
        pick = int(agg.target.rsplit("{", 1)[1].rstrip("}"))
        assert pick - 1 == agg.info["acceptable"][0]
        if rows[-1][2] == "yes":  # the first passing candidate is the pick
            assert pick == int(rows[-1][0])
        syn = T.make_example("synthesize", p, rng, book, derive_code=True)
        rows = re.findall(r"(\d):(.*?) (yes|no) ", syn.target)
        for i, text, said in rows:
            assert (text, said == "yes") == T.code_check(p, T._shown(p, syn.info["candidates"][int(i) - 1]))
        if rows[-1][2] == "yes":  # the first passing worker's program
            chosen = T._shown(p, syn.info["candidates"][int(rows[-1][0]) - 1])
            assert syn.target.endswith(f"yes {T.answer_text(p, chosen)}") and T.is_correct(p, syn.target)
        else:  # none passed: its own derivation, then the function
            assert syn.target.endswith(f"no {steps} {expr} {T.answer_text(p, p.reference)}"), syn.target
            seen["derived"] += 1
        ref = T.make_example("refine", p, rng, book, derive_code=True)
        assert ref.target == f"{steps} {expr} ```python\ndef f(x): return {expr}\n```"
        # every critique in a refine prompt is a failed check
        assert ref.messages[0]["content"].count("\\boxed{Incorrect}") >= 1
        assert "\\boxed{Correct}" not in ref.messages[0]["content"]
        work = T.make_example("work", p, rng, book, derive_code=True)
        if work.info["strategy"] in T.CODE_STRATEGIES:
            assert work.target.startswith(T.code_trace(p, work.info["strategy"])[0] + " ```python\n")
        assert T.is_correct(p, work.target)
        # the solver: the first difference, then the function (offset and square check in its head)
        (_, y1), (_, y2) = p.meta["tests"][:2]
        solver = T.make_example("solve", p, rng, book, derive_code=True).target
        assert solver == f"{T._minus(y2, y1)} {T.answer_text(p, p.reference)}"
        assert _check_steps(solver) == 1 and T.is_correct(p, solver)
        # what the judges read is written the way the solver writes: the differences, then a function
        unparseable = candidate in ("```python\n```", f"def f(x) return {p.reference}")  # the noise model's 5%
        assert unparseable or candidate.startswith(f"{T._minus(y2, y1)} ```python\ndef f(x): return ")
        old = T.make_example("evaluate", p, random.Random(1), book)
        assert old.target.startswith(f"= {p.reference} vs ")
    assert min(seen.values()) >= 1, seen


def test_the_code_curriculum_is_code_only_and_the_math_one_is_unchanged():
    rng = random.Random(0)
    exs = Curriculum(0, "code").sample(rng, 200)
    assert {e.task for e in exs} == {"testbed_code"}
    assert any(e.role == "evaluate" and not e.target.startswith("= ") for e in exs)
    # The math build's code share is taught in one step, as the shipped math weights were built (so
    # `rolecast testbed build` still reproduces them): no derivation in any of its code examples.
    math = Curriculum(0).sample(random.Random(0), 300)
    code_share = [e for e in math if e.task == "testbed_code"]
    assert 30 < len(code_share) < 90
    assert not any(T.code_trace(e.problem)[0] in e.target for e in code_share)
    assert any(e.target.startswith("= ") for e in code_share)
    assert {e.task for e in Curriculum(0, "code").held_out(0, per_role=4)} == {"testbed_code"}
    with pytest.raises(ValueError, match="kinds"):
        Curriculum(0, "poetry")


def test_the_synthesizer_reads_a_code_workers_program_not_its_derivation(code):
    """`final_answer` gives a code worker's last fenced block as written, so a synthesizer's prompt holds what its
    teacher showed it (programs), whatever derivation came before."""
    p = code.problems("test")[0]
    program = T.answer_text(p, p.reference)
    worker = T.work_trace(p, "check offset", derive_code=True)
    assert worker != program and final_answer(worker) == program
    assert final_answer(program + " and then some prose") == program
    # the last closed block wins; an unclosed one after it is not a block
    assert final_answer("```python\na\n``` x ```python\nb\n``` ```python\nc") == "```python\nb\n```"
    assert final_answer("def f(x) return 1") == "def f(x) return 1"  # nothing fenced: the text
    assert final_answer("7-8=-1 \\boxed{-1} ```python\nx\n```") == "\\boxed{-1}"  # a boxed answer first
    book = PromptBook("testbed")
    msgs = book.render("synthesize", problem=p.text, strategies=["find slope"], solutions=[worker, program])
    content = msgs[-1]["content"]
    assert f"1: {program}\n2: {program}" in content and T.code_trace(p, "check offset")[0] not in content


def test_program_body_is_what_workers_agree_on():
    from rolecast.testbed.rollouts import program_body

    assert program_body("5-3=2 ```python\ndef f(x): return x*2+1\n```") == "x*2+1"
    assert program_body("```python\ndef f(x):  return   x*2 + 1\n```") == "x*2 + 1"
    assert program_body("no program") is None


def test_the_shipped_names_of_the_code_models():
    from rolecast.config.load import load_config
    from rolecast.policies.models import resolve_model_path
    from rolecast.policies.shipped import ARTIFACT_DIRS, default_path

    assert default_path("small", "code") == ARTIFACT_DIRS["code", "small"]
    assert resolve_model_path("testbed-code") == str(ARTIFACT_DIRS["code", "small"])
    assert resolve_model_path("testbed-code-large") == str(ARTIFACT_DIRS["code", "large"])
    assert resolve_model_path("testbed") == str(ARTIFACT_DIRS["math", "small"])
    assert load_config(overrides={"model.path": "testbed-code"}).model.path == "testbed-code"
    with pytest.raises(ValueError, match="kinds"):
        default_path("small", "poetry")


def test_a_missing_shipped_build_says_how_to_build_it(tmp_path, monkeypatch):
    from rolecast.policies import shipped
    from rolecast.policies.models import resolve_model_path

    monkeypatch.setitem(shipped.ARTIFACT_DIRS, ("code", "large"), tmp_path / "absent")
    with pytest.raises(FileNotFoundError, match="rolecast testbed build --kind code --size large"):
        resolve_model_path("testbed-code-large")


def test_a_code_build_starts_from_the_math_build_and_records_it(tmp_path):
    """`rolecast testbed build --kind code`: the math build of the same size is the starting point (recorded by its
    weights' digest), the tokenizer is its tokenizer, and the build's info says what it is."""
    import hashlib

    from rolecast.cli import main
    from rolecast.policies.shipped import default_path
    from rolecast.testbed import info

    out = tmp_path / "code"
    assert main(["testbed", "build", "--kind", "code", "--out", str(out), "--steps", "2", "--no-eval"]) == 0
    built = info(out)
    start = default_path("small")
    assert built["kind"] == "code" and built["steps"] == 2
    assert built["init_sha256"] == hashlib.sha256((start / "model.safetensors").read_bytes()).hexdigest()
    assert built["tokenizer_sha256"] == info(start)["tokenizer_sha256"]
    assert (built["code_share"], built["solver_phase_code_share"]) == (1.0, 1.0)
    assert code_value("x*2+1", 3) == 7  # the task the build trains is the shipped one


def test_a_synthesizer_that_counts_votes_first_by_hand():
    """`code_synthesis: agreement`: workers' functions compared pair by pair (1-2, 1-3, 2-3) up to the first two that
    are the same, whose function is copied (the rule, not the truth: two agreeing wrong workers are copied); no two
    the same: the judges' check rows, as the shipped synthesizer writes them. f(1)=3, f(2)=5, f(3)=7."""
    from rolecast.tasks.testbed import CodeTestbed

    p = CodeTestbed.make_problem("x*2+1", 1, "test")
    prog = lambda e: f"```python\ndef f(x): return {e}\n```"  # noqa: E731
    cands = [T.answer_text(p, e) for e in ("x*2+2", "x*3", "x*2+2")]
    text, spans = T._with_decisions(T.CODE_SYNTHESES["agreement"](p, cands))
    assert text == f"1:x*2+2 vs 2:x*3 no 1:x*2+2 vs 3:x*2+2 yes {prog('x*2+2')}"
    assert [text[a:b] for a, b in spans] == ["no", "yes", "x*2+2"]  # the copied function weighs as a decision
    cands = [T.answer_text(p, "x*3"), T.answer_text(p, "x*2+1"), "```python\n```"]
    text, _ = T._with_decisions(T.CODE_SYNTHESES["agreement"](p, cands))
    assert text == (
        "1:x*3 vs 2:x*2+1 no 1:x*3 vs 3:? no 2:x*2+1 vs 3:? no "
        f"1:x*3 1*3=3 vs 3 2*3=6 vs 5 no 2:x*2+1 1*2+1=3 vs 3 2*2+1=5 vs 5 3*2+1=7 vs 7 yes {prog('x*2+1')}"
    )
    # two workers with no program never agree; one worker: the check rows alone, as the shipped synthesizer's
    text, _ = T._with_decisions(T.CODE_SYNTHESES["agreement"](p, ["```python\n```", "```python\n```"]))
    assert text.startswith("1:? vs 2:? no 1:? no 2:? no ") and T.is_correct(p, text)
    one = [T.answer_text(p, "x*2+1")]
    assert T.CODE_SYNTHESES["agreement"](p, one) == T.CODE_SYNTHESES["checks"](p, one)


def test_a_synthesizer_that_names_a_worker_by_hand():
    """`code_synthesis: pick` (Orch-Workers' `synthesis: pick`): the judges' check rows, then the first passing
    worker's number, the synthesize_pick prompt; judged right when the worker it names is. f(1)=3, f(2)=5, f(3)=7."""
    from rolecast.tasks.testbed import CodeTestbed

    p = CodeTestbed.make_problem("x*2+1", 1, "test")
    cands = [T.answer_text(p, e) for e in ("x*3", "x*2+1", "x*2+1")]
    text, spans = T._with_decisions(T.CODE_SYNTHESES["pick"](p, cands))
    assert text == "1:x*3 1*3=3 vs 3 2*3=6 vs 5 no 2:x*2+1 1*2+1=3 vs 3 2*2+1=5 vs 5 3*2+1=7 vs 7 yes \\boxed{2}"
    assert [text[a:b] for a, b in spans] == ["no", "yes", "2"]
    # none passes: the first majority holder, as the code aggregator
    text, _ = T._with_decisions(T.CODE_SYNTHESES["pick"](p, [T.answer_text(p, e) for e in ("x*3", "x+2", "x+2")]))
    assert text.endswith("no \\boxed{2}")
    ex = T.make_example("synthesize", p, random.Random(0), PromptBook("testbed"), True, "pick")
    assert ex.messages[-1]["content"].startswith("name: f(1)=3") and ex.info["pick"]
    n = len(ex.info["candidates"])
    right = [i for i, c in enumerate(ex.info["candidates"]) if T.is_correct(p, c)]
    for i in range(n):
        assert T.judge(ex, f"1:x no \\boxed{{{i + 1}}}") == (True, i in right, i)
    assert T.judge(ex, f"\\boxed{{{n + 1}}}") == (False, False, None)
    assert T.judge(ex, T.answer_text(p, "x*2+1"))[0] is False  # a program is not a pick
    # the shipped contract renders `synthesize` and is judged on its answer
    ex = T.make_example("synthesize", p, random.Random(0), PromptBook("testbed"), True, "checks")
    assert ex.messages[-1]["content"].startswith("merge:") and T.judge(ex, T.answer_text(p, "x*2+1"))[1]


def test_the_code_synthesis_and_role_weights_of_a_build_are_checked():
    from rolecast.testbed.builder import build

    with pytest.raises(ValueError, match="code_synthesis 'vote'.*checks.*agreement"):
        Curriculum(0, "code", "vote")
    cur = Curriculum(0, "code", "agreement")
    rng = random.Random(3)
    syn = [cur.sample(rng, 1)[0] for _ in range(200)]
    voted = [ex for ex in syn if ex.role == "synthesize" and " vs 2:" in ex.target]
    assert voted, "the agreement curriculum teaches the pair rows"
    for bad in ({"judge": 1.0}, {"solve": -1.0}, {"solve": 0.0}, {}):
        with pytest.raises(ValueError, match="role_weights"):
            build("unused", kind="code", steps=1, role_weights=bad, evaluate=False)


def test_the_decaying_rate_by_hand():
    """Warmup over 30 steps, then (decay) a cosine from lr to 0 at the last step; without decay, constant."""
    from rolecast.testbed.builder import _lr

    assert _lr(0, 3e-4, decay_over=300) == pytest.approx(1e-5)
    assert _lr(29, 3e-4, decay_over=300) == pytest.approx(3e-4)  # the warmup's end; the cosine starts at 1
    assert _lr(165, 3e-4, decay_over=300) == pytest.approx(1.5e-4)  # half way through 30..300
    assert _lr(300, 3e-4, decay_over=300) == pytest.approx(0.0, abs=1e-12)
    assert _lr(299, 3e-4) == _lr(29, 3e-4) == 3e-4


def test_the_ceiling_of_checking_the_shown_examples_runs_each_worker_in_the_sandbox():
    """`shown_check_picks` on hand-built episodes of two problems, each worker's program run against the shown
    examples in the sandbox: x*2+1 from 0 (shows f(0..2) = 1, 3, 5) and x*x from 1 (shows 1, 4, 9)."""
    from rolecast.core.episode import AnswerClaim, Episode, Turn
    from rolecast.tasks.testbed import code_program
    from rolecast.testbed.rollouts import code_problem, shown_check_picks

    table = "```python\ndef f(x): return [1, 3, 5][x] if x < 3 else 0\n```"  # fits what is shown, not f(5), f(7)

    def ep(pid: str, workers: list[tuple[str, bool]]) -> Episode:
        turns = [
            Turn("worker", "worker", "p", [1], [2], [0.0], text, "stop", claim=AnswerClaim(text, correct=ok))
            for text, ok in workers
        ]
        return Episode(pid, 0, turns)

    a, b = "testbed_code/test/x*2+1/0", "testbed_code/test/x*x/1"
    assert [y for _, y in code_problem(b).meta["tests"][:3]] == [1, 4, 9]
    r = shown_check_picks(
        [
            # the table passes the shown checks first: picked, and wrong on the hidden inputs
            ep(a, [(code_program("x+1"), False), (table, False), (code_program("x*2+1"), True)]),
            ep(a, [(code_program("x+1"), False), (code_program("x*2+1"), True)]),  # worker 2: a gain over worker 1
            ep(b, [(code_program("x*x"), True), (code_program("x"), False)]),  # worker 1 passes: kept
            ep(b, [(code_program("x"), False), (code_program("x+1"), False)]),  # none passes: worker 1
        ]
    )
    assert r["shown_checks"][0] == 0.5
    assert r["shown_checks_vs_first"]["margin"] == 0.25  # picked [0, 1, 1, 0] - worker 1 [0, 0, 1, 0]


def test_the_shown_examples_checks_are_the_tasks_own_asserts_cut_to_what_is_shown():
    """`CodeTestbed.tests(shown_only=True)`: the first three of the task's own asserts, at the task's timeout."""
    from rolecast.tasks.testbed import CodeTestbed

    task = CodeTestbed(timeout_s=2.5)
    p = task.make_problem("x*3-1", 1, "test")
    full, shown = task.tests(p), task.tests(p, shown_only=True)
    assert full.asserts == (
        "assert f(1) == 2",
        "assert f(2) == 5",
        "assert f(3) == 8",
        "assert f(5) == 14",
        "assert f(7) == 20",
    )
    assert shown.asserts == full.asserts[:3]
    assert shown.timeout_s == full.timeout_s == 2.5
