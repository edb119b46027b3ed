"""Teacher transcripts for every role of the testbed, and how a role's output is judged.

Each example is a prompt rendered with the `testbed` PromptBook (exactly what a workflow renders) plus
the completion a good agent would write. Candidate solutions shown to aggregators, evaluators,
synthesizers and refiners come from a noise model: right with some probability, else a near miss
(the kind of error a small solver makes), sometimes unparseable.
"""

from __future__ import annotations

import ast
import random
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rolecast.prompts import PromptBook
from rolecast.tasks.base import Problem
from rolecast.tasks.testbed import CODE_XS_SHOWN, code_program, code_value, extract_program, last_boxed

ROLES = ("solve", "refine", "evaluate", "aggregate", "orchestrate", "work", "synthesize")

ARITH_STRATEGIES = ("left to right", "right to left", "positives first", "pair terms", "count on", "double check")
CODE_STRATEGIES = ("find slope", "use differences", "try squares", "check offset", "guess and check")
# What the orch_workers workflow sends when the orchestrator's output has no parseable strategy.
FALLBACK_STRATEGY = "Solve the problem directly."

_STRATEGY_LINE = re.compile(r"STRATEGY\s*(\d+)\s*:\s*(.*?)(?=STRATEGY\s*\d+\s*:|\Z)", re.S | re.I)


@dataclass
class Example:
    task: str  # "testbed" or "testbed_code"
    role: str  # prompt name
    problem: Problem
    messages: list[dict[str, str]]
    target: str  # the teacher's completion, without the end-of-turn token
    info: dict[str, Any] = field(default_factory=dict)  # what judging this example needs
    # Character spans of `target` that are a judging role's decisions (verdicts, yes/no, picks): the warm
    # start weighs their tokens more (builder.DECISION_WEIGHT).
    decisions: list[tuple[int, int]] = field(default_factory=list)


def is_code(problem: Problem) -> bool:
    return "tests" in problem.meta


# --- answers as the roles write them ----------------------------------------------------------------


def answer_text(problem: Problem, answer: str) -> str:
    """A solver completion stating `answer`."""
    return code_program(answer) if is_code(problem) else f"\\boxed{{{answer}}}"


def _safe_code_values(program: str | None, xs: list[int]) -> list[int] | None:
    """f(x) for `def f(x): return <expr>` by interpreting a tiny AST subset (ints, x, + - *).

    Used only to *judge* model output during the build, without running it: anything outside the
    subset counts as wrong. Scoring for training goes through the task, i.e. the sandbox.
    """
    if not program:
        return None
    m = re.fullmatch(r"def f\(x\):\s*return (.+)", program.strip())
    if not m:
        return None
    try:
        tree = ast.parse(m.group(1), mode="eval").body
    except SyntaxError:
        return None

    def ev(node, x):
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.Name) and node.id == "x":
            return x
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand, x)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult)):
            a, b = ev(node.left, x), ev(node.right, x)
            return a + b if isinstance(node.op, ast.Add) else a - b if isinstance(node.op, ast.Sub) else a * b
        raise ValueError("outside the judged subset")

    try:
        return [ev(tree, x) for x in xs]
    except (ValueError, RecursionError):
        return None


def extract(problem: Problem, text: str | None) -> str | None:
    return extract_program(text) if is_code(problem) else last_boxed(text)


def is_correct(problem: Problem, text: str | None) -> bool:
    """Whether a solver-style completion is right (code judged without executing it, see above)."""
    if is_code(problem):
        tests = problem.meta["tests"]
        return _safe_code_values(extract_program(text), [x for x, _ in tests]) == [y for _, y in tests]
    ans = last_boxed(text)
    try:
        return ans is not None and int(ans.replace(" ", "")) == int(problem.reference)
    except ValueError:
        return False


def canonical_answer(problem: Problem, text: str | None) -> str | None:
    """A candidate's answer, for majority votes (code: its values on the tests, so x*2 == x+x)."""
    if is_code(problem):
        vals = _safe_code_values(extract_program(text), [x for x, _ in problem.meta["tests"]])
        return None if vals is None else repr(vals)
    return boxed_integer(text)


