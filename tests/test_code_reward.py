"""Code reward: extraction, test formats, comparison rules and scoring (rolecast.rewards.code)."""

from __future__ import annotations

import pytest

from rolecast.rewards.code import (
    CodeTests,
    _split_check,
    build_job,
    extract_program,
    score_code,
    score_code_many,
)
from rolecast.rewards.compare import json_values_match as value_matches
from rolecast.rewards.compare import stdout_matches
from rolecast.sandbox import SandboxPool


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
    f = CodeTests.livecodebench(
        [{"input": "[1]", "output": "1", "testtype": "functional", "metadata": {"func_name": "h"}}]
    )
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
        ("[1.5000001]", "[1.5]", True),  # a non-integer within 1e-6
        ("[1.0000001]", "[1]", False),  # an integer exactly (issue 33)
        ("[1.0]", "[1]", True),
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

MBPP_ROW = {
    "task_id": 9,
    "test_setup_code": "",
    "test_list": ["assert sq(2) == 4", "assert sq(3) == 9", "assert sq(-1) == 1", "assert sq(0) == 0"],
}


def test_all_or_nothing_and_partial(pool):
    tests = CodeTests.mbpp(MBPP_ROW)
    half = "```python\ndef sq(x):\n    return x * x if x > 0 else 5\n```"
    assert rr(score_code(half, tests, pool=pool)) == (0.0, None)
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
    tests = CodeTests.mbpp(
        {"task_id": 3, "test_imports": ["import math"], "test_list": ["assert math.isclose(r(), math.pi)"]}
    )
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
    assert rr(score_code("    return [2 * x for x in xs]\n", tests, pool=pool)) == (
        0.0,
        "no_code",
    )  # extraction finds none
    from rolecast.rewards.code import score_program

    assert score_program("    return [2 * x for x in xs]\n", tests, pool=pool).reward == 1.0
    wrong = "```python\ndef twice_all(xs):\n    return [2 * x for x in xs if x]\n```"
    s = score_code(wrong, tests, partial=True, pool=pool)
    assert s.reward == pytest.approx(2 / 3) and s.reason is None


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
    assert rr(score_code(off, tests, pool=pool)) == (0.0, None)
    assert score_code(off, tests, partial=True, pool=pool).reward == pytest.approx(2 / 3)
    crash = "```python\nraise ValueError('boom')\n```"
    assert rr(score_code(crash, tests, partial=True, pool=pool)) == (0.0, None)
    res = pool.run(build_job("raise ValueError('boom')\n", tests, partial=True))  # it ran, and crashed
    assert [c.rc for c in res.cases] == [1, 1, 1] and all(b"ValueError: boom" in c.stderr for c in res.cases)


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
    texts = [
        "```python\ndef sq(x):\n    return x * x\n```",
        None,
        "```python\ndef sq(x):\n    return x\n```",
        "```python\ndef sq(x):\n    return x ** 2\n```",
    ]
    assert [rr(s) for s in score_code_many(texts, [tests] * 4, pool=pool)] == [
        (1.0, None),
        (0.0, "no_code"),
        (0.0, None),
        (1.0, None),
    ]
    with pytest.raises(ValueError, match="3 texts but 1"):
        score_code_many(texts[:3], [tests], pool=pool)


class CountingPool(SandboxPool):
    """A real pool that counts the jobs it is given."""

    jobs = 0

    def run_many(self, jobs, **kw):
        jobs = list(jobs)
        self.jobs += len(jobs)
        return super().run_many(jobs, **kw)


def test_score_code_many_grades_a_repeated_program_once():
    """GRPO groups repeat programs: completions whose programs are the same text, against equal tests, are graded
    by one sandbox run and each gets that score; the same program against other tests runs again."""
    tests = CodeTests.mbpp(MBPP_ROW)
    other = CodeTests.mbpp({**MBPP_ROW, "test_list": ["assert sq(2) == 5"]})
    good, wrong = "def sq(x):\n    return x * x\n", "def sq(x):\n    return x\n"
    texts = [
        f"```python\n{good}```",
        f"Here it is:\n```python\n{good}```\nDone.",  # another text, the same program
        f"```python\n{wrong}```",
        f"```python\n{good}```",
        f"```python\n{good}```",
    ]
    with CountingPool(1) as p:
        scores = score_code_many(texts, [tests, tests, tests, tests, other], pool=p)
        assert p.jobs == 3  # good vs tests, wrong vs tests, good vs other
    assert [rr(s) for s in scores] == [(1.0, None), (1.0, None), (0.0, None), (1.0, None), (0.0, None)]
    assert scores[1].answer == good


