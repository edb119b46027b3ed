"""Property-based fuzzing of everything the trainer does with what a policy or its program wrote (issue 33):
hostile completions (deep nesting of every bracket kind, long runs of one character, fences left open, huge and
odd numbers, NaN forms, mixed Unicode) through every math and code task's scoring, both graders, and hostile
program outputs (printed bytes, JSON values) through the code graders' judging. Each must come back as a Score,
never a grader error, within a time bound.

Examples are derandomized (the same inputs every run) and no example database is written. What `make test` runs:
the example counts in the settings below (docs/sandbox.md, "Host-side parsers", gives the total and its time).
"""

from __future__ import annotations

import json
import time

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rolecast.core import text as core_text
from rolecast.rewards.code import CodeTests, judge
from rolecast.rewards.score import GRADER_ERROR, Score
from rolecast.sandbox import CaseResult, JobResult
from rolecast.scoring import score_batch
from rolecast.tasks import TASKS, Problem, Task, make_task
from rolecast.tasks.datasets import CodeTask, MathTask
from rolecast.workflows import parsing

MAX_CHARS = 8192

# ------------------------------------------------------------------------------------------ hostile texts

PIECES = [
    "(", ")", "[", "]", "{", "}", "\\{", "\\}", "\\left(", "\\right)", "\\boxed{", "\\boxed ", "\\fbox{", "\\frac{",
    "\\sqrt{", "^{", "<|begin_of_box|>", "<|end_of_box|>", "</think>", "```", "```python\n", "```py", "``", "`",
    "'''", '"""', "#### ", "####\n", "STRATEGY 1:", "1. ", "-", "~", "not ", "lambda:", "()", "[0]", ".a", "def f(x):\n",
    "import os\n", "async ", "class A:\n", "@", "\\", "$", " ", "\n", "\t", "\r", "\x0c", "\x00", "\u200b", "\u202e",
    "\u0301", "\u00a0", "٣", "😀", "\\text{", "\\$", "\\%", ",", ".", "/", "=", "e", "9",
]  # fmt: skip
NUMBER_WORDS = [
    "nan", "NaN", "-nan", "+NaN", "sNaN", "-sNaN12", "inf", "-inf", "Infinity", "-Infinity", "1e999999999",
    "1e-999999999", "1E+99999999999999999999", "1_000", "0x1f", "1,000,000", "2001001", "500000000000000000",
    "٣٤", "1/0", "-0", "0.0", "1e308", "9^{9^{9}}", "10^{10^{10}}", "9**9**9", "[0]*10**9", "99999!", "2^{2^{64}}",
]  # fmt: skip

numbers = st.one_of(
    st.sampled_from(NUMBER_WORDS),
    st.integers(-(10**80), 10**80).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(1, 6000).map(lambda n: "9" * n),  # past int()'s 4,300 digits
)
runs = st.builds(lambda piece, n: piece * n, st.sampled_from(PIECES + ["0", "1", "a"]), st.integers(1, MAX_CHARS))
nested = st.builds(
    lambda pair, depth, core, closed: pair[0] * depth + core + (pair[1] * depth if closed else ""),
    st.sampled_from([("(", ")"), ("[", "]"), ("{", "}"), ("\\boxed{", "}"), ("\\frac{1}{", "}"), ("\\left(", "\\right)"),
                     ("-", ""), ("not ", ""), ("lambda:", ""), ("f(", ")"), ("<|begin_of_box|>", "<|end_of_box|>")]),
    st.integers(1, 5000),
    st.one_of(numbers, st.just("")),
    st.booleans(),
)  # fmt: skip
fences = st.builds(
    lambda ticks, tag, body, closed: ticks + tag + "\n" + body + ("\n" + ticks if closed else ""),
    st.sampled_from(["```", "````", "`" * 40]),
    st.sampled_from(["python", "py", "", " python", "c++", "text"]),
    st.text(max_size=300),
    st.booleans(),
)
piece = st.one_of(runs, nested, fences, numbers, st.text(max_size=200), st.sampled_from(PIECES))
hostile_texts = st.lists(piece, min_size=1, max_size=6).map(lambda ps: "".join(ps)[:MAX_CHARS])