def boxed_integer(text: str | None) -> str | None:
    """The last boxed answer, as an integer's text where it is one (so -0 and 0, "- 1" and "-1" agree)."""
    a = last_boxed(text)
    try:
        return None if a is None else str(int(a.replace(" ", "")))
    except ValueError:
        return a


def majority_holders(answers: Sequence[str | None]) -> list[int]:
    """Indices of the answer given most often, where two or more gave it (ties: all of them); else none."""
    counts = Counter(a for a in answers if a is not None)
    top = max(counts.values(), default=0)
    return [i for i, a in enumerate(answers) if a is not None and counts[a] == top] if top > 1 else []


# --- the noise model --------------------------------------------------------------------------------


def near_misses(problem: Problem) -> list[str]:
    """Plausible wrong answers: off by one or two, wrong sign, a slipped digit; code: a wrong constant."""
    if is_code(problem):
        expr = problem.reference
        out = set()
        for m in re.finditer(r"\d+", expr):
            v = int(m.group())
            for d in (-1, 1):
                if 1 <= v + d <= 9:
                    out.add(expr[: m.start()] + str(v + d) + expr[m.end() :])
        out.update({expr.replace("+", "-"), expr.replace("-", "+"), re.sub(r"[+-]\d+$", "", expr)})
        if not re.search(r"[+-]\d+$", expr):
            out.update({expr + "+1", expr + "-1"})
        tests = problem.meta["tests"]
        # Drop "misses" that are the same function (e.g. x*2 with the offset dropped is still itself).
        return sorted(
            e
            for e in out
            if e != expr and e not in ("x",) and [code_value(e, x) for x, _ in tests] != [y for _, y in tests]
        )
    a = int(problem.reference)
    # Most common slips first: the noise model draws mostly from the first three, so wrong candidates collide.
    slips = [a - 1, a + 1, -a, a + 2, a - 2, a + 10, a - 10]
    if abs(a) >= 10:
        slips.append(int(str(abs(a))[::-1]) * (1 if a > 0 else -1))
    return [str(v) for v in dict.fromkeys(slips) if v != a]


def noisy_answer(
    problem: Problem, rng: random.Random, p_correct: float, misses: list[str] | None = None, derive_code: bool = False
) -> str:
    """A candidate completion: right with probability p_correct, else a near miss; 5% unparseable. With
    `derive_code` a code candidate is written as the code build's solver writes (`code_solver_text`): its two
    differences, then the function, since that is what evaluators, aggregators and refiners read in a workflow."""
    text = _noisy_answer(problem, rng, p_correct, misses)
    if derive_code and is_code(problem) and text.startswith("```python\ndef"):
        return code_solver_text(problem).rsplit(" ```", 1)[0] + " " + text
    return text


def _noisy_answer(problem: Problem, rng: random.Random, p_correct: float, misses: list[str] | None) -> str:
    if rng.random() < 0.05:
        if is_code(problem):
            return f"def f(x) return {problem.reference}" if rng.random() < 0.5 else "```python\n```"
        return rng.choice([problem.reference, "\\boxed{}", "="])
    if rng.random() < p_correct:
        return answer_text(problem, problem.reference)
    # Misses are drawn from a few per problem so that wrong candidates collide, as real samples do.
    return answer_text(
        problem,
        rng.choice((misses or near_misses(problem))[:3] if rng.random() < 0.7 else (misses or near_misses(problem))),
    )


# --- the teacher, role by role ------------------------------------------------------------------------


def strategies_for(problem: Problem, k: int) -> list[str]:
    """The teacher's plan: up to k distinct strategies, ordered by what fits the problem."""
    if is_code(problem):
        ys = [y for _, y in problem.meta["tests"][:3]]
        quadratic = ys[2] - 2 * ys[1] + ys[0] != 0
        order = list(CODE_STRATEGIES)
        if quadratic:
            order.remove("try squares")
            order.insert(0, "try squares")
    else:
        terms = len(re.findall(r"\d+", problem.text))
        order = [
            s
            for s in ARITH_STRATEGIES
            if not (s == "pair terms" and terms < 3) and not (s == "positives first" and "-" not in problem.text)
        ]
    return order[:k]


