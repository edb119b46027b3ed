"""The embedded testbed tasks: tiny problems a 2.5M-parameter model can learn on a laptop CPU.

`testbed` is 1-digit arithmetic from reasoning-gym (offline generators), `testbed_code` asks for a
one-line Python function from three input/output examples. Both use the `testbed` prompt family and
short problem texts, because prompt length dominates the cost of training on CPU.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from functools import cached_property
from typing import Any

from rolecast.core.text import last_boxed
from rolecast.rewards.code import CodeTests, score_code_many
from rolecast.rewards.code import extract_program as sandbox_extract
from rolecast.tasks.base import Problem, Score, Task, register_task

# --- arithmetic -----------------------------------------------------------------------------------

GENERATORS: dict[str, dict[str, Any]] = {
    "chain_sum": dict(min_terms=2, max_terms=3, min_digits=1, max_digits=1),
    "basic_arithmetic": dict(min_terms=2, max_terms=2, min_digits=1, max_digits=1, operators=("+", "-")),
}
_INT = re.compile(r"^[+-]?\d+$")


def _generate(name: str, size: int, seed: int) -> list[dict]:
    import reasoning_gym as rg  # imported where problems are generated: it pulls matplotlib

    return list(rg.create_dataset(name, size=size, seed=seed, **GENERATORS[name]))


@register_task("testbed")
class ArithmeticTestbed(Task):
    """1-digit sums and differences (2-3 terms); the answer is an integer in \\boxed{}.

    The whole space holds only ~7k distinct expressions, so the held-out split is a fixed set of
    expressions and the train split is everything else the generators produce: a model can never
    have trained on a test question, which matters because it would memorise them quickly.
    """

    name = "testbed"
    family = "testbed"

    def __init__(self, seed: int = 0, test_size: int = 400, pool_size: int = 10000):
        self.seed = seed
        self.test_size = test_size
        self.pool_size = pool_size

    def _items(self, split: str) -> list[Problem]:
        # Test and train draw from different generator seeds; the same expression can still come up in
        # both (and in both generators), so train is filtered by expression text below.
        base = self.seed * 1000 + (1 if split == "test" else 2)
        per_gen = (self.test_size + 1) // 2 if split == "test" else self.pool_size
        out: list[Problem] = []
        seen: set[str] = set()
        for gi, name in enumerate(GENERATORS):
            # Oversample the test draw: duplicates are dropped and the split must still reach test_size.
            size = per_gen * 2 if split == "test" else per_gen
            for idx, item in enumerate(_generate(name, size, base + 17 * gi)):
                expr = item["metadata"]["expression"]
                if expr in seen:
                    continue
                seen.add(expr)
                out.append(
                    Problem(
                        id=f"testbed/{split}/{name}/{idx}",
                        text=expr,
                        reference=str(item["answer"]),
                        meta={"source": name},
                    )
                )
                if split == "test" and sum(p.meta["source"] == name for p in out) >= per_gen:
                    break
        return out

    @cached_property
    def _test(self) -> list[Problem]:
        return self._items("test")[: self.test_size]

    @cached_property
    def _train(self) -> list[Problem]:
        held_out = {p.text for p in self._test}
        return [p for p in self._items("train") if p.text not in held_out]

    def problems(self, split: str) -> Sequence[Problem]:
        if split == "test":
            return self._test
        if split == "train":
            return self._train
        raise ValueError(f"task testbed has splits 'train' and 'test', not {split!r}")

    def extract_answer(self, text: str | None) -> str | None:
        return last_boxed(text)

    def score(self, problem: Problem, text: str | None) -> Score:
        ans = self.extract_answer(text)
        if ans is None:
            return Score(0.0, None, "no \\boxed{} answer")
        # Integer comparison rather than reasoning-gym's score_answer: that returns 0.01 for a wrong
        # answer, and "+5" or "05" should count as 5.
        if not _INT.match(ans.replace(" ", "")):
            return Score(0.0, ans, "answer is not an integer")
        if len(ans) > 64:  # int() refuses 4,301 digits; no sum of 1-digit terms needs 64
            return Score(0.0, ans, "answer too long")
        return Score(float(int(ans.replace(" ", "")) == int(problem.reference)), ans)


# --- code -----------------------------------------------------------------------------------------

CODE_XS_SHOWN = 3  # examples in the problem text
# Extra inputs a candidate must also get right (it must be the function, not a table), and where the shown examples
# start. Since 2026-12-02 the examples start at 0 or 1, so a function's offset is f(0) or f(1) minus its slope: the
# testbed model did not learn y - a*x with larger x at its build budget (docs/testbed.md, "The code build"). The
# math build's code share keeps the layout it was built with (LEGACY_CODE_LAYOUT), so it still reproduces its weights.
CODE_HIDDEN_XS = (5, 7)
CODE_TRAIN_STARTS = (0, 1)
CODE_TEST_STARTS = (0, 1)
LEGACY_CODE_LAYOUT = {"train_starts": (0, 1, 2, 3), "test_starts": (1, 2), "hidden_xs": (0, 7)}


def code_functions() -> list[str]:
    """Every hidden function of testbed_code, as a Python expression in x (1-digit constants)."""
    fs = [f"x+{a}" for a in range(1, 10)] + [f"x-{a}" for a in range(1, 10)]
    fs += [f"x*{a}" for a in range(2, 10)]
    fs += [f"x*{a}{s}{b}" for a in range(2, 10) for s in "+-" for b in range(1, 10)]
    fs += ["x*x"] + [f"x*x{s}{b}" for s in "+-" for b in range(1, 10)]
    return fs


def code_value(expr: str, x: int) -> int:
    """Value of one of *our own* hidden functions (never model output: that only runs in the sandbox)."""
    m = re.fullmatch(r"x([*+-])(\d+|x)(?:([+-])(\d+))?", expr)
    if not m:
        raise ValueError(f"not a testbed_code function: {expr!r}")
    op, a, s, b = m.groups()
    a = x if a == "x" else int(a)
    v = x * a if op == "*" else x + a if op == "+" else x - a
    if s:
        v = v + int(b) if s == "+" else v - int(b)
    return v


def code_program(expr: str) -> str:
    """The completion form the testbed teaches for code: a fenced one-line function."""
    return f"```python\ndef f(x): return {expr}\n```"


_FENCE = re.compile(r"```(?:python)?\s*\n(.*?)```", re.S)
_DEF = re.compile(r"def f\(x\):.*")


def extract_program(text: str | None) -> str | None:
    """The last fenced block, else the last `def f(x): ...` line (a completion cut before its fence).

    A strict, dependency-free extraction used when the build judges the model without running it;
    scoring uses the sandbox's own extraction (CodeTestbed.extract_answer).
    """
    if not text:
        return None
    blocks = _FENCE.findall(text)
    if blocks:
        return blocks[-1].strip() or None
    defs = _DEF.findall(text)
    return defs[-1].strip() if defs else None


@register_task("testbed_code")
class CodeTestbed(Task):
    """Write `def f(x): return ...` from f at three consecutive inputs; scored in the sandbox.

    Problem.reference is the hidden expression; meta["tests"] holds (x, f(x)) pairs, shown ones first,
    then hidden ones. The held-out split holds out whole functions, not just their example inputs.
    """

    name = "testbed_code"
    family = "testbed"
    executes_code = True

    def __init__(
        self,
        seed: int = 0,
        test_functions: int = 40,
        timeout_s: float = 5.0,
        train_starts: tuple[int, ...] = CODE_TRAIN_STARTS,
        test_starts: tuple[int, ...] = CODE_TEST_STARTS,
        hidden_xs: tuple[int, ...] = CODE_HIDDEN_XS,
    ):
        self.seed = seed
        self.train_starts, self.test_starts, self.hidden_xs = train_starts, test_starts, hidden_xs
        self.test_functions = test_functions
        self.timeout_s = timeout_s

    @cached_property
    def _split_functions(self) -> tuple[list[str], list[str]]:
        fs = code_functions()
        random.Random(f"testbed_code/{self.seed}").shuffle(fs)
        return fs[self.test_functions :], fs[: self.test_functions]

    @staticmethod
    def make_problem(expr: str, start: int, split: str, hidden_xs: tuple[int, ...] = CODE_HIDDEN_XS) -> Problem:
        xs = list(range(start, start + CODE_XS_SHOWN))
        tests = [(x, code_value(expr, x)) for x in xs + [x for x in hidden_xs if x not in xs]]
        text = " ".join(f"f({x})={y}" for x, y in tests[:CODE_XS_SHOWN])
        return Problem(id=f"testbed_code/{split}/{expr}/{start}", text=text, reference=expr, meta={"tests": tests})

    @cached_property
    def _problems(self) -> dict[str, list[Problem]]:
        train, test = self._split_functions
        return {
            "train": [self.make_problem(f, s, "train", self.hidden_xs) for f in train for s in self.train_starts],
            "test": [self.make_problem(f, s, "test", self.hidden_xs) for f in test for s in self.test_starts],
        }

    def problems(self, split: str) -> Sequence[Problem]:
        if split not in ("train", "test"):
            raise ValueError(f"task testbed_code has splits 'train' and 'test', not {split!r}")
        return self._problems[split]

    def extract_answer(self, text: str | None) -> str | None:
        # The same extraction the scorer applies, so a logged answer is the program that was run.
        return sandbox_extract(text)

    def tests(self, problem: Problem, shown_only: bool = False):
        """The problem's checks as sandbox asserts: the shown examples plus hidden inputs (`shown_only`: the shown
        examples alone, what a role that checks a program against the prompt can see)."""
        pairs = problem.meta["tests"][:CODE_XS_SHOWN] if shown_only else problem.meta["tests"]
        return CodeTests(
            kind="asserts", asserts=tuple(f"assert f({x}) == {y}" for x, y in pairs), timeout_s=self.timeout_s
        )

    def score(self, problem: Problem, text: str | None) -> Score:
        return self.score_many([problem], [text])[0]

    def score_many(self, problems: Sequence[Problem], texts: Sequence[str | None]) -> list[Score]:
        # Model output is only ever executed in the project's sandbox, never with eval/exec here.
        return score_code_many(texts, [self.tests(p) for p in problems])