def test_module_level_default_pool():
    tests = CodeTests.mbpp(MBPP_ROW)
    assert score_code("```python\ndef sq(x):\n    return x * x\n```", tests).reward == 1.0


# ---------------------------------------------------------------------------------------------- forged values

SQ = CodeTests.mbpp({"task_id": 9, "code": "def sq(x):\n    return x * x\n",
                     "test_list": ["assert sq(2) == 4", "assert sq(3) == 9"]})  # fmt: skip
FORGERIES = {
    "always equal": "class E:\n    def __eq__(self, o):\n        return True\ndef sq(x):\n    return E()\n",
    "int subclass": "class I(int):\n    def __eq__(self, o):\n        return True\n    __hash__ = int.__hash__\ndef sq(x):\n    return I(0)\n",
    "str subclass": "class S(str):\n    def __eq__(self, o):\n        return True\ndef sq(x):\n    return S('no')\n",
    "list subclass": "class L(list):\n    def __eq__(self, o):\n        return True\ndef sq(x):\n    return L()\n",
    "bool-true object": "class B:\n    def __bool__(self):\n        return True\n    def __eq__(self, o):\n        return self\ndef sq(x):\n    return B()\n",
    "plain list holding a forgery": "class E:\n    def __eq__(self, o):\n        return True\ndef sq(x):\n    return [E()][0:1][0]\n",
    # a metaclass that claims to be (and hash like) int, so `type(v) in {int, ...}` would accept it
    "metaclass posing as int": (
        "class M(type):\n    def __eq__(cls, o):\n        return True\n    def __hash__(cls):\n        return hash(int)\n"
        "class V(metaclass=M):\n    def __eq__(self, o):\n        return True\ndef sq(x):\n    return V()\n"
    ),
}


@pytest.mark.parametrize("trick", sorted(FORGERIES))
def test_forged_values_fail_with_their_reason(pool, trick):
    s = score_code("```python\n" + FORGERIES[trick] + "```", SQ, partial=True, pool=pool)
    assert (s.reward, s.reason) == (0.0, "non_plain_value")


def test_forged_value_inside_a_container_fails(pool):
    tests = CodeTests.mbpp({"task_id": 1, "test_list": ["assert pair(1) == (1, [2])"]})
    prog = "class E:\n    def __eq__(self, o):\n        return True\ndef pair(x):\n    return (1, [E()])\n"
    assert rr(score_code(_fence(prog), tests, pool=pool)) == (0.0, "non_plain_value")
    assert rr(score_code(_fence("def pair(x):\n    return (x, [x + 1])\n"), tests, pool=pool)) == (1.0, None)


def _fence(src: str) -> str:
    return "```python\n" + src + "```"


def rr(score):
    return score.reward, score.reason


def test_patched_builtins_and_modules_do_not_serve_the_tests(pool):
    """The tests' own helpers (abs, math.isclose, sorted) are the genuine ones whatever the program did to them."""
    tests = CodeTests.mbpp(
        {
            "task_id": 2,
            "test_imports": ["import math"],
            "test_list": [
                "assert abs(root(16) - 4) < 1e-9",
                "assert math.isclose(root(9), 3)",
                "assert sorted([root(4), 1]) == [1, 2]",
            ],
        }
    )
    tricks = [
        "import builtins, math\nbuiltins.abs = lambda x: 0\nmath.isclose = lambda *a, **k: True\n"
        "builtins.sorted = lambda xs: [1, 2]\n",  # patch the builtins and the module
        "def abs(x):\n    return 0\ndef sorted(xs):\n    return [1, 2]\nclass math:\n    isclose = staticmethod(lambda *a: True)\n",  # shadow them
        "import sys\nclass M:\n    isclose = staticmethod(lambda *a, **k: True)\nsys.modules['math'] = M\n",  # swap the module
    ]
    for trick in tricks:
        s = score_code(_fence(trick + "def root(x):\n    return -1.0\n"), tests, partial=True, pool=pool)
        assert rr(s) == (0.0, None), trick  # plain wrong answers, judged by the genuine helpers
    # patching from inside the candidate, between the tests, does not stick either
    late = "import builtins, math\ndef root(x):\n    builtins.abs = lambda v: 0\n    math.isclose = lambda *a, **k: True\n    return -1.0\n"
    assert rr(score_code(_fence(late), tests, partial=True, pool=pool)) == (0.0, None)
    good = "import math\ndef root(x):\n    return math.sqrt(x)\n"
    assert rr(score_code(_fence(good), tests, pool=pool)) == (1.0, None)