def plan_text(strategies: list[str]) -> str:
    return "\n".join(f"STRATEGY {i}: {s}" for i, s in enumerate(strategies, 1))


def _stated(problem: Problem, answer: str | None = None, derive_code: bool = False) -> str:
    """What judging roles write before their decision: their own answer, re-derived step by step.

    Arithmetic: the left-to-right running sums (`7-8=-1 -1+9=8`), a different computation from the solver's
    one-step answer, so a judge's errors are not the solver's errors. When the judges stated a one-step
    answer (`= 8`), on the model's own rollouts that answer repeated the candidates' mistakes: the evaluator's
    balanced accuracy was 0.56 and the aggregator picked a right voter no more often than voter 1.
    `answer` (a critique quoted in a refine prompt): the derivation ends at that answer instead, a slip in
    its last step.
    Code (`derive_code`): the differences and the offset (`code_trace`), then the function; otherwise
    `= <function>`, the one-step answer the math build's code share is taught.
    """
    answer = problem.reference if answer is None else answer
    if is_code(problem):
        return f"{code_trace(problem)[0]} {answer}" if derive_code else f"= {answer}"
    trace = work_trace(problem, "left to right").rsplit(" \\boxed", 1)[0]
    return trace[: trace.rindex("=") + 1] + answer


def _shown(problem: Problem, candidate: str) -> str:
    """A candidate's answer as a judging role copies it next to its own ("?" when it has none).

    Copying it makes the decision a comparison of two nearby spans. With only its own answer stated and
    the candidate back in the prompt, the first build's evaluator never learned to compare: it said
    Correct 97% of the time, and the aggregator always picked candidate 1.
    """
    found = (extract(problem, candidate) or "").strip()
    if not found:
        return "?"
    return found.removeprefix("def f(x): return ").strip() if is_code(problem) else found


# --- workers follow their strategy ---------------------------------------------------------------------


def signed_terms(expression: str) -> list[int]:
    """`7 - 8 + 9` -> [7, -8, 9]; `-( 3 - -2 )` -> [-3, -2]: the sum's terms with their signs applied."""

    def flat(node: ast.expr, sign: int) -> list[int]:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return [sign * node.value]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            return flat(node.operand, -sign if isinstance(node.op, ast.USub) else sign)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
            return flat(node.left, sign) + flat(node.right, -sign if isinstance(node.op, ast.Sub) else sign)
        raise ValueError(f"not a sum of integers: {expression!r}")

    return flat(ast.parse(expression, mode="eval").body, 1)


def strategy_order(terms: list[int], strategy: str) -> list[int]:
    """The order in which a worker adds the terms under each arithmetic strategy."""
    if strategy == "right to left":
        return terms[::-1]
    if strategy == "positives first":
        return [t for t in terms if t >= 0] + [t for t in terms if t < 0]
    if strategy == "pair terms" and len(terms) > 2:
        return [terms[0], terms[-1], *terms[1:-1]]
    if strategy == "count on":
        return sorted(terms, reverse=True)
    return list(terms)  # left to right, double check


def work_trace(problem: Problem, strategy: str, derive_code: bool = False) -> str:
    """A worker's completion: the running sums in its strategy's order, then the boxed answer.

    The strategy changes the computation (and how hard it is: positives first avoids negative partial
    sums), so the orchestrator's choice matters to what the workers get right. Code workers derive the
    function by their strategy's computation (`code_trace`) when `derive_code`, else answer directly, as
    the fallback strategy does.
    """
    if is_code(problem) and derive_code and strategy in CODE_STRATEGIES:
        derivation, expr = code_trace(problem, strategy)
        return f"{derivation} {code_program(expr)}"
    if is_code(problem) or strategy not in ARITH_STRATEGIES:
        return answer_text(problem, problem.reference)
    order = strategy_order(signed_terms(problem.text), strategy)
    steps, total = [], order[0]
    for t in order[1:]:
        steps.append(f"{total}{'+' if t >= 0 else '-'}{abs(t)}={total + t}")
        total += t
    if strategy == "double check" or not steps:
        steps.append(f"={total}")
    return " ".join(steps) + f" \\boxed{{{problem.reference}}}"


# --- code: the careful way, derived from the shown examples -----------------------------------------------

