"""Math answer extraction and equivalence checking.

Extraction (:func:`extract_answer`) takes, in order of preference:

1. the content of the last ``\\boxed{...}`` / ``\\fbox{...}`` (nested braces are matched; the brace-less
   form ``\\boxed 5`` takes the next token);
2. the GSM8K final line ``#### x``;
3. (``last_number=True``, the default) the last number in the text — integers, decimals, ``1,000``-style
   thousands, simple fractions ``a/b``. Models that forget the box still get graded on what they said
   last; pass ``last_number=False`` for a strict format reward.

Equivalence uses ``math_verify`` (parse + verify on both sides, each wrapped as ``\\boxed{...}`` so a bare
gold string such as ``\\frac{1}{2}`` is read as LaTeX). Conventions this inherits, and that our tests pin:

- ``1/2``, ``0.5``, ``\\frac12``, ``\\dfrac{1}{2}`` are equal; ``1,000`` equals ``1000``.
- A percentage is lenient: ``10\\%`` equals both ``10`` and ``0.1`` (the model may give the number or the
  fraction), but ``10`` and ``0.1`` are different.
- Text units are dropped: ``5\\text{ cm}``, ``5 cm``, ``\\$5`` and ``90^\\circ`` equal ``5`` / ``90``.
- Intervals compare exactly (``(1,2]`` differs from ``[1,2]``); ordered tuples are ordered, sets are not.
- Floats match to 6 decimals (math_verify's ``float_rounding``): ``1/3`` vs ``0.333`` is wrong.

math_verify guards itself with ``signal.alarm``, which only works in the main thread and cannot interrupt
a long C-level computation (a huge integer power inside sympy). So by default every comparison runs in a
persistent worker process with math_verify's own timeouts off, and we enforce the limit from outside: a
comparison that overruns kills the worker (a fresh one starts on the next call) and scores 0 with reason
``"timeout"``. Measured cost: ~0.2 ms of IPC per comparison on top of math_verify's own work (~1-5 ms),
against ~1.5 s to start a worker, paid once and again only after a timeout.

The same workers run rLLM's grader, the reference study's (``grader="rllm"``, :mod:`rolecast.rewards.math_study`), whose sympy
step evaluates the answer as a Python expression (``[0]*10**9``, ``9**9**9``): never in the trainer's process.
A worker has its own limits (1.5 GB of address space, no core file) and is the OOM killer's first choice, so a
huge power fails there with ``error:MemoryError`` or ``timeout``.

Bounds on what the trainer itself does with a completion (docs/sandbox.md, "Host-side parsers"): a completion
longer than :data:`~rolecast.rewards.score.MAX_TEXT_CHARS` scores 0 (``too_long``) unread; extraction is linear in
the text; an answer longer than :data:`MAX_ANSWER_CHARS` scores 0 (``answer_too_long``) without a comparison.
"""

from __future__ import annotations

import json
import logging
import os
import re
import resource
import select
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import math_verify

from rolecast.core.text import last_boxed
from rolecast.rewards.math_study import study_equivalent, study_extract
from rolecast.rewards.score import MAX_TEXT_CHARS, Score

log = logging.getLogger(__name__)
logging.getLogger("math_verify").setLevel(logging.ERROR)  # it warns once when timeouts are off

DEFAULT_TIMEOUT_S = 5.0
GRADERS = ("rolecast", "rllm")  # rllm: the reference study's grader, rllm/rewards/math_reward.py
# the longest answer compared (the longest gold answer of MATH is 159 characters): a longer one scores 0 unread
MAX_ANSWER_CHARS = 1024
WORKER_MEMORY_BYTES = 1536 << 20  # a worker's address space (it starts at ~65 MB)

# ----------------------------------------------------------------------------------------------------------
# extraction


_GSM_RE = re.compile(r"^\s*####\s*(.+?)\s*$", re.MULTILINE)  # for gold answers (trusted); completions: _gsm_answer
_GSM_MARK = re.compile(r"^[^\S\n]*####", re.MULTILINE)
_SPACE = re.compile(r"\s*")
_NUM_RE = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?(?:\s*/\s*\d+)?|-?\.\d+")


def extract_answer(text: str | None, *, last_number: bool = True) -> str | None:
    """The final answer a completion states (see module docstring for the order), or None. Linear in the text."""
    if not text:
        return None
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    gsm = _gsm_answer(text)
    if gsm is not None:
        return gsm
    if last_number:
        nums = _NUM_RE.findall(text)
        if nums:
            return re.sub(r"\s+", "", nums[-1])
    return None