SETTINGS = dict(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)


def scored_in_time(task: Task, problem: Problem, texts: list[str], bound_s: float) -> list[Score]:
    t = time.monotonic()
    scores = score_batch(task, [problem] * len(texts), texts)
    took = time.monotonic() - t
    assert took < bound_s, (task.name, took, [x[:80] for x in texts])
    for s in scores:
        assert isinstance(s, Score) and 0.0 <= s.reward <= 1.0
        assert s.reason != GRADER_ERROR, (task.name, s.fault)  # the real graders contain every text themselves
    return scores


# ------------------------------------------------------------------------------------------ math tasks


def test_every_math_task_scores_with_the_math_task_verifier():
    """So fuzzing MathTask's scoring with both graders covers every registered math task."""
    math_tasks = [n for n in TASKS.names() if isinstance(_build(n), MathTask)]
    assert {"gsm8k", "math", "math500", "aime2024", "dapo_math", "math_jsonl"} <= set(math_tasks)
    for name in math_tasks:
        assert type(_build(name)).score_many is MathTask.score_many


def _build(name: str, **options) -> Task:
    needs_path = name.endswith("_jsonl")
    return make_task(name, **({"path": "unused.jsonl"} if needs_path else {}), **options)


MATH_GOLDS = ["18", "\\frac{1}{2}", "(1, 2]", "2001000", "\\boxed{7}", "10\\%"]


@settings(max_examples=24, **SETTINGS)
@given(hostile_texts, st.sampled_from(MATH_GOLDS), st.booleans())
@example("10^{10^{10}}", "18", True)  # math_verify's power: the worker runs out of time
@example("9**9**9", "\\frac{1}{2}", True)  # the study's sympy step evaluates it: the worker runs out of time
def test_math_completions(text, gold, boxed):
    """`boxed`: the text's first 1,000 characters as a boxed answer, so that the comparison itself gets them."""
    problem = Problem("fuzz/0", "?", gold)
    if boxed:
        text = "\\boxed{" + text[:1000] + "}"
    for grader in ("rolecast", "rllm"):
        # a hostile answer (a power tower) may run out the verifier's time (5 s), and a new worker starts (~2 s)
        scored_in_time(_build("math", grader=grader), problem, [text], bound_s=30.0)
    arithmetic = make_task("testbed")
    scored_in_time(arithmetic, Problem("testbed/0", "1+2", "3"), [text], bound_s=1.0)


# ------------------------------------------------------------------------------------------ code tasks

MBPP_ROW = {
    "task_id": 1,
    "code": "def add(a, b):\n    return a + b\n",
    "test_list": ["assert add(1, 2) == 3", "assert add(2, 2) == 4"],
    "test_setup_code": "",
}
HUMANEVAL_ROW = {
    "task_id": "HumanEval/0",
    "prompt": 'def add(a, b):\n    """a + b"""\n',
    "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(2, 2) == 4\n",
    "entry_point": "add",
}
STDIO = CodeTests.livecodebench([{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}] * 2)
FUNCTIONAL = CodeTests.livecodebench([{"input": "1\n2", "output": "3", "testtype": "functional"}] * 2, "add")
# (task, its options, the problem's tests): every code task, every kind of tests, both graders where they apply
CODE_CASES = [
    ("mbpp", {}, CodeTests.mbpp(MBPP_ROW)),
    ("mbpp_sanitized", {"partial": True}, CodeTests.mbpp({**MBPP_ROW, "test_imports": ["import math"]})),
    ("humaneval", {}, CodeTests.humaneval(HUMANEVAL_ROW)),
    ("deepcoder", {}, STDIO),
    ("deepcoder", {"grader": "rllm"}, STDIO),
    ("deepcoder", {"grader": "rllm", "reliability_guard": True, "partial": True}, FUNCTIONAL),
    ("code_jsonl", {"partial": True}, FUNCTIONAL),
]