# How code's judging and working roles derive a function from the shown examples (`derive_code=True`, the code
# build's teacher). The first build taught them the answer in one step (`= x*2+1`), the solver's computation:
# on the model's own rollouts a judge then repeats its candidates' mistakes, as arithmetic's one-step judges
# did. The math build keeps that teacher for its code share, so it still reproduces the shipped weights.


def code_expression(slope: int | None, offset: int) -> str:
    """The canonical text of x*slope+offset (slope None: x*x+offset), as the task writes its functions."""
    head = "x*x" if slope is None else "x" if slope == 1 else f"x*{slope}"
    if offset == 0:
        return head
    return f"{head}{'+' if offset > 0 else '-'}{abs(offset)}"


def _minus(a: int, b: int) -> str:
    """`a-b=c`, written `a+|b|=c` when b is negative, as arithmetic's traces never write `--`."""
    return f"{a}{'-' if b >= 0 else '+'}{abs(b)}={a - b}"


def code_solver_text(problem: Problem) -> str:
    """The code build's solver: the first difference, then the function (`5-3=2` then `x*2+1`), its offset (f(0),
    or f(1) minus the slope) and whether the function is a square worked out in its head, the hard way.

    Probe builds (examples from x = 1 or 2) whose solver worked anything out in its head never learnt it in 900
    steps: taught the function alone, 0.09-0.11 of held-out functions right; the differences and then the function,
    0.05-0.11; the differences and the product the offset needs, 0.06; the offset written at the second example,
    0.09-0.14, as the workers computing y - a*x at larger x (0.14).
    """
    (_, y1), (_, y2) = problem.meta["tests"][:2]
    return f"{_minus(y2, y1)} {code_program(problem.reference)}"


def code_trace(problem: Problem, strategy: str = "use differences") -> tuple[str, str]:
    """(the steps, the function) a careful code worker writes under `strategy`; every strategy is right, by a
    different computation, so workers' slips differ:

    - use differences (and every judge): both differences, then the offset at the first example
      (`5-3=2 7-5=2 3-2*1=1`); unequal differences mean x*x, offset `y-x*x`;
    - find slope: the later difference first, then as above;
    - check offset: as above, then the function's value at the second example;
    - try squares: `y-x*x` at all three examples first; equal means x*x plus it, else the slope as above;
    - guess and check: the function first, then its value at the third example.
    """
    (x1, y1), (x2, y2), (x3, y3) = problem.meta["tests"][:3]
    d1, d2 = y2 - y1, y3 - y2
    square = d1 != d2
    slope = None if square else d1

    def at(x: int, y: int) -> tuple[str, int]:
        times = f"{x}*{x}" if slope is None else f"{slope}*{x}"
        off = y - (x * x if slope is None else slope * x)
        return f"{y}-{times}={off}", off

    diffs = f"{_minus(y2, y1)} {_minus(y3, y2)}"
    if strategy == "guess and check":
        expr = code_expression(slope, at(x1, y1)[1])
        return f"{expr} {expr.replace('x', str(x3))}={y3}", expr
    if strategy == "try squares":
        rests = [(f"{y}-{x}*{x}={y - x * x}", y - x * x) for x, y in ((x1, y1), (x2, y2), (x3, y3))]
        steps = " ".join(r for r, _ in rests)
        if square:
            return steps, code_expression(None, rests[0][1])
        step, off = at(x1, y1)
        return f"{steps} {_minus(y2, y1)} {step}", code_expression(slope, off)
    step, off = at(x1, y1)
    expr = code_expression(slope, off)
    if strategy == "find slope":  # the later difference first
        return f"{_minus(y3, y2)} {_minus(y2, y1)} {step}", expr
    if strategy == "check offset":  # the function checked at the second example
        return f"{diffs} {step} {expr.replace('x', str(x2))}={y2}", expr
    return f"{diffs} {step}", expr


def work_example(problem: Problem, strategy: str, book: PromptBook, derive_code: bool = False) -> Example:
    """A worker's prompt under `strategy` and the teacher's trace for it."""
    task = "testbed_code" if is_code(problem) else "testbed"
    msgs = book.render("work", problem=problem.text, strategy=strategy)
    return Example(task, "work", problem, msgs, work_trace(problem, strategy, derive_code), {"strategy": strategy})