def _gsm_answer(text: str) -> str | None:
    """The last answer ``_GSM_RE.findall(text)`` would give (``^\\s*####\\s*(.+?)\\s*$``, multiline), in linear time:
    that regex backtracks quadratically over long runs of whitespace (8,192 newlines: 50 ms, a `####` line with
    8,192 spaces: 150 ms). Each `####` at the start of a line (after whitespace) that the previous answer did not
    consume: the rest of the line after the whitespace that follows it (which may span lines), right-stripped."""
    last = None
    pos = 0
    n = len(text)
    for m in _GSM_MARK.finditer(text):
        if m.start() < pos:
            continue  # the previous answer's line began with this `####`
        r = _after_space(text, m.end())
        if r == n:  # only whitespace after it: the regex takes its last character that is not a newline
            tail = text[m.end() :].rstrip("\n")
            return tail[-1] if tail else last
        eol = text.find("\n", r)
        last = text[r : n if eol < 0 else eol].rstrip()
        t = r + len(last)
        u = _after_space(text, t)
        pos = n if u == n else text.rfind("\n", t, u)
    return last


def _after_space(text: str, i: int) -> int:
    """The end of the run of whitespace (newlines too) that starts at text[i]."""
    m = _SPACE.match(text, i)
    return m.end() if m else i


def gsm8k_gold(answer_field: str) -> str | None:
    """The gold answer of a GSM8K row: what follows the final ``####``."""
    found = _GSM_RE.findall(answer_field)
    return found[-1].replace(",", "") if found else None


# ----------------------------------------------------------------------------------------------------------
# equivalence (in-process core, used by the worker and by main-thread batch checks)


def _norm(s: str) -> str:
    return re.sub(r"\s+", "", s)


def _compare(gold: str, pred: str, use_signal_timeout: float | None) -> tuple[bool, str | None]:
    """(equal, reason). Runs math_verify in this process; `use_signal_timeout` only in a main thread."""
    t = int(use_signal_timeout) if use_signal_timeout else None
    g = math_verify.parse("\\boxed{" + gold + "}", parsing_timeout=t)
    if not g:
        return False, "gold_parse_error"
    p = math_verify.parse("\\boxed{" + pred + "}", parsing_timeout=t)
    if not p:
        return False, "parse_error"
    return bool(math_verify.verify(g, p, timeout_seconds=t)), None


def verify_in_process(
    pairs: Iterable[tuple[str, str]], timeout_s: float = DEFAULT_TIMEOUT_S
) -> list[tuple[bool, str | None]]:
    """Compare (gold, pred) pairs right here, with math_verify's own signal timeouts.

    Only for the main thread (bulk checks, tests); the trainer uses :class:`MathVerifier`.
    No string fast path: every pair goes through parse + verify.
    """
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("verify_in_process uses signal.alarm and must run in the main thread; use MathVerifier")
    return [_compare(g, p, timeout_s) for g, p in pairs]


def _compare_as(grader: str, gold: str, pred: str) -> tuple[bool, str | None]:
    """(equal, reason) by `grader`'s rules, in this process (the worker's)."""
    if grader == "rllm":
        return study_equivalent(gold, pred), None
    return _compare(gold, pred, None)


def _limit_worker() -> None:
    """A worker's own limits: its address space (a huge power or a list of 10**9 items fails with MemoryError
    here), no core file, and the OOM killer's first choice. Best effort: what the machine refuses is skipped."""
    for limit, value in ((resource.RLIMIT_AS, WORKER_MEMORY_BYTES), (resource.RLIMIT_CORE, 0)):
        try:
            resource.setrlimit(limit, (value, value))
        except (ValueError, OSError):
            pass
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass


def _worker_main() -> None:
    """Loop of the worker process: one JSON request per stdin line, one JSON reply per stdout line."""
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing but replies may reach the protocol stream
    _limit_worker()
    out.write('{"ready": true}\n')
    out.flush()
    for line in sys.stdin:
        req = json.loads(line)
        try:
            ok, reason = _compare_as(req.get("grader", "rolecast"), req["gold"], req["pred"])
        except Exception as e:  # noqa: BLE001 - sympy raises anything; a crash must not lose the worker
            ok, reason = False, f"error:{type(e).__name__}"
        out.write(json.dumps({"ok": ok, "reason": reason}) + "\n")
        out.flush()


class _Worker:
    def __init__(self) -> None:
        src = str(Path(__file__).resolve().parents[2])  # so the child imports this same rolecast
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from rolecast.rewards.math import _worker_main; _worker_main()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None  # both are PIPEs
        self._stdin, self._stdout = self.proc.stdin, self.proc.stdout
        self._buf = b""
        self.died = False  # the worker ended (a crash, or killed for memory) rather than overran
        if self._readline(120.0) is None:
            self.kill()
            raise RuntimeError("math verifier worker did not start (is math-verify installed?)")

    def _readline(self, timeout: float) -> bytes | None:
        deadline = time.monotonic() + timeout
        fd = self._stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            r, _, _ = select.select([fd], [], [], left)
            if r:
                chunk = os.read(fd, 65536)
                if not chunk:
                    self.died = True
                    return None
                self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def call(self, gold: str, pred: str, timeout: float, grader: str = "rolecast") -> tuple[bool, str | None] | None:
        """The comparison, or None when the worker overran or died (the caller then kills it)."""
        try:
            self._stdin.write((json.dumps({"gold": gold, "pred": pred, "grader": grader}) + "\n").encode())
            self._stdin.flush()
        except (BrokenPipeError, OSError):
            self.died = True
            return None
        line = self._readline(timeout)
        if line is None:
            return None
        rep = json.loads(line)
        return rep["ok"], rep["reason"]

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, 9)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()


