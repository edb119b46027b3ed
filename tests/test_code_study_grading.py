"""The study's code grader (code task option `grader: rllm`) against the study's own runner, program by program.

tests/fixtures/study_code_grading.jsonl holds completions and DeepCoder-style tests, each with the verdict the
study's code gives (`study`, with the study function that decides it in `decided_by`: rllm/rewards/code_reward.py
and rllm/rewards/code_utils/livecodebench.py of XHMY/marl-llm-workflows; derived by reading that code, and
checked by running its `run_test` on each row outside this repository) and the verdict of rolecast's default
grader (`rolecast`). The study mode, with the study's other two behaviours (`reliability_guard`, function-call
tests run as stdin programs), must give the study's verdict on every row; the default grader must give its own.
Both run in the sandbox, the judge outside the program's process.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rolecast.rewards import code_study, compare
from rolecast.rewards.code import CodeTests, build_job, score_code, score_code_many
from rolecast.sandbox import SandboxPool
from rolecast.tasks.datasets import _deepcoder_tests

FIXTURE = Path(__file__).parent / "fixtures" / "study_code_grading.jsonl"
ROWS = [json.loads(line) for line in FIXTURE.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(2) as p:
        yield p


def _grade(pool: SandboxPool, column: str) -> dict[str, str]:
    """The verdicts for the fixture's column "study" (the rllm grader, the study's way) or "rolecast"."""
    study = column == "study"
    tests = [_deepcoder_tests(r["tests"], None, 3.0, "stdin" if study else "call") for r in ROWS]
    scores = score_code_many(
        [r["text"] for r in ROWS], tests, pool=pool, grader="rllm" if study else "rolecast", reliability_guard=study
    )
    return {r["id"]: "pass" if s.reward == 1.0 else "fail" for r, s in zip(ROWS, scores, strict=True)}


@pytest.fixture(scope="module")
def verdicts(pool):
    return {g: _grade(pool, g) for g in ("study", "rolecast")}


def test_fixture_covers_the_known_differences():
    ids = {r["id"] for r in ROWS}
    for must in (
        "stdin_buffer",
        "float_close",
        "fence_space_before_language",
        "unclosed_fence",
        "trailing_example_block",
        "sqrt_no_import",
        "exit_call",
        "quit_call",
        "primeintellect_function_call",
        "stdin_class_solution",  # issue 37: the three study-grader cases a side-by-side run found
        "stdout_close",
        "functional_numpy_scalar",
    ):
        assert must in ids
    assert all(r["study"] in ("pass", "fail") and r["rolecast"] in ("pass", "fail") and r["decided_by"] for r in ROWS)
    assert sum(r["study"] != r["rolecast"] for r in ROWS) >= 15  # the two graders do differ


@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_study_mode_gives_the_study_verdict(verdicts, row):
    assert verdicts["study"][row["id"]] == row["study"], row["what"]


@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_default_mode_gives_its_own_verdict(verdicts, row):
    assert verdicts["rolecast"][row["id"]] == row["rolecast"], row["what"]


ADD = CodeTests(kind="stdio", inputs=("1 2\n", "10 -4\n"), outputs=("3\n", "6\n"))


@pytest.mark.parametrize("grader", ["rolecast", "rllm"])
@pytest.mark.parametrize("ender", ["exit()", "quit()", "exit(0)", "quit(0)"])
def test_exit_and_quit_work_in_every_mode(pool, grader, ender):
    text = f"```python\na, b = map(int, input().split())\nprint(a + b)\n{ender}\nprint('unreached')\n```"
    s = score_code(text, ADD, pool=pool, grader=grader)
    assert (s.reward, s.reason) == (1.0, None)


def test_quit_is_none_only_under_the_study_guard(pool):
    text = "```python\na, b = map(int, input().split())\nprint(a + b)\nquit()\n```"
    assert score_code(text, ADD, pool=pool, grader="rllm", reliability_guard=True).reward == 0.0
    exits = "```python\na, b = map(int, input().split())\nprint(a + b)\nexit()\n```"
    assert score_code(exits, ADD, pool=pool, grader="rllm", reliability_guard=True).reward == 1.0


PI_FN = [
    {"input": [1, 2], "output": [3], "type": "function_call", "fn_name": "add"},
    {"input": ["a", "b"], "output": "ab\n", "type": "function_call", "fn_name": "add"},
]


def test_function_call_tests_are_called_by_default_and_stdin_programs_as_the_study():
    called = _deepcoder_tests(PI_FN, None, 3.0)
    assert (called.kind, called.entry_point, called.inputs, called.outputs[0]) == (
        "functional",
        "add",
        ("1\n2", '"a"\n"b"'),
        "3",
    )
    study = _deepcoder_tests(PI_FN, None, 3.0, "stdin")
    # the study joins text arguments with newlines; int arguments (a TypeError there) always fail
    assert (study.kind, study.inputs[1], study.outputs[1], study.broken) == ("stdio", "a\nb", "ab\n", (0,))
    with pytest.raises(ValueError, match="function_call_tests"):
        _deepcoder_tests(PI_FN, None, 3.0, "stdio")


def test_study_extraction_rules():
    ex = code_study.extract_program
    assert ex("```python\nx = 1\n```") == "x = 1"
    assert ex("``` python\nx = 1\n```") is None  # a space before the language
    assert ex("```python\nx = 1\n") is None  # unclosed
    assert ex("x = 1") is None
    assert ex("```python\nx = 1\n```\nout:\n```\n3\n```") == "3"  # the last block, code or not
    assert ex("```c++\nint x;\n```") is None  # `+` is not a word character: no block


def test_study_stdout_comparison():
    def m(got: bytes, expected: str) -> bool:
        return compare.stdout_matches(got, expected, compare.STUDY)

    assert m(b"  3  \n\n", "3")
    assert m(b"1.50\n", "1.5") and m(b"1  2\n", "1 2")
    assert not m(b"0.3333333\n", "0.333333333")  # no tolerance
    assert not m(b"yes  no\n", "yes no")
    assert not m(b"1\n\n2\n", "1\n2")
    vm = compare.study_json_values_match
    assert vm("true", "1") and not vm("0.30000000000000004", "0.3")


def test_study_wraps_the_program_in_a_function_after_its_imports():
    src = code_study.stdio_program("import sys\nx = 1\nif __name__ == '__main__':\n    print(x)\n")
    assert src.startswith(code_study.IMPORTS)
    tail = src[len(code_study.IMPORTS) :]
    assert tail == "\nimport sys\ndef wrapped_function():\n    x = 1\n    print(x)"
    assert code_study.stdio_program("print(1") == "print(1"  # does not parse: unchanged (then fails)


def test_study_grader_refuses_asserts_tests():
    mbpp = CodeTests(kind="asserts", asserts=("assert f() == 1",))
    with pytest.raises(ValueError, match="stdio/functional"):
        build_job("def f(): return 1\n", mbpp, grader="rllm")
    with pytest.raises(ValueError, match="grader"):
        score_code_many(["x"], [ADD], grader="verl")


def test_task_options_are_checked():
    from rolecast.tasks.datasets import DeepCoder

    with pytest.raises(ValueError, match="grader"):
        DeepCoder(grader="verl")
    with pytest.raises(ValueError, match="reliability_guard"):
        DeepCoder(reliability_guard=True)
    with pytest.raises(ValueError, match="function_call_tests"):
        DeepCoder(function_call_tests="stdio")
    t = DeepCoder(grader="rllm", reliability_guard=True, function_call_tests="stdin")
    assert (t.grader, t.reliability_guard, t.function_call_tests) == ("rllm", True, "stdin")
    assert t.extract_answer("``` python\nx = 1\n```") is None