def make_example(
    role: str,
    problem: Problem,
    rng: random.Random,
    book: PromptBook,
    derive_code: bool = False,
    code_synthesis: str = "checks",
) -> Example:
    """One teacher example of `role` on `problem`; `derive_code`: code's careful roles derive (`code_trace`);
    `code_synthesis`: how the code build's synthesizer decides (CODE_SYNTHESES)."""
    task = "testbed_code" if is_code(problem) else "testbed"
    misses = near_misses(problem)
    solve_text = answer_text(problem, problem.reference)
    info: dict[str, Any] = {}
    decisions: list[tuple[int, int]] = []
    if role == "solve":
        target = code_solver_text(problem) if is_code(problem) and derive_code else solve_text
        msgs = book.render("solve", problem=problem.text)
    elif role == "work":
        strategy = (
            FALLBACK_STRATEGY
            if rng.random() < 0.1
            else rng.choice(CODE_STRATEGIES if is_code(problem) else ARITH_STRATEGIES)
        )
        return work_example(problem, strategy, book, derive_code)
    elif role == "synthesize":
        n = rng.choice((1, 2, 3, 3, 3, 4))
        # Workers write step by step and are right more often than one-step solvers.
        p = rng.choice((0.4, 0.6, 0.8))
        sols = [noisy_answer(problem, rng, p, misses, derive_code) for _ in range(n)]
        strategies = strategies_for(problem, n)
        pick = code_synthesis == "pick" and is_code(problem) and derive_code
        prompt = "synthesize_pick" if pick else "synthesize"  # Orch-Workers' `synthesis: pick` asks for a number
        msgs = book.render(prompt, problem=problem.text, strategies=strategies, solutions=sols)
        if is_code(problem) and derive_code:
            target, decisions = _with_decisions(CODE_SYNTHESES[code_synthesis](problem, sols))
        else:
            target, decisions = _with_decisions(_agreement_parts(problem, sols, derive_code))
        info.update(candidates=sols, pick=pick)
    elif role == "evaluate":
        sol = noisy_answer(problem, rng, 0.5, misses, derive_code)
        ok = is_correct(problem, sol)
        msgs = book.render("evaluate", problem=problem.text, solution=sol, history=[])
        target, decisions = _with_decisions(_evaluator_parts(problem, sol, ok, derive_code))
        info["truth"] = ok
    elif role == "aggregate":
        n = 3 if rng.random() < 0.8 else rng.choice((2, 4))
        p = rng.choice((0.2, 0.4, 0.6))
        sols = [noisy_answer(problem, rng, p, misses, derive_code) for _ in range(n)]
        good = acceptable_picks(problem, sols)
        msgs = book.render("aggregate", problem=problem.text, solutions=sols)
        target, decisions = _with_decisions(_aggregator_parts(problem, sols, good, derive_code))
        info.update(candidates=sols, acceptable=good)
    elif role == "refine":
        rounds = rng.choice((1, 1, 2))
        history = []
        for _ in range(rounds):
            sol = noisy_answer(problem, rng, 0.25, misses, derive_code)
            while is_code(problem) and derive_code and is_correct(problem, sol):
                # the code build's critique checks the candidate (`code_check`): only a wrong one fails it
                sol = noisy_answer(problem, rng, 0.25, misses, derive_code)
            # Refinement only happens after a rejection, so every critique says Incorrect; its own
            # stated answer is usually right, and never equal to the rejected one.
            sol_ans = canonical_answer(problem, sol)
            if is_code(problem):
                options = [problem.reference] * 3 + misses
                options = [e for e in options if repr([code_value(e, x) for x, _ in problem.meta["tests"]]) != sol_ans]
            else:
                options = [problem.reference] * 3 + misses
                options = [a for a in options if a != sol_ans]
            critic_answer = rng.choice(options) if options else problem.reference
            if is_code(problem) and derive_code:  # the code build's evaluator checks the candidate
                critique = _with_decisions(_evaluator_parts(problem, sol, False, derive_code))[0]
            else:
                critique = _with_decisions(
                    _verdict_parts(_stated(problem, critic_answer, derive_code), _shown(problem, sol), False)
                )[0]
            history.append({"solution": sol, "critique": critique})
        msgs = book.render("refine", problem=problem.text, history=history)
        # After a rejection the answer is re-derived the careful way, as the judges do.
        careful = not is_code(problem) or derive_code
        target = f"{_stated(problem, None, derive_code)} {solve_text}" if careful else solve_text
    elif role == "orchestrate":
        k = rng.choice((2, 3, 3, 4))
        msgs = book.render("orchestrate", problem=problem.text, k=k)
        plan = strategies_for(problem, k)
        target = plan_text(plan)
        info.update(k=k, plan=plan)
    else:
        raise ValueError(f"unknown role {role!r}; roles: {ROLES}")
    return Example(task, role, problem, msgs, target, info, decisions)


