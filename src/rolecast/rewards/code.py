"""Code reward: extract a program from a completion, run it against tests in the sandbox, score it.

Program extraction (:func:`extract_program`), first that applies:

1. the last fenced block tagged python (```python / ```py / ```python3); a fence is 3 or more backticks
   (````python works), may follow text on its line (``Code: ```python``), and may close right after code
   on the same line (``return x```);
2. the last fenced block of any language (or none);
3. an unclosed ```python fence (a generation cut off at the token limit): everything after it;
4. bare code: from the first line starting at column 0 with ``def``, ``class``, ``import``, ``from``,
   ``async def`` or ``@`` to the end, dropping trailing lines (prose after the code) until it parses.

Test formats (:class:`CodeTests`, ``kind``):

- ``"asserts"``: MBPP. ``prelude`` (sanitized MBPP's ``test_imports``) + program + ``setup`` (MBPP's
  ``test_setup_code``), then each entry of ``asserts`` run separately.
- ``"humaneval"``: ``prompt`` + completion + ``test`` + ``check(entry_point)``. If the program defines
  ``entry_point`` itself it runs after the prompt (whose imports and helper functions it may rely on;
  its own definition replaces the prompt's stub); otherwise it is taken as the body that continues the
  prompt. The body of ``check`` is split into tests, one per top-level statement containing an
  ``assert`` (statements without one join the next test), each run with ``candidate`` bound to the
  entry point: the same verdict as ``check(entry_point)`` when all pass, and a fraction for ``partial``.
- ``"stdio"``: LiveCodeBench/DeepCoder stdin/stdout cases. Outputs match when equal after stripping
  trailing whitespace per line and surrounding blank lines, or token by token with numbers equal by
  :mod:`rolecast.rewards.compare`'s rules (an integer exactly, any other number within 1e-6 absolute or
  relative); output that is not valid UTF-8 never matches.
- ``"functional"``: LiveCodeBench functional cases: input = one JSON value per line (the arguments),
  output = the JSON of the return value of ``Solution().<fn_name>`` (or a top-level ``<fn_name>``);
  compared as JSON values (tuples as lists, numbers by the same rules). The expected outputs never enter
  the sandbox.

``grader="rllm"`` (stdio and functional tests): rLLM's LiveCodeBench runner, the reference study's grader: its
extraction, program wrapping, stdin and comparison rules instead (:mod:`rolecast.rewards.code_study`), run in the
same sandbox.

Reward: 1.0 only if every test passes; ``partial=True`` gives the fraction that passed (a test that gets
no verdict — timeout, crash, early exit — counts as failed).
"""

from __future__ import annotations

import ast
import bisect
import builtins
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rolecast.rewards import code_study, compare
from rolecast.rewards.score import MAX_TEXT_CHARS, Score, grader_error
from rolecast.sandbox import CaseResult, Job, JobResult, Limits, SandboxPool, default_pool, parse_quietly

KINDS = ("asserts", "humaneval", "stdio", "functional")
RLLM_TEST_KINDS = ("stdio", "functional")  # what the study's LiveCodeBench runner can run
GRADERS = ("rolecast", "rllm")  # rllm: the reference study's grader, rllm/rewards/code_reward.py
DEFAULT_TIMEOUT_S = {"asserts": 10.0, "humaneval": 10.0, "stdio": 6.0, "functional": 6.0}  # whole run / per case

# ----------------------------------------------------------------------------------------------------------
# extraction

_TICKS = re.compile(r"`+")
_PY_TAGS = {"python", "py", "python3", "py3"}
_CODE_START = re.compile(r"^(?:def |async def |class |import |from \S+ import |@)", re.M)
# bare code: how many prefixes are tried before the whole text is taken (each try parses up to the whole text)
_MAX_PARSES = 6


def _parse_error_line(src: str) -> int | None:
    """0 if `src` parses, else the line of its error (None when the parser names no line: nesting too deep)."""
    try:
        parse_quietly(src)
        return 0
    except SyntaxError as e:
        return e.lineno
    except ValueError:  # a null byte
        return None