class MathVerifier:
    """Thread-safe math answer checker backed by `workers` persistent worker processes.

    ``counts`` tallies every outcome reason ("correct", "wrong", "no_answer", "timeout", "parse_error",
    "gold_parse_error", "error:...") for logging.
    """

    def __init__(self, workers: int = 1, timeout_s: float = DEFAULT_TIMEOUT_S, last_number: bool = True):
        self.timeout_s = timeout_s
        self.last_number = last_number
        self.counts: Counter[str] = Counter()
        self.workers = max(1, workers)
        self._free: list[_Worker | None] = [None] * max(1, workers)
        self._cv = threading.Condition()
        self._count_lock = threading.Lock()

    def _count(self, reason: str) -> None:
        with self._count_lock:
            self.counts[reason] += 1

    def equivalent(self, gold: str, pred: str, grader: str = "rolecast") -> tuple[bool, str | None]:
        """(equal, reason) for two answer strings by `grader`'s rules; reason is None for a plain right/wrong
        verdict, else "answer_too_long", "timeout", "worker_died", "parse_error", "error:<exception>", ..."""
        if grader not in GRADERS:
            raise ValueError(f"math grader must be one of {GRADERS}, got {grader!r}")
        if grader == "rolecast" and _norm(gold) == _norm(pred):
            return True, None  # identical strings need no sympy
        if grader == "rllm" and gold == pred and "\\boxed" not in gold:
            return True, None  # the study's first rule: equal after its normalisation
        if len(pred) > MAX_ANSWER_CHARS:
            return False, "answer_too_long"
        with self._cv:
            while not self._free:
                self._cv.wait()
            w = self._free.pop()
        try:
            if w is None:
                w = _Worker()
            res = w.call(gold, pred, self.timeout_s, grader)
            if res is None:
                died = w.died
                w.kill()  # hung in sympy or died: a fresh worker starts next time
                w = None
                return False, "worker_died" if died else "timeout"
            return res
        finally:
            with self._cv:
                self._free.append(w)
                self._cv.notify()

    def extract(self, text: str | None, grader: str = "rolecast") -> str | None:
        """The answer `grader` reads from a completion (rolecast's with this verifier's `last_number`)."""
        return study_extract(text) if grader == "rllm" else extract_answer(text, last_number=self.last_number)

    def score(self, gold: str, text: str | None, grader: str = "rolecast") -> Score:
        if text is not None and len(text) > MAX_TEXT_CHARS:
            self._count("too_long")
            return Score(0.0, None, "too_long")
        pred = self.extract(text, grader)
        if pred is None:
            self._count("no_answer")
            return Score(0.0, None, "no_answer")
        ok, reason = self.equivalent(gold, pred, grader)
        self._count(reason or ("correct" if ok else "wrong"))
        return Score(1.0 if ok else 0.0, pred, reason)

    def score_many(self, golds: Sequence[str], texts: Sequence[str | None], grader: str = "rolecast") -> list[Score]:
        if len(golds) != len(texts):
            raise ValueError(f"score_many: {len(golds)} gold answers but {len(texts)} texts")
        n = self.workers
        if n <= 1 or len(golds) <= 1:
            return [self.score(g, t, grader) for g, t in zip(golds, texts, strict=True)]
        with ThreadPoolExecutor(n) as ex:
            return list(ex.map(self.score, golds, texts, [grader] * len(golds)))

    def close(self) -> None:
        with self._cv:
            for w in self._free:
                if w is not None:
                    w.kill()
            self._free = [None] * self.workers


_DEFAULT: MathVerifier | None = None
_DEFAULT_LOCK = threading.Lock()


def default_verifier() -> MathVerifier:
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = MathVerifier(workers=min(2, os.cpu_count() or 1))
        return _DEFAULT


def score_math(text: str | None, gold: str, *, last_number: bool = True, grader: str = "rolecast") -> Score:
    """Score one completion against a gold answer string with the shared verifier (`grader`: "rolecast" or "rllm",
    the reference study's rules, rolecast.rewards.math_study)."""
    v = default_verifier()
    if grader == "rllm" or last_number == v.last_number:
        return v.score(gold, text, grader)
    if text is not None and len(text) > MAX_TEXT_CHARS:
        return Score(0.0, None, "too_long")
    pred = extract_answer(text, last_number=last_number)
    if pred is None:
        return Score(0.0, None, "no_answer")
    ok, reason = v.equivalent(gold, pred)
    return Score(1.0 if ok else 0.0, pred, reason)