def code_check(problem: Problem, expression: str) -> tuple[str, bool]:
    """(the steps, passed): `expression` (a candidate's function), copied, then evaluated at each shown example and
    set against its value (`x*2+1 1*2+1=3 vs 3 2*2+1=5 vs 5 ...`), up to the first that differs; `?` (no function)
    fails at once.

    How the code build's judges decide. Taught to derive the function themselves and compare (as arithmetic's
    judges do), on the model's own rollouts their derivation bent toward the candidate in the prompt: the
    evaluator said Correct to 84% of candidates, 53% of them right (balanced accuracy 0.65), the aggregator
    picked no better than voter 1. A check substitutes the candidate's own numbers, so there is nothing to bend.
    The function is copied first so that substituting reads it from the line being written, and a synthesizer
    that says yes copies its program from there: without the copy, a probe build's synthesizer checked worker
    1's function, said yes, and wrote the last worker's program (31 of 320 episodes, worker 1 right and it wrong).
    """
    if expression == "?":
        return "?", False
    steps = [expression]
    for x, y in problem.meta["tests"][:CODE_XS_SHOWN]:
        value = _safe_code_values(f"def f(x): return {expression}", [x])
        computed = "?" if value is None else str(value[0])
        steps.append(f"{expression.replace('x', str(x))}={computed} vs {y}")
        if value is None or value[0] != y:
            return " ".join(steps), False
    return " ".join(steps), True


def _evaluator_parts(problem: Problem, candidate: str, correct: bool, derive_code: bool) -> list[str | tuple[str]]:
    """An evaluator's output as parts: the code build's checks the candidate (`code_check`), the others
    re-derive and compare (`_verdict_parts`); the verdict is the truth, marked as its decision."""
    if is_code(problem) and derive_code:
        steps, _ = code_check(problem, _shown(problem, candidate))
        return [f"{steps} \\boxed{{", ("Correct" if correct else "Incorrect",), "}"]
    return _verdict_parts(_stated(problem, None, derive_code), _shown(problem, candidate), correct)


def _code_check_rows(problem: Problem, candidates: list[str]) -> tuple[list[str | tuple[str]], int | None]:
    """The code build's judges' rows (`1:<check> no 2:<check> yes`): each candidate's function checked on the shown
    examples (`code_check`), in order, up to the first that passes; (the parts, its 0-based index or None)."""
    parts: list[str | tuple[str]] = []
    for i, c in enumerate(candidates):
        steps, passed = code_check(problem, _shown(problem, c))
        parts += [f"{' ' if i else ''}{i + 1}:{steps} ", ("yes" if passed else "no",)]
        if passed:
            return parts, i
    return parts, None


def _code_synthesis_parts(problem: Problem, candidates: list[str]) -> list[str | tuple[str]]:
    """The code build's synthesizer: the judges' rows (`_code_check_rows`), then the first passing worker's program;
    when none passes, its own derivation and the function. (Its agreement rule, `_agreement_parts`, fell 0.17 below
    worker 1 on the model's own rollouts.)"""
    parts, passing = _code_check_rows(problem, candidates)
    if passing is None:
        return parts + [f" {_stated(problem, None, True)} {answer_text(problem, problem.reference)}"]
    # The function copied into the program weighs as a decision: a probe build with the function copied into the
    # check (`code_check`) still wrote a right worker's program with another worker's offset after saying yes to
    # it (19 of 320 episodes), the copy's tokens weighing 1 among ~60.
    expression = _shown(problem, candidates[passing])
    head, tail = answer_text(problem, expression).split(expression)
    return parts + [" " + head, (expression,), tail]


