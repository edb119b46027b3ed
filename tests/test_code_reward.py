"""Code reward: extraction, test formats, comparison rules and scoring (rolecast.rewards.code)."""

from __future__ import annotations

import pytest

from rolecast.rewards.code import (
    CodeTests,
    _split_check,
    extract_program,
    score_code,
    score_code_many,
    stdout_matches,
    value_matches,
)
from rolecast.rewards.sandbox import SandboxPool


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(2) as p:
        yield p


# ---------------------------------------------------------------------------------------------- extraction


def test_last_python_fence_wins():
    text = "first\n```python\ndef f(): return 1\n```\nthen\n```python\ndef f(): return 2\n```\nbye"
    assert extract_program(text) == "def f(): return 2\n"


def test_python_fence_beats_a_later_other_fence():
    text = "```py\nx = 1\n```\nrun it:\n```bash\npython x.py\n```"
    assert extract_program(text) == "x = 1\n"


def test_any_fence_when_no_python_fence():
    assert extract_program("```\nprint(3)\n```") == "print(3)\n"
    assert extract_program("```text\nprint(4)\n```") == "print(4)\n"


def test_unclosed_fence_takes_the_rest():
    assert extract_program("Here:\n```python\ndef f():\n    return 5\n") == "def f():\n    return 5\n"


def test_bare_def_fallback_drops_trailing_prose():
    text = "Sure! Here it is:\n\nimport math\ndef f(x):\n    return math.sqrt(x)\n\nThis computes the root."
    assert extract_program(text) == "import math\ndef f(x):\n    return math.sqrt(x)\n"


def test_no_code():
    assert extract_program("I cannot solve this.") is None
    assert extract_program("") is None
    assert extract_program(None) is None


# ---------------------------------------------------------------------------------------------- formats


def test_codetests_validation_names_the_field():
    with pytest.raises(ValueError, match="kind"):
        CodeTests(kind="junit")
    with pytest.raises(ValueError, match="asserts"):
        CodeTests(kind="asserts")
    with pytest.raises(ValueError, match="inputs"):
        CodeTests(kind="stdio", inputs=("1",), outputs=())
    with pytest.raises(ValueError, match="entry_point"):
        CodeTests(kind="functional", inputs=("1",), outputs=("1",))
    with pytest.raises(ValueError, match="test_list"):
        CodeTests.mbpp({"task_id": 7, "test_list": []})
    with pytest.raises(ValueError, match="func_name"):
        CodeTests.livecodebench('[{"input": "1", "output": "1", "testtype": "functional"}]')


def test_mbpp_constructors():
    full = CodeTests.mbpp({"task_id": 1, "test_setup_code": "X = 2", "test_list": ["assert f() == X"]})
    assert (full.kind, full.asserts, full.setup, full.prelude) == ("asserts", ("assert f() == X",), "X = 2", "")
    san = CodeTests.mbpp({"task_id": 2, "test_imports": ["import math", "import re"], "test_list": ["assert g()"]})
    assert san.prelude == "import math\nimport re" and san.setup == ""


def test_livecodebench_constructor_reads_json_and_metadata():
    t = CodeTests.livecodebench('[{"input": "1 2\\n", "output": "3\\n", "testtype": "stdin"}]')
    assert (t.kind, t.inputs, t.outputs) == ("stdio", ("1 2\n",), ("3\n",))
    f = CodeTests.livecodebench([{"input": "[1]", "output": "1", "testtype": "functional", "metadata": {"func_name": "h"}}])
    assert (f.kind, f.entry_point) == ("functional", "h")


def test_humaneval_check_is_split_per_assert():
    src = (
        "METADATA = {}\n\n"
        "def check(candidate):\n"
        "    '''doc'''\n"
        "    import math\n"
        "    assert candidate(1) == 2\n"
        "    x = 3\n"
        "    assert candidate(x) == 4\n"
        "    for i in range(3):\n"
        "        assert candidate(i) == i + 1\n"
        "    y = 0\n"
    )
    arg, tests = _split_check(src)
    assert arg == "candidate"
    assert tests == ["import math\nassert candidate(1) == 2", "x = 3\nassert candidate(x) == 4",
                     "for i in range(3):\n    assert candidate(i) == i + 1\ny = 0"]  # fmt: skip


# ---------------------------------------------------------------------------------------------- comparison


@pytest.mark.parametrize(
    "got, expected, ok",
    [
        (b"3\n", "3", True),
        (b"1 2  \n3\n\n", "1 2\n3", True),  # trailing spaces and blank lines
        (b"0.3333333\n", "0.333333333", True),  # numbers within 1e-6
        (b"0.33\n", "0.333333", False),
        (b"1 2\n", "1\n2", False),  # line structure matters
        (b"YES\n", "yes", False),  # case matters
        (b"\xff3\n", "3", False),  # not UTF-8
        (b"", "0", False),
    ],
)
def test_stdout_matches(got, expected, ok):
    assert stdout_matches(got, expected) is ok


@pytest.mark.parametrize(
    "got, expected, ok",
    [
        ("[1, 2]", "[1, 2]", True),
        ("[1.0000001]", "[1]", True),
        ("true", "1", False),  # bool is not int
        ('{"a": [1]}', '{"a": [1]}', True),
        ("[1, 2]", "[2, 1]", False),
        ('"3"', "3", False),
        (None, "3", False),
        ("not json", "3", False),
    ],
)
def test_value_matches(got, expected, ok):
    assert value_matches(got, expected) is ok


# ---------------------------------------------------------------------------------------------- scoring

MBPP_ROW = {"task_id": 9, "test_setup_code": "", "test_list": ["assert sq(2) == 4", "assert sq(3) == 9", "assert sq(-1) == 1", "assert sq(0) == 0"]}