def _fenced_blocks(text: str) -> list[tuple[str, str, bool]]:
    """(language tag, body, closed) of each fenced block, in order. An opening fence is a run of 3 or more
    backticks followed by an optional tag and a newline, anywhere on its line (so ``Code: ```python`` opens a
    block); it is closed by the next run of at least as many backticks, at a line start or right after code on
    the same line (``return x```). A block without a closing fence runs to the end of the text.

    Linear in the text: one pass over its runs of backticks (the regex this replaces backtracked quadratically
    on a fence followed by a long line without a newline, or on a long run of backticks)."""
    runs = [(m.start(), m.end()) for m in _TICKS.finditer(text)]
    newlines = [m.start() for m in re.finditer("\n", text)]
    out: list[tuple[str, str, bool]] = []
    k = 0
    while k < len(runs):
        start, end = runs[k]
        k += 1
        if end - start < 3:
            continue
        i = bisect.bisect_left(newlines, end)
        if i == len(newlines) or (k < len(runs) and runs[k][0] < newlines[i]):
            continue  # no newline after the fence, or a backtick before it: not an opening fence
        nl = newlines[i]
        while k < len(runs) and runs[k][1] - runs[k][0] < end - start:
            k += 1  # shorter runs of backticks are part of the body
        close = runs[k][0] if k < len(runs) else len(text)
        body = text[nl + 1 : close]
        if body and not body.endswith("\n"):
            body += "\n"
        out.append((text[end:nl].strip().lower(), body, k < len(runs)))
        k += 1
    return out


def _is_python(tag: str) -> bool:
    words = tag.split(maxsplit=1)
    return bool(words) and words[0] in _PY_TAGS


def extract_program(text: str | None) -> str | None:
    """The program a completion contains (see module docstring for the order), or None. Linear in the text but
    for the bare-code fallback, which parses at most `_MAX_PARSES` prefixes of it; a text longer than
    MAX_TEXT_CHARS holds none (the workflows read programs from every turn with this too)."""
    if not text or len(text) > MAX_TEXT_CHARS:
        return None
    blocks = _fenced_blocks(text)
    closed = [(tag, body) for tag, body, done in blocks if done]
    py = [body for tag, body in closed if _is_python(tag)]
    if py:
        return py[-1]
    if closed:
        return closed[-1][1]
    if blocks and _is_python(blocks[-1][0]):
        return blocks[-1][1]  # an unclosed ```python fence: a generation cut off at the token limit
    start = _CODE_START.search(text)
    if not start:
        return None
    return _bare_code(text[start.start() :].splitlines())


def _bare_code(lines: list[str]) -> str:
    """The longest prefix of `lines` that parses, found by dropping trailing lines (prose after the code): each
    failed parse drops everything from the line of its error on, so prose costs a parse or two, not one per
    line; after `_MAX_PARSES` failures, all of it."""
    end = len(lines)
    for _ in range(_MAX_PARSES):
        cand = "\n".join(lines[:end])
        if end == 0 or not cand.strip():
            break
        bad = _parse_error_line(cand)
        if bad == 0:
            return cand.rstrip() + "\n"
        end = min(end - 1, bad - 1) if bad else end - 1
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------------------
# tests