def _code_agreement_parts(problem: Problem, candidates: list[str]) -> list[str | tuple[str]]:
    """A code synthesizer that counts votes first: workers' functions compared pair by pair (1-2, 1-3, 2-3, ...) up
    to the first two that are the same, whose function it copies into its program; when no two agree, the judges'
    rows (`_code_synthesis_parts`).

    Why it was tried: on the continued code builds (docs/testbed.md, "Continuing the code builds") the workers got
    strong (worker 1 right 0.79-0.88) and a majority vote over them scored 0.83-0.93, while the checking
    synthesizer stayed near worker 1. It did worse (-0.047 small, -0.087 large against worker 1): the model
    miscopies functions into its pair rows. Kept so that those probes rebuild; no shipped build uses it."""
    parts, agreed = _pair_rows([_shown(problem, c) for c in candidates])
    if agreed is None:  # the pair rows end in the space the judges' rows start after
        return parts + _code_synthesis_parts(problem, candidates)
    head, tail = answer_text(problem, agreed).rsplit(agreed, 1)
    return parts + [head, (agreed,), tail]


def _code_pick_parts(problem: Problem, candidates: list[str]) -> list[str | tuple[str]]:
    """A code synthesizer that names a worker (Orch-Workers' `synthesis: pick`; the workflow returns that worker's
    program): the judges' rows, then the pick, exactly as the code aggregator writes them (the first worker that
    passes; none passes: the first majority holder).

    Why it was tried: on the shipped builds' own rollouts the checking synthesizer's rows chose better than its
    answer, which lost the choice in copying the program (docs/testbed.md, "How far the first would go")."""
    return _aggregator_parts(problem, candidates, acceptable_picks(problem, candidates), True)


# How the code build's synthesizer decides: "checks" (the shipped builds), "agreement" (votes, then checks), or
# "pick" (checks, then a worker's number: Orch-Workers' `synthesis: pick`).
CODE_SYNTHESES: dict[str, Callable[[Problem, list[str]], list[str | tuple[str]]]] = {
    "checks": _code_synthesis_parts,
    "agreement": _code_agreement_parts,
    "pick": _code_pick_parts,
}


def _aggregator_parts(
    problem: Problem, candidates: list[str], good: list[int], derive_code: bool
) -> list[str | tuple[str]]:
    """An aggregator's output as parts: candidates checked in order up to the first that passes, then the pick
    (`good[0]`: the first correct one, else the first majority holder)."""
    # Candidates are checked in order, up to the first match, each row like the evaluator's output (the
    # candidate's answer next to its own, then yes/no), so every comparison is between adjacent spans and
    # the pick is the label just written; with no match, the majority answer. With its own answer stated
    # only once, a probe build said "no" to candidates equal to it far down the list.
    parts: list[str | tuple[str]] = []
    if is_code(problem) and derive_code:
        # The code build's aggregator checks each candidate on the shown examples, as its evaluator does.
        parts, _ = _code_check_rows(problem, candidates)
    else:
        own = _shown(problem, answer_text(problem, problem.reference))
        parts.append(_stated(problem, None, derive_code))
        for i, c in enumerate(candidates, 1):
            shown = _shown(problem, c)
            match = shown == own
            parts += [f" {i}:{shown} vs {own} ", ("yes" if match else "no",)]
            if match:
                break
    parts += [" \\boxed{", (str(good[0] + 1),), "}"]
    return parts


def _verdict_parts(stated: str, shown: str, correct: bool) -> list[str | tuple[str]]:
    """An evaluator's output as parts (`= 8 vs 7 \\boxed{Incorrect}`), the verdict marked as its decision;
    refine prompts quote the same text as the critique."""
    return [f"{stated} vs {shown} \\boxed{{", ("Correct" if correct else "Incorrect",), "}"]


