"""What a sandbox run is given (:class:`Job`, :class:`Limits`) and what it reports back (:class:`JobResult`,
:class:`CaseResult`, :class:`RunResult`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 10.0  # wall clock: the whole run (asserts) or one test case (stdio/functional)
    memory_mb: int = 1024  # RLIMIT_AS of the program's process
    nproc: int = 32  # processes+threads of the slot's uid (root mode); extra ones over current (user mode)
    fsize_mb: int = 16  # largest file the program may write
    tmpfs_mb: int = 64  # size of the private /tmp (bwrap mode)
    output_bytes: int = 1 << 20  # per stream; more kills the run (reason "output_limit")
    nofile: int = 256


@dataclass
class RunResult:
    """Outcome of one plain program run (:func:`rolecast.sandbox.run_python`)."""

    returncode: int | None  # negative: killed by that signal; None: never ran
    stdout: str  # decoded UTF-8 with replacement characters for invalid bytes
    stderr: str
    timed_out: bool
    reason: str | None = (
        None  # None = ran to completion; else "timeout", "output_limit", "cpu_limit", "sandbox_error: ..."
    )
    stdout_bytes: bytes = b""


@dataclass
class CaseResult:
    rc: int | None
    stdout: bytes
    stderr: bytes
    value: str | None  # functional mode: the JSON the function returned
    reason: str | None


@dataclass
class JobResult:
    """What the harness reported for one job."""

    mode: str
    verdicts: dict[int, bool] = field(default_factory=dict)  # asserts: test index -> passed
    load_error: str | None = None  # asserts: the program (or setup) raised this while loading
    non_plain: set[int] = field(
        default_factory=set
    )  # asserts: tests failed for a value that is not plain built-in data
    done: bool = False  # the harness reached its end (asserts: after the last test)
    cases: list[CaseResult] = field(default_factory=list)  # stdio/functional, in order
    stdout: bytes = b""
    stderr: bytes = b""
    returncode: int | None = None
    reason: str | None = None  # "timeout", "output_limit", "sandbox_error: ...", ...
    wall_s: float = 0.0


@dataclass
class Job:
    """One sandbox run. `mode`: "asserts" | "stdio" | "functional"."""

    mode: str
    program: str
    prelude: str = ""  # asserts: run before the program (imports the tests need)
    setup: str = ""  # asserts: run after the program, before the tests
    tests: Sequence[str] = ()  # asserts: each source snippet is one test
    bind: tuple[str, str] | None = None  # asserts: run tests with name bind[0] = program's bind[1]
    pinned: str = ""  # asserts: trusted code (a HumanEval prompt) whose names the tests get instead of the program's
    provided: tuple[str, ...] | None = None  # asserts: names the program provides to the tests (its functions);
    # a program's definition of a builtin's name outside this list is hidden from the tests. None: not known.
    inputs: Sequence[str] = ()  # stdio/functional: one stdin text / JSON-lines argument list per case
    fn_name: str = ""  # functional
    limits: Limits = field(default_factory=Limits)
    stop_on: Any = None  # stdio/functional: callable(case_index, CaseResult) -> bool, True kills the rest
    # stdio/functional: run each case as the reference study's runner does (rolecast.rewards.code_study), with
    # these options ({"reliability_guard": bool}); None: as a plain script / a plain call
    study: dict[str, Any] | None = None
    preimport: Sequence[str] = ()  # modules the harness imports before it forks the cases (trusted, stdlib+allowed)