@dataclass(frozen=True)
class CodeTests:
    """Tests for one code problem, in any of the formats in the module docstring."""

    kind: str
    asserts: tuple[str, ...] = ()  # asserts: one test each
    prelude: str = ""  # asserts: before the program (imports the tests need)
    setup: str = ""  # asserts: after the program, before the tests
    prompt: str = ""  # humaneval: the function signature + docstring given to the model
    test: str = ""  # humaneval: source defining check(candidate)
    entry_point: str = ""  # humaneval entry point / functional function name
    inputs: tuple[str, ...] = ()  # stdio/functional
    outputs: tuple[str, ...] = ()  # stdio/functional: expected stdout / JSON return value
    timeout_s: float | None = None  # None: DEFAULT_TIMEOUT_S[kind]
    # asserts: the names the program must define for the tests (MBPP: what the reference solution defines).
    # Only matters for names of builtins (MBPP's `sum`): a program's `abs` or `sorted` is otherwise hidden from
    # the tests. None: the functions the asserts call on their left-hand side.
    provided: tuple[str, ...] | None = None
    # stdio/functional: tests that fail whatever the program does (the study's runner cannot run them: a
    # function-call test with non-text arguments or value run as a stdin program; see rolecast.tasks.datasets)
    broken: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"CodeTests.kind must be one of {KINDS}, got {self.kind!r}")
        if self.kind == "asserts" and not self.asserts:
            raise ValueError("CodeTests(kind='asserts') needs at least one entry in `asserts`")
        if self.kind == "humaneval" and not (self.test and self.entry_point):
            raise ValueError("CodeTests(kind='humaneval') needs `test` and `entry_point`")
        if self.kind in ("stdio", "functional"):
            if not self.inputs or len(self.inputs) != len(self.outputs):
                raise ValueError(
                    f"CodeTests(kind={self.kind!r}) needs matching non-empty `inputs` and `outputs` "
                    f"(got {len(self.inputs)} and {len(self.outputs)})"
                )
            if self.kind == "functional" and not self.entry_point:
                raise ValueError("CodeTests(kind='functional') needs `entry_point` (the function name)")

    @property
    def n_tests(self) -> int:
        if self.kind == "asserts":
            return len(self.asserts)
        if self.kind == "humaneval":
            return len(_split_check(self.test)[1])
        return len(self.inputs)

    # constructors from dataset rows -------------------------------------------------------------------

    @classmethod
    def mbpp(cls, row: Mapping[str, Any]) -> CodeTests:
        """MBPP full (``test_setup_code`` + ``test_list``) or sanitized (``test_imports`` + ``test_list``)."""
        tests = row.get("test_list")
        if not tests:
            raise ValueError(f"MBPP row {row.get('task_id')!r} has no test_list")
        imports = row.get("test_imports") or []
        return cls(
            kind="asserts",
            asserts=tuple(tests),
            prelude="\n".join(imports),
            setup=row.get("test_setup_code") or "",
            provided=_top_level_names(row["code"]) if row.get("code") else None,
        )

    @classmethod
    def humaneval(cls, row: Mapping[str, Any]) -> CodeTests:
        for k in ("prompt", "test", "entry_point"):
            if not row.get(k):
                raise ValueError(f"HumanEval row {row.get('task_id')!r} has no {k!r}")
        return cls(kind="humaneval", prompt=row["prompt"], test=row["test"], entry_point=row["entry_point"])

    @classmethod
    def livecodebench(cls, tests: str | Sequence[Mapping[str, Any]], fn_name: str | None = None) -> CodeTests:
        """LiveCodeBench / DeepCoder ``tests``: ``[{"input", "output", "testtype": "stdin"|"functional"}]``."""
        if isinstance(tests, str):
            tests = json.loads(tests)
        assert not isinstance(tests, str)
        if not tests:
            raise ValueError("livecodebench tests: empty list")
        types = {t.get("testtype", "stdin") for t in tests}
        if len(types) != 1 or not types <= {"stdin", "functional"}:
            raise ValueError(f"livecodebench tests: expected one testtype of stdin/functional, got {sorted(types)}")
        kind = "stdio" if types == {"stdin"} else "functional"
        if kind == "functional" and not fn_name:
            fn_name = next((t.get("metadata", {}).get("func_name") for t in tests if t.get("metadata")), None)
            if not fn_name:
                raise ValueError("livecodebench functional tests need a function name (metadata.func_name)")
        return cls(
            kind=kind,
            inputs=tuple(str(t["input"]) for t in tests),
            outputs=tuple(str(t["output"]) for t in tests),
            entry_point=fn_name or "",
        )


