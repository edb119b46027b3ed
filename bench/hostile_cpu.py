"""The trainer's CPU per completion on hostile input: extraction + parsing + comparison, every grader path.

    .venv/bin/python bench/hostile_cpu.py [--chars 8192] [--reps 5] [--markdown]

Each hostile completion (a run of one character, deep nesting of each bracket kind, fences left open, huge and odd
numbers, NaN forms, mixed Unicode, ...) of `--chars` characters goes through what the trainer itself does with it,
per grader path; and each hostile program output of that size through the code graders' comparison:

- math, rolecast / study: `MathVerifier.score` (extraction, the size bounds, the request to the worker; the
  worker's own time is bounded by its timeout and is not the trainer's CPU);
- code, each kind of tests and both graders: extraction (`extract_for`) + planning the job (`build_job`: the
  host's parse of the program, the study's wrapping);
- role parsers, rolecast / study: a pick, a verdict and strategies read from the text;
- outputs: `judge` of a job whose case printed (stdio) or returned (functional) the hostile text.

What is timed is this process's CPU (time.process_time: all its threads, none of its children), the largest of
`--reps` runs, each with the garbage collector paused (see `worst_cpu_ms`). Prints one row per input and the
largest of each column; docs/sandbox.md keeps the table (`--markdown` prints it in that form).
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable

from rolecast.core import text as core_text
from rolecast.rewards.code import CodeTests, build_job, extract_for, judge
from rolecast.rewards.math import MathVerifier
from rolecast.sandbox import CaseResult, JobResult
from rolecast.workflows import parsing


def completions(n: int) -> dict[str, str]:
    def fill(unit: str, size: int = n) -> str:
        return (unit * (size // len(unit) + 1))[:size]

    return {
        "fence + spaces": "```" + " " * (n - 3),
        "backticks": "`" * n,
        "open fences": fill("```python\n"),
        "fence, tag, no newline": fill("```python "),
        "unary minus in a fence": "```python\ndef f():\n    return " + "-" * (n - 40) + "1\n```",
        "unary minus, bare": "def f():\n    return " + "-" * (n - 30) + "1\n",
        "chained calls": "```python\nf" + fill("()", n - 20) + "\n```",
        "nested lambdas": "```python\n" + fill("lambda:", n - 20) + "1\n```",
        "bare code, then lines that fail": "def f():\n" + fill("x\n", n - 12) + "(((",
        "bare code, then prose": "def f():\n    return 1\n" + fill("This is prose (x\n", n - 22),
        "( x n": "(" * n,
        "[ x n": "[" * n,
        "{ x n": "{" * n,
        "\\boxed{ x n/7 (unclosed)": fill("\\boxed{"),
        "\\boxed{1} x n/9": fill("\\boxed{1}"),
        "\\left( x n/6": fill("\\left("),
        "\\frac{1}{ x n/9": fill("\\frac{1}{"),
        "newlines": "\n" * n,
        "spaces": " " * n,
        "#### + spaces": "#### " + " " * (n - 5),
        "####\\n x n/5": fill("####\n"),
        "digits": "9" * n,
        "1,000,000,...": "1" + fill(",000", n - 1),
        "numbers": fill("1 "),
        "1e999999999 x": fill("1e999999999 "),
        "nan / sNaN": fill("nan sNaN -sNaN12 "),
        "boxed power tower": "\\boxed{" + fill("9^{", n - 10) + "}",
        "STRATEGY runs": "STRATEGY 1:" + fill("STRATEGY "),
        "numbered, then newlines": "1. a" + "\n" * (n - 4),
        "</think> x n/8": fill("</think>"),
        "box markers": "<|end_of_box|>" + fill("<|begin_of_box|>", n - 14),
        "mixed Unicode": fill("\u0301\u202e\U0001f600x\u00a0\u0663\u200b"),
    }


def outputs(n: int) -> dict[str, str]:
    def fill(unit: str, size: int = n) -> str:
        return (unit * (size // len(unit) + 1))[:size]

    return {
        "one integer": "9" * n,
        "numbers": fill("1 "),
        "newlines": "\n" * n,
        "nan / sNaN / inf": fill("nan sNaN -inf "),
        "huge exponents": fill("1e999999999 "),
        "deep list": "[" * (n // 2) + "]" * (n // 2),
        "deep object": fill('{"a": ', n - 8) + "1",
        "floats": fill("0.333333 "),
        "mixed Unicode": fill("\u0301\u202e\U0001f600x\u00a0\u0663\u200b"),
    }


ASSERTS = CodeTests(kind="asserts", asserts=("assert add(1, 2) == 3",))
HUMANEVAL = CodeTests(
    kind="humaneval",
    prompt="def add(a, b):\n",
    test="def check(candidate):\n    assert candidate(1, 2) == 3\n",
    entry_point="add",
)
STDIO = CodeTests(kind="stdio", inputs=("1\n",), outputs=("2001000\n",))
FUNCTIONAL = CodeTests(kind="functional", inputs=("1",), outputs=("[1, 2.5]",), entry_point="f")


def worst_cpu_ms(fn: Callable[[], object], reps: int) -> float:
    """The largest CPU time of `reps` calls, each with the garbage collector paused: a full collection is the whole
    process's cost (~35 ms over this script's 100,000 objects, more in a trainer), which any allocation may set
    off, not this input's."""
    worst = 0.0
    for _ in range(reps):
        gc.collect()
        gc.disable()
        try:
            t = time.process_time()
            fn()
            worst = max(worst, time.process_time() - t)
        finally:
            gc.enable()
    return worst * 1000