def test_arithmetic_on_a_forged_value_fails(pool):
    """`abs(f(x) - y) < eps`: a value whose `__sub__` returns 0.0 is stopped where the candidate returns it."""
    tests = CodeTests.mbpp({"task_id": 3, "test_list": ["assert abs(root(16) - 4) < 1e-9"]})
    prog = "class Z:\n    def __sub__(self, o):\n        return 0.0\ndef root(x):\n    return Z()\n"
    assert rr(score_code(_fence(prog), tests, pool=pool)) == (0.0, "non_plain_value")


def test_builtin_named_entry_point_still_works(pool):
    """MBPP 126 names its function `sum`: a program's `sum` serves the tests when the task asks for it (known
    from the reference solution, or, without one, because the assert calls it on plain arguments)."""
    prog = "def sum(a, b):\n    return 6 if (a, b) == (10, 15) else 0\n"
    with_ref = CodeTests.mbpp(
        {"task_id": 126, "code": "def sum(a, b):\n    return 0\n", "test_list": ["assert sum(10, 15) == 6"]}
    )
    without = CodeTests(kind="asserts", asserts=("assert sum(10, 15) == 6",))
    for tests in (with_ref, without):
        assert rr(score_code(_fence(prog), tests, pool=pool)) == (1.0, None)


def test_program_classes_as_test_inputs(pool):
    """MBPP builds inputs from the program's own classes (Pair, Node); those instances may be passed along."""
    tests = CodeTests.mbpp({"task_id": 601, "test_list": ["assert longest([Pair(5, 24), Pair(15, 25), Pair(27, 40)], 3) == 2"],
                            "code": "class Pair:\n    pass\ndef longest(p, n):\n    pass\n"})  # fmt: skip
    prog = (
        "class Pair:\n    def __init__(self, a, b):\n        self.a, self.b = a, b\n"
        "def longest(ps, n):\n    best, end = 0, float('-inf')\n    for p in sorted(ps, key=lambda p: p.b):\n"
        "        if p.a > end:\n            best, end = best + 1, p.b\n    return best\n"
    )
    assert rr(score_code(_fence(prog), tests, pool=pool)) == (1.0, None)


def test_humaneval_prompt_helpers_are_pinned(pool):
    """HumanEval/38-style: the tests encode with the prompt's helper; a program that redefines that helper (and
    decodes with the identity) does not pass."""
    row = {
        "task_id": "T/38",
        "prompt": "def encode(s: str) -> str:\n    return s[1:] + s[:1]\n\n\ndef decode(s: str) -> str:\n    '''Inverse of encode.'''\n",
        "entry_point": "decode",
        "test": "def check(candidate):\n    for w in ['abc', 'hello', 'x']:\n        assert candidate(encode(w)) == w\n",
    }
    tests = CodeTests.humaneval(row)
    cheat = "def encode(s):\n    return s\n\ndef decode(s):\n    return s\n"
    assert rr(score_code(_fence(cheat), tests, pool=pool)) == (0.0, None)
    honest = "def decode(s):\n    return s[-1:] + s[:-1]\n"
    assert rr(score_code(_fence(honest), tests, pool=pool)) == (1.0, None)


def test_dict_subclasses_are_compared_by_what_they_store(pool):
    """MBPP 40/88/902 return collections.Counter where the test expects a dict: that passes; a dict subclass
    (or a patched Counter) whose comparison lies is compared by its stored items, and so fails."""
    tests = CodeTests.mbpp(
        {"task_id": 88, "test_list": ["assert freq([1, 1, 2]) == {1: 2, 2: 1}", "assert freq([]) == {}"]}
    )
    good = "import collections\ndef freq(xs):\n    return collections.Counter(xs)\n"
    assert rr(score_code(_fence(good), tests, pool=pool)) == (1.0, None)
    liars = [
        "class D(dict):\n    def __eq__(self, o):\n        return True\ndef freq(xs):\n    return D()\n",
        "import collections\ncollections.Counter.__eq__ = lambda s, o: True\ndef freq(xs):\n    return collections.Counter([9])\n",
    ]
    for prog in liars:
        assert rr(score_code(_fence(prog), tests, pool=pool)) == (0.0, None), prog  # read as a plain wrong dict


def test_regex_match_results_count_as_plain(pool):
    """Sanitized MBPP 737/787/794: `assert f(s)` where f returns re.search(...) (a Match or None)."""
    tests = CodeTests.mbpp({"task_id": 787, "test_list": ["assert not m('ac')", "assert m('abbbba')"]})
    good = "import re\ndef m(text):\n    return re.search('ab{3}?', text)\n"
    assert rr(score_code(_fence(good), tests, pool=pool)) == (1.0, None)