def _split_check(test_src: str) -> tuple[str, list[str]]:
    """(name of check's parameter, one source snippet per test) for a HumanEval `test` field."""
    try:
        mod = parse_quietly(test_src)
    except SyntaxError:
        return "", []
    check = next((n for n in mod.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None)
    if check is None or len(check.args.args) != 1:
        return "", []
    pending: list[str] = []
    tests: list[str] = []
    body = check.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        body = body[1:]  # docstring
    for stmt in body:
        pending.append(ast.unparse(stmt))
        if any(isinstance(n, ast.Assert) for n in ast.walk(stmt)):
            tests.append("\n".join(pending))
            pending = []
    if pending and tests:
        tests[-1] += "\n" + "\n".join(pending)
    return check.args.args[0].arg, tests


def _top_level_names(src: str) -> tuple[str, ...] | None:
    """Functions and classes a module defines at top level (None if it does not parse)."""
    try:
        body = parse_quietly(src).body
    except (SyntaxError, ValueError):
        return None
    return tuple(sorted(n.name for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))))


def _called_by_asserts(asserts: Sequence[str]) -> tuple[str, ...]:
    """The functions asserts test: `assert f(...) == ...` / `assert f(...)` -> f. A builtin's name counts only
    when its arguments call nothing else (`sum(10, 15)` is the candidate, `abs(root(16) - 4)` a helper)."""
    names: set[str] = set()
    for a in asserts:
        try:
            stmts = parse_quietly(a).body
        except (SyntaxError, ValueError):
            continue
        for st in stmts:
            if isinstance(st, ast.Assert):
                e = st.test.left if isinstance(st.test, ast.Compare) else st.test
                if isinstance(e, ast.Call) and isinstance(e.func, ast.Name):
                    inner = [n for arg in (*e.args, *e.keywords) for n in ast.walk(arg) if isinstance(n, ast.Call)]
                    if e.func.id not in _BUILTIN_NAMES or not any(
                        not (isinstance(n.func, ast.Name) and n.func.id in _BUILTIN_NAMES) for n in inner
                    ):
                        names.add(e.func.id)
    return tuple(sorted(names))


_BUILTIN_NAMES = frozenset(dir(builtins))


def _defines(program: str, name: str) -> bool:
    return re.search(rf"^(?:async\s+)?def\s+{re.escape(name)}\s*\(", program, re.M) is not None


def _check_grader(grader: str, tests: CodeTests | None = None) -> None:
    if grader not in GRADERS:
        raise ValueError(f"code grader must be one of {GRADERS}, got {grader!r}")
    if grader == "rllm" and tests is not None and tests.kind not in RLLM_TEST_KINDS:
        raise ValueError(
            f"the rllm code grader runs LiveCodeBench-style tests (stdio/functional), not {tests.kind!r} tests"
        )