def test_every_code_task_is_fuzzed():
    code_tasks = {n for n in TASKS.names() if isinstance(_build(n), CodeTask)}
    assert code_tasks == {name for name, _, _ in CODE_CASES}
    for name in code_tasks:
        assert type(_build(name)).score_many is CodeTask.score_many


@settings(max_examples=16, **SETTINGS)
@given(hostile_texts, st.booleans())
def test_code_completions(text, fenced):
    """Every program extracted here runs in the sandbox; `fenced`: the text as a fence's program."""
    texts = [f"```python\n{text}\n```" if fenced else text]
    for name, options, tests in CODE_CASES:
        scores = scored_in_time(_build(name, **options), Problem("fuzz/0", "?", tests), texts, bound_s=30.0)
        assert all(s.reward == 0.0 for s in scores)  # nothing generated here solves a problem
    testbed = make_task("testbed_code")
    problem = Problem("testbed_code/0", "?", "x+1", {"tests": [(0, 1), (1, 2), (2, 3)]})
    assert all(s.reward == 0.0 for s in scored_in_time(testbed, problem, texts, bound_s=30.0))


# ------------------------------------------------------------------------------------------ program outputs

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(10**40), 10**40), st.floats(), st.text(max_size=20)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=5), inner, max_size=4)),
    max_leaves=20,
).map(lambda v: json.dumps(v))
outputs = st.one_of(
    hostile_texts,
    json_values,
    st.builds(lambda d, kind: kind[0] * d + kind[1] * d, st.integers(1, 6000), st.sampled_from(["[]", "{}", "()"])),
    st.builds(lambda d: '{"a": ' * d + "1" + "}" * d, st.integers(1, 4000)),
    st.lists(numbers, max_size=50).map(" ".join),
)
EXPECTED_STDOUT = ["3\n", "2001000", "0.333333", "1 2\n3", "NaN", "sNaN", "inf", "yes"]
EXPECTED_VALUE = ["3", "[1, 2.5]", '{"a": [1, null]}', "NaN", "-Infinity", "2001000", '"s"', "true"]


@settings(max_examples=300, **SETTINGS)
@given(outputs, st.binary(max_size=64), st.sampled_from(EXPECTED_STDOUT), st.sampled_from(EXPECTED_VALUE))
def test_program_outputs(text, raw, expected_stdout, expected_value):
    """What a program printed or returned, through the judging that scoring runs on it (the sandbox's part is the
    sandbox tests'): both graders, partial credit or not."""
    stdio = CodeTests(kind="stdio", inputs=("",) * 2, outputs=(expected_stdout,) * 2)
    functional = CodeTests(kind="functional", inputs=("1",) * 2, outputs=(expected_value,) * 2, entry_point="f")
    for tests in (stdio, functional):
        cases = [
            CaseResult(rc=0, stdout=text.encode(), stderr=b"", value=text, reason=None),
            CaseResult(rc=0, stdout=raw + text.encode(), stderr=b"", value=raw.decode("utf-8", "replace"), reason=None),
        ]
        res = JobResult(mode=tests.kind, cases=cases, done=True)
        for grader in ("rolecast", "rllm"):
            for partial in (False, True):
                t = time.process_time()
                s = judge(res, tests, partial=partial, grader=grader)
                assert time.process_time() - t < 1.0
                assert isinstance(s, Score) and 0.0 <= s.reward <= 1.0


# ------------------------------------------------------------------------------------------ role parsers


@settings(max_examples=200, **SETTINGS)
@given(hostile_texts)
def test_role_parsers(text):
    """The workflows' readings of a role's output (rolecast's and the study's): a decision, never an exception."""
    t = time.process_time()
    assert 0 <= core_text.parse_choice(text, 3) < 3 and 0 <= parsing.study_parse_choice(text, 3) < 3
    assert isinstance(core_text.parse_verdict(text), bool)
    assert parsing.study_parse_verdict(text) in ("correct", "incorrect", "unknown")
    assert len(core_text.parse_strategies(text, 3)) <= 3 and len(parsing.study_parse_strategies(text, 3)) <= 3
    assert time.process_time() - t < 1.0