def plan(text: str, tests: CodeTests, grader: str) -> None:
    program = extract_for(text, grader)
    if program and program.strip():
        build_job(program, tests, grader=grader)


def completion_paths(verifier: MathVerifier) -> dict[str, Callable[[str], object]]:
    return {
        "math": lambda t: verifier.score("18", t),
        "math, study": lambda t: verifier.score("18", t, "study"),
        "asserts": lambda t: plan(t, ASSERTS, "rolecast"),
        "humaneval": lambda t: plan(t, HUMANEVAL, "rolecast"),
        "stdio": lambda t: plan(t, STDIO, "rolecast"),
        "stdio, study": lambda t: plan(t, STDIO, "study"),
        "functional, study": lambda t: plan(t, FUNCTIONAL, "study"),
        "role parsers": lambda t: (
            core_text.parse_choice(t, 3),
            core_text.parse_verdict(t),
            core_text.parse_strategies(t, 3),
        ),
        "role parsers, study": lambda t: (
            parsing.study_parse_choice(t, 3),
            parsing.study_parse_verdict(t),
            parsing.study_parse_strategies(t, 3),
        ),
    }


def judged(text: str, tests: CodeTests, grader: str) -> object:
    case = CaseResult(rc=0, stdout=text.encode(), stderr=b"", value=text, reason=None)
    return judge(JobResult(mode=tests.kind, cases=[case], done=True), tests, grader=grader)


OUTPUT_PATHS: dict[str, Callable[[str], object]] = {
    "stdio": lambda t: judged(t, STDIO, "rolecast"),
    "functional": lambda t: judged(t, FUNCTIONAL, "rolecast"),
    "stdio, study": lambda t: judged(t, STDIO, "study"),
    "functional, study": lambda t: judged(t, FUNCTIONAL, "study"),
}


def table(title: str, rows: dict[str, str], paths: dict[str, Callable[[str], object]], reps: int, md: bool) -> float:
    cols = list(paths)
    worst = dict.fromkeys(cols, 0.0)
    print(f"\n{title}")
    print("| input | " + " | ".join(cols) + " |" if md else f"{'input':32s} " + " ".join(f"{c:>12.12s}" for c in cols))
    if md:
        print("|---|" + "---:|" * len(cols))
    for name, text in rows.items():
        cells = {c: worst_cpu_ms(lambda fn=fn, text=text: fn(text), reps) for c, fn in paths.items()}
        for c, v in cells.items():
            worst[c] = max(worst[c], v)
        if md:
            print(f"| {name} | " + " | ".join(f"{cells[c]:.1f}" for c in cols) + " |")
        else:
            print(f"{name:32.32s} " + " ".join(f"{cells[c]:12.1f}" for c in cols), flush=True)
    if md:
        print("| **worst** | " + " | ".join(f"**{worst[c]:.1f}**" for c in cols) + " |")
    else:
        print(f"{'worst':32s} " + " ".join(f"{worst[c]:12.1f}" for c in cols))
    return max(worst.values())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chars", type=int, default=8192)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    verifier = MathVerifier(workers=1)
    try:
        verifier.equivalent("1", "2")  # the worker's start-up is not a completion's
        a = table(
            f"completions of {args.chars} characters: CPU ms",
            completions(args.chars),
            completion_paths(verifier),
            args.reps,
            args.markdown,
        )
        b = table(
            f"program outputs of {args.chars} characters: CPU ms",
            outputs(args.chars),
            OUTPUT_PATHS,
            args.reps,
            args.markdown,
        )
    finally:
        verifier.close()
    print(f"\nworst: {max(a, b):.1f} ms of the trainer's CPU ({'within' if max(a, b) <= 50 else 'OVER'} 50 ms)")


if __name__ == "__main__":
    main()