def build_job(
    program: str,
    tests: CodeTests,
    *,
    partial: bool = False,
    timeout_s: float | None = None,
    memory_mb: int = 1024,
    grader: str = "rolecast",
    reliability_guard: bool = False,
) -> Job:
    """The sandbox job that runs `program` (already extracted) against `tests`. `grader="rllm"`: as the
    reference study's runner does (rolecast.rewards.code_study), with its `reliability_guard` if asked."""
    _check_grader(grader, tests)
    t = timeout_s or tests.timeout_s or DEFAULT_TIMEOUT_S[tests.kind]
    limits = Limits(timeout_s=t, memory_mb=memory_mb)
    if tests.kind == "asserts":
        provided = tests.provided if tests.provided is not None else _called_by_asserts(tests.asserts)
        return Job(
            mode="asserts",
            program=program,
            prelude=tests.prelude,
            setup=tests.setup,
            tests=tests.asserts,
            provided=provided,
            limits=limits,
        )
    if tests.kind == "humaneval":
        full = tests.prompt + "\n" + program if _defines(program, tests.entry_point) else tests.prompt + program
        arg, snippets = _split_check(tests.test)
        # the prompt is pinned: its helpers (HumanEval/38's encode_cyclic) serve the tests even when the
        # program redefines them
        if not snippets:  # unusual test layout: the original all-or-nothing call
            snippets, bind = [f"check({tests.entry_point})"], None
        else:
            bind = (arg, tests.entry_point)
        return Job(
            mode="asserts",
            program=full,
            setup=tests.test,
            tests=tuple(snippets),
            bind=bind,
            pinned=tests.prompt,
            provided=(tests.entry_point,),
            limits=limits,
        )
    stop = None if partial else (lambda i, c: not _case_ok(tests, i, c, grader))
    if grader == "rllm":
        wrapped = code_study.stdio_program(program) if tests.kind == "stdio" else code_study.call_program(program)
        return Job(
            mode=tests.kind,
            program=wrapped,
            inputs=tests.inputs,
            fn_name=tests.entry_point,
            limits=limits,
            stop_on=stop,
            study={"reliability_guard": reliability_guard},
            preimport=code_study.PREIMPORT,
        )
    return Job(
        mode=tests.kind, program=program, inputs=tests.inputs, fn_name=tests.entry_point, limits=limits, stop_on=stop
    )


# ----------------------------------------------------------------------------------------------------------
# comparison (rolecast.rewards.compare: both graders' rules)


def _case_ok(tests: CodeTests, i: int, c: CaseResult, grader: str = "rolecast") -> bool:
    if c.reason is not None or c.rc != 0 or i in tests.broken:
        return False
    if tests.kind == "stdio":
        return compare.stdout_matches(
            c.stdout, tests.outputs[i], compare.STUDY if grader == "rllm" else compare.ROLECAST
        )
    if grader == "rllm":
        return compare.study_json_values_match(c.value, tests.outputs[i])
    return compare.json_values_match(c.value, tests.outputs[i])


def judge(
    result: JobResult, tests: CodeTests, *, partial: bool = False, program: str | None = None, grader: str = "rolecast"
) -> Score:
    """Turn a sandbox result into a Score."""
    n = tests.n_tests if tests.kind != "humaneval" else max(1, len(_split_check(tests.test)[1]))
    if tests.kind in ("asserts", "humaneval"):
        # a load error means no test ran: no verdict counts (the judge writes none after one)
        passed = 0 if result.load_error else sum(1 for i in range(n) if result.verdicts.get(i))
        if result.load_error:
            reason = f"load_error: {result.load_error}"
        elif result.reason:
            reason = result.reason
        elif not result.done:
            reason = "no_verdict"  # exited before the tests finished (os._exit, crash, killed)
        elif result.non_plain:
            reason = "non_plain_value"  # a checked value was not plain built-in data (a forged comparison?)
        else:
            reason = None
    else:
        oks = [_case_ok(tests, i, c, grader) for i, c in enumerate(result.cases)]
        passed = sum(oks)
        bad = next((c.reason for c in result.cases if c.reason), None)
        reason = bad or (result.reason if result.reason not in (None, "stopped_early") else None)
    if passed == n:
        return Score(1.0, program, None)
    return Score(passed / n if partial else 0.0, program, reason)


# ----------------------------------------------------------------------------------------------------------
# public API


def extract_for(text: str | None, grader: str = "rolecast") -> str | None:
    """The program a grader reads from a completion: rolecast's :func:`extract_program` or the study's."""
    if grader == "rllm":
        return code_study.extract_program(text)
    return extract_program(text)


def score_program(
    program: str,
    tests: CodeTests,
    *,
    partial: bool = False,
    timeout_s: float | None = None,
    pool: SandboxPool | None = None,
    grader: str = "rolecast",
    reliability_guard: bool = False,
) -> Score:
    """Score an already-extracted program (no extraction step)."""
    job = build_job(
        program, tests, partial=partial, timeout_s=timeout_s, grader=grader, reliability_guard=reliability_guard
    )
    res = (pool or default_pool()).run(job)
    return judge(res, tests, partial=partial, program=program, grader=grader)