def _agreement_parts(problem: Problem, candidates: list[str], derive_code: bool = False) -> list[str | tuple[str]]:
    """A synthesizer's output: candidates compared pair by pair (1-2, 1-3, 2-3, 1-4, ...) up to the first two
    that agree, whose answer it gives; when none agree, its own answer re-derived step by step.

    Workers follow different strategies, so their slips differ and two agreeing workers are usually right:
    for three workers the first agreeing pair is the majority. Taught the true answer whatever the
    candidates said (the first rebuild), the synthesizer learnt to solve in one step with the workers as
    distraction, and on its own rollouts fell below worker 1.
    """
    parts, agreed = _pair_rows([_shown(problem, c) for c in candidates])
    if agreed is not None:
        return parts + [answer_text(problem, agreed)]
    return parts + [f"{_stated(problem, None, derive_code)} {answer_text(problem, problem.reference)}"]


def _pair_rows(shown: list[str]) -> tuple[list[str | tuple[str]], str | None]:
    """Candidates' answers compared pair by pair (1-2, 1-3, 2-3, 1-4, ...) up to the first two that are the same
    (`1:8 vs 2:7 no 1:8 vs 3:8 yes `; `?`, no answer, agrees with nothing): (the rows, the agreed answer or None)."""
    parts: list[str | tuple[str]] = []
    for j in range(1, len(shown)):
        for i in range(j):
            same = shown[i] == shown[j] and shown[i] != "?"
            parts += [f"{i + 1}:{shown[i]} vs {j + 1}:{shown[j]} ", ("yes" if same else "no",), " "]
            if same:
                return parts, shown[i]
    return parts, None


def _with_decisions(parts: list[str | tuple[str]]) -> tuple[str, list[tuple[int, int]]]:
    """Join text parts; 1-tuples are decisions, whose character spans are returned with the text."""
    text, spans = "", []
    for part in parts:
        if isinstance(part, tuple):
            spans.append((len(text), len(text) + len(part[0])))
            part = part[0]
        text += part
    return text, spans


def acceptable_picks(problem: Problem, candidates: list[str]) -> list[int]:
    """0-based indices an aggregator may pick: the correct ones; if none, those with the majority answer."""
    good = [i for i, c in enumerate(candidates) if is_correct(problem, c)]
    if good:
        return good
    # nothing to prefer: the first is as good as any
    return majority_holders([canonical_answer(problem, c) for c in candidates]) or [0]


# --- judging a model's completion for an example ---------------------------------------------------------


def _boxed_pick(completion: str, n: int) -> int | None:
    """The 0-based candidate a judging role's last `\\boxed{i}` names, None when it names none of the n."""
    boxed = last_boxed(completion)
    return int(boxed) - 1 if boxed and boxed.isdigit() and 1 <= int(boxed) <= n else None


def judge(ex: Example, completion: str) -> tuple[bool, bool, Any]:
    """(well-formed, right, label) for one completion; label is the verdict/pick, for distributions."""
    p = ex.problem
    if ex.role == "synthesize" and ex.info.get("pick"):  # it names a worker: right when that worker's answer is
        pick = _boxed_pick(completion, len(ex.info["candidates"]))
        return pick is not None, pick is not None and is_correct(p, ex.info["candidates"][pick]), pick
    if ex.role in ("solve", "work", "synthesize", "refine"):
        ok_format = extract(p, completion) is not None
        return ok_format, is_correct(p, completion), None
    boxed = last_boxed(completion)
    if ex.role == "evaluate":
        verdict = {"correct": True, "incorrect": False}.get((boxed or "").strip().lower())
        return verdict is not None, verdict is not None and verdict == ex.info["truth"], verdict
    if ex.role == "aggregate":
        pick = _boxed_pick(completion, len(ex.info["candidates"]))
        return pick is not None, pick in ex.info["acceptable"], pick
    if ex.role == "orchestrate":
        found = []
        for _, body in _STRATEGY_LINE.findall(completion or ""):
            body = " ".join(body.split())
            if body and body not in found:
                found.append(body)
        vocab = CODE_STRATEGIES if is_code(p) else ARITH_STRATEGIES
        ok_format = 1 <= len(found) <= ex.info["k"] and all(s in vocab for s in found)
        return ok_format, found == ex.info["plan"], len(found)
    raise ValueError(ex.role)


ExampleMaker = Callable[[str, Problem, random.Random, PromptBook], Example]