def test_all_or_nothing_and_partial(pool):
    tests = CodeTests.mbpp(MBPP_ROW)
    half = "```python\ndef sq(x):\n    return x * x if x > 0 else 5\n```"
    assert score_code(half, tests, pool=pool).reward == 0.0
    assert score_code(half, tests, partial=True, pool=pool).reward == 0.5  # 2 of 4, computed by hand
    good = "```python\ndef sq(x):\n    return x * x\n```"
    assert score_code(good, tests, partial=True, pool=pool).reward == 1.0


def test_timeout_in_one_test_keeps_earlier_verdicts(pool):
    tests = CodeTests.mbpp(MBPP_ROW)
    prog = "```python\ndef sq(x):\n    while x == 3:\n        pass\n    return x * x\n```"
    s = score_code(prog, tests, partial=True, timeout_s=2, pool=pool)
    assert s.reward == 0.25 and s.reason == "timeout"  # sq(2) passed before sq(3) hung


def test_load_error_and_no_code(pool):
    tests = CodeTests.mbpp(MBPP_ROW)
    s = score_code("```python\ndef sq(x) return\n```", tests, pool=pool)
    assert (s.reward, s.reason) == (0.0, "load_error: SyntaxError")
    s = score_code("no idea", tests, pool=pool)
    assert (s.reward, s.answer, s.reason) == (0.0, None, "no_code")


def test_sanitized_imports_run_before_the_program(pool):
    tests = CodeTests.mbpp({"task_id": 3, "test_imports": ["import math"], "test_list": ["assert math.isclose(r(), math.pi)"]})
    # the program uses math without importing it: the test_imports prelude provides it, as upstream
    assert score_code("```python\ndef r():\n    return math.pi\n```", tests, pool=pool).reward == 1.0


def test_humaneval_with_and_without_signature(pool):
    row = {
        "task_id": "T/0",
        "prompt": "from typing import List\n\ndef helper(x):\n    return x * 2\n\ndef twice_all(xs: List[int]) -> List[int]:\n    '''Double each.'''\n",
        "entry_point": "twice_all",
        "test": "def check(candidate):\n    assert candidate([1]) == [2]\n    assert candidate([]) == []\n    assert candidate([0, 3]) == [0, 6]\n",
    }
    tests = CodeTests.humaneval(row)
    assert tests.n_tests == 3
    # full function using the prompt's import and helper without repeating them
    full = "```python\ndef twice_all(xs: List[int]) -> List[int]:\n    return [helper(x) for x in xs]\n```"
    assert score_code(full, tests, pool=pool).reward == 1.0
    # body only, continuing the prompt
    assert score_code("    return [2 * x for x in xs]\n", tests, pool=pool).reward == 0.0  # no code found by extraction
    from rolecast.rewards.code import score_program

    assert score_program("    return [2 * x for x in xs]\n", tests, pool=pool).reward == 1.0
    wrong = "```python\ndef twice_all(xs):\n    return [2 * x for x in xs if x]\n```"
    s = score_code(wrong, tests, partial=True, pool=pool)
    assert s.reward == pytest.approx(2 / 3)


def test_stdio_problem(pool):
    tests = CodeTests.livecodebench(
        [
            {"input": "1 2\n", "output": "3\n", "testtype": "stdin"},
            {"input": "10 -4\n", "output": "6\n", "testtype": "stdin"},
            {"input": "0 0\n", "output": "0\n", "testtype": "stdin"},
        ]
    )
    good = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    assert score_code(good, tests, pool=pool).reward == 1.0
    off = "```python\na, b = map(int, input().split())\nprint(a + b if a else 1)\n```"
    assert score_code(off, tests, pool=pool).reward == 0.0
    assert score_code(off, tests, partial=True, pool=pool).reward == pytest.approx(2 / 3)
    crash = "```python\nraise ValueError('boom')\n```"
    assert score_code(crash, tests, partial=True, pool=pool).reward == 0.0


def test_functional_problem(pool):
    tests = CodeTests.livecodebench(
        [
            {"input": "[1, 2, 3]\n2", "output": "[3, 4, 5]", "testtype": "functional"},
            {"input": "[]\n7", "output": "[]", "testtype": "functional"},
        ],
        fn_name="addAll",
    )
    cls = "```python\nfrom typing import List\nclass Solution:\n    def addAll(self, nums: List[int], k: int) -> List[int]:\n        return [n + k for n in nums]\n```"
    assert score_code(cls, tests, pool=pool).reward == 1.0
    fn = "```python\ndef addAll(nums, k):\n    return tuple(n + k for n in nums)\n```"  # tuples compare as lists
    assert score_code(fn, tests, pool=pool).reward == 1.0
    main_guard = "```python\nclass Solution:\n    def addAll(self, nums, k):\n        return [n + k for n in nums]\nif __name__ == '__main__':\n    input()\n```"
    assert score_code(main_guard, tests, pool=pool).reward == 1.0  # a main block does not run


def test_score_code_many_keeps_order(pool):
    tests = CodeTests.mbpp(MBPP_ROW)
    texts = ["```python\ndef sq(x):\n    return x * x\n```", None, "```python\ndef sq(x):\n    return x\n```", "```python\ndef sq(x):\n    return x ** 2\n```"]
    assert [s.reward for s in score_code_many(texts, [tests] * 4, pool=pool)] == [1.0, 0.0, 0.0, 1.0]
    with pytest.raises(ValueError, match="3 texts but 1"):
        score_code_many(texts[:3], [tests], pool=pool)


def test_module_level_default_pool():
    tests = CodeTests.mbpp(MBPP_ROW)
    assert score_code("```python\ndef sq(x):\n    return x * x\n```", tests).reward == 1.0