def score_code(
    text: str | None,
    tests: CodeTests,
    *,
    partial: bool = False,
    timeout_s: float | None = None,
    pool: SandboxPool | None = None,
    grader: str = "rolecast",
    reliability_guard: bool = False,
) -> Score:
    """Extract the program from a completion and score it against `tests` in the sandbox."""
    return score_code_many(
        [text],
        [tests],
        partial=partial,
        timeout_s=timeout_s,
        pool=pool,
        grader=grader,
        reliability_guard=reliability_guard,
    )[0]


def score_code_many(
    texts: Sequence[str | None],
    tests_list: Sequence[CodeTests],
    *,
    partial: bool = False,
    timeout_s: float | None = None,
    pool: SandboxPool | None = None,
    extract: bool = True,
    grader: str = "rolecast",
    reliability_guard: bool = False,
) -> list[Score]:
    """Score many completions in parallel through the (module-level by default) sandbox pool. `grader`:
    "rolecast" or "rllm" (the reference study's rules, stdio/functional tests only).

    One completion cannot fail the others: a text longer than MAX_TEXT_CHARS scores 0 unread ("too_long"), and an
    unexpected exception while extracting, planning, running or judging one completion scores it 0 with reason
    "grader_error" and the exception (rolecast.scoring logs it and stops the run when most of a batch fails so).
    Completions whose programs are the same text against equal tests are graded by one sandbox run (each gets
    its own copy of that score), as rolecast.scoring scores a repeated completion once.
    Bad arguments (an unknown grader, tests the grader cannot run) still raise."""
    if len(texts) != len(tests_list):
        raise ValueError(f"score_code_many: {len(texts)} texts but {len(tests_list)} test sets")
    _check_grader(grader)
    for tests in tests_list:
        _check_grader(grader, tests)
    scores: list[Score | None] = [None] * len(texts)
    programs: list[str | None] = [None] * len(texts)
    for i, text in enumerate(texts):
        if not extract:
            programs[i] = text
        elif text is not None and len(text) > MAX_TEXT_CHARS:
            scores[i] = Score(0.0, None, "too_long")
        else:
            try:
                programs[i] = extract_for(text, grader)
            except Exception as e:  # noqa: BLE001 - the belt: one completion's text never fails the batch
                scores[i] = grader_error(e)
    jobs: dict[int, Job] = {}
    first: dict[tuple[str, CodeTests], int] = {}  # (program, tests) -> the completion whose job grades it
    same: dict[int, int] = {}  # a completion -> the earlier one with the same program and tests
    for i, program in enumerate(programs):
        if scores[i] is not None or not (program and program.strip()):
            continue
        key = (program, tests_list[i])
        if key in first:  # GRPO groups repeat programs: the same program against the same tests runs once
            same[i] = first[key]
            continue
        first[key] = i
        try:
            jobs[i] = build_job(
                program,
                tests_list[i],
                partial=partial,
                timeout_s=timeout_s,
                grader=grader,
                reliability_guard=reliability_guard,
            )
        except Exception as e:  # noqa: BLE001 - as above (planning parses the program)
            scores[i] = grader_error(e, program)
    results = (pool or default_pool()).run_many(list(jobs.values()), return_exceptions=True) if jobs else []
    for i, res in zip(jobs, results, strict=True):
        try:
            if isinstance(res, BaseException):
                raise res
            scores[i] = judge(res, tests_list[i], partial=partial, program=programs[i], grader=grader)
        except Exception as e:  # noqa: BLE001 - as above (running and judging read what the program wrote)
            scores[i] = grader_error(e, programs[i])
    for i, j in same.items():
        scores[i] = scores[j]  # frozen: one Score for both
    return [s if s is not None else Score(0.0, None, "no_code") for s in scores]
