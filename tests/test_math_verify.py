"""Math answer extraction and equivalence (rolecast.rewards.math)."""

from __future__ import annotations

import json
import os
import re
import threading
import time

import pytest

from rolecast.rewards.math import (
    MAX_ANSWER_CHARS,
    WORKER_MEMORY_BYTES,
    MathVerifier,
    extract_answer,
    gsm8k_gold,
    last_boxed,
    verify_in_process,
)
from rolecast.rewards.score import MAX_TEXT_CHARS, Score


@pytest.fixture(scope="module")
def verifier():
    v = MathVerifier(workers=1, timeout_s=3.0)
    yield v
    v.close()


# ---------------------------------------------------------------------------------------------- extraction


@pytest.mark.parametrize(
    "text, want",
    [
        (r"so $x=\boxed{\frac{1}{\sqrt{2}}}$.", r"\frac{1}{\sqrt{2}}"),
        (r"first \boxed{3}, finally \boxed{4}", "4"),  # the last box wins
        (r"\boxed{\{1,2\}} done", r"\{1,2\}"),  # escaped braces do not close the box
        (r"\fbox{a{b}c}", "a{b}c"),
        (r"The answer is \boxed 5.", "5"),
        (r"\boxed{7} then a truncated \boxed{8", "7"),  # an unclosed box is not an answer
        ("work...\n#### 1,000", "1,000"),  # GSM8K format when there is no box
        (r"\boxed{2}" + "\n#### 3", "2"),  # a box beats ####
        ("it is 3/4, no wait, 12.5 apples", "12.5"),  # last-number fallback
        ("total: 1,234 dollars", "1,234"),
        ("x = -7", "-7"),
        ("no numbers here", None),
        ("", None),
        (None, None),
    ],
)
def test_extract_answer(text, want):
    assert extract_answer(text) == want


def test_last_number_fallback_can_be_disabled():
    assert extract_answer("the answer is 42", last_number=False) is None
    assert extract_answer(r"the answer is \boxed{42}", last_number=False) == "42"
    assert extract_answer("x\n#### 42", last_number=False) == "42"


def test_gsm8k_gold_strips_thousands_commas():
    assert gsm8k_gold("blah <<2*3=6>>6\n#### 1,200") == "1200"
    assert gsm8k_gold("no final line") is None


# ---------------------------------------------------------------------------------------------- equivalence

EQUIVALENT = [
    ("1/2", "0.5"),
    (r"\frac{1}{2}", "0.5"),
    (r"\frac12", "1/2"),
    (r"\dfrac{1}{2}", r"\frac{1}{2}"),
    (r"\tfrac{3}{4}", "0.75"),
    ("1000", "1,000"),
    ("1000", "1{,}000"),
    (r"10\%", "10"),  # documented: a percentage equals the number ...
    (r"10\%", "0.1"),  # ... and the fraction
    ("5", r"5\text{ cm}"),
    ("5", "5 cm"),
    ("5", r"\$5"),
    ("90", r"90^\circ"),
    ("(1,2]", "(1, 2]"),
    (r"(-\infty, 3)", r"(-\infty,3)"),
    (r"\{3,4\}", r"\{4,3\}"),  # sets are unordered
    (r"\frac{\sqrt{2}}{2}", r"\sqrt{2}/2"),
    ("3", "3.0"),
    ("3", "x=3"),
    (r"\text{(A)}", "A"),
    ("10^{10}", "10000000000"),
    ("2x+3", "3+2x"),
]

DIFFERENT = [
    ("2", "3"),
    ("10", "0.1"),  # only a percentage is read both ways
    ("(1,2]", "[1,2]"),
    ("(1,2)", "(1,2]"),
    ("(3,4)", "(4,3)"),  # ordered pairs are ordered
    ("1/3", "0.333"),  # floats match to 6 decimals, not 3
    ("12", "12.000001"),
    (r"\pi", "3.14159"),
    ("A", "B"),
    ("2x+3", "2x-3"),
]


@pytest.mark.parametrize("gold, pred", EQUIVALENT)
def test_equivalent_forms(verifier, gold, pred):
    ok, reason = verifier.equivalent(gold, pred)
    assert ok and reason is None, (gold, pred, reason)


@pytest.mark.parametrize("gold, pred", DIFFERENT)
def test_different_forms(verifier, gold, pred):
    ok, reason = verifier.equivalent(gold, pred)
    assert not ok, (gold, pred)


def test_in_process_agrees_with_worker_on_the_table():
    got = verify_in_process(EQUIVALENT + DIFFERENT)
    assert [ok for ok, _ in got] == [True] * len(EQUIVALENT) + [False] * len(DIFFERENT)


def test_score_reasons_are_counted():
    v = MathVerifier(workers=1)
    try:
        assert v.score("1/2", r"so \boxed{0.5}").reward == 1.0
        s = v.score("1/2", r"\boxed{0.25}")
        assert (s.reward, s.answer, s.reason) == (0.0, "0.25", None)
        s = v.score("1/2", "I give up")
        assert (s.reward, s.reason) == (0.0, "no_answer")
        s = v.score("1/2", r"\boxed{\frac{}{}}")
        assert s.reward == 0.0
        assert v.counts["correct"] == 1 and v.counts["wrong"] >= 1 and v.counts["no_answer"] == 1
    finally:
        v.close()


def test_hanging_expression_times_out_and_scores_zero(verifier):
    verifier.equivalent("1", "2")  # warm the worker so the limit measures only the comparison
    t = time.monotonic()
    s = verifier.score("1", r"\boxed{9^{9^{9^{9}}}}")
    took = time.monotonic() - t
    assert (s.reward, s.reason) == (0.0, "timeout")
    assert took < verifier.timeout_s + 1.0
    # the killed worker is replaced transparently
    assert verifier.score("1/2", r"\boxed{0.5}").reward == 1.0
    assert verifier.counts["timeout"] >= 1


def test_works_from_a_non_main_thread(verifier):
    out = []
    th = threading.Thread(target=lambda: out.append(verifier.score("1/2", r"\boxed{\dfrac{2}{4}}")))
    th.start()
    th.join(60)
    assert out and out[0].reward == 1.0


def test_many_threads_share_the_workers():
    v = MathVerifier(workers=2)
    try:
        golds = [str(i) for i in range(12)]
        texts = [rf"\boxed{{{i if i % 3 else i + 1}}}" for i in range(12)]
        rewards = [s.reward for s in v.score_many(golds, texts)]
        assert rewards == [0.0 if i % 3 == 0 else 1.0 for i in range(12)]
    finally:
        v.close()


def test_in_process_refuses_other_threads():
    err = []

    def go():
        try:
            verify_in_process([("1", "1")])
        except RuntimeError as e:
            err.append(e)

    th = threading.Thread(target=go)
    th.start()
    th.join()
    assert err


# ---------------------------------------------------------------------------------------------- datasets


def _gold_answers(data_dir):
    golds: set[str] = set()
    for name in ("gsm8k/test", "gsm8k/train"):
        for line in open(data_dir / f"{name}.jsonl"):
            g = gsm8k_gold(json.loads(line)["answer"])
            assert g, line[:200]
            golds.add(g)
    empty = []
    for name in ("math/test", "math/train"):
        for i, line in enumerate(open(data_dir / f"{name}.jsonl")):
            b = last_boxed(json.loads(line)["solution"])
            assert b is not None, (name, i)
            if b:
                golds.add(b)
            else:
                empty.append((name, i))
    # upstream MATH has two train solutions with an empty \boxed{} (the loader skips them, counted)
    assert empty == [("math/train", 5529), ("math/train", 5531)]
    for line in open(data_dir / "math500/test.jsonl"):
        golds.add(json.loads(line)["answer"])
    for line in open(data_dir / "aime2024/test.jsonl"):
        golds.add(str(json.loads(line)["Answer"]))
    return sorted(golds)


def test_every_reference_answer_matches_itself(data_dir):
    """~4,800 distinct gold answers (identical strings give identical verdicts), each through parse +
    verify with no string shortcut, in this main thread."""
    golds = _gold_answers(data_dir)
    assert len(golds) > 4000
    results = verify_in_process([(g, g) for g in golds])
    bad = [(g, r) for g, r in zip(golds, results, strict=True) if not r[0]]
    assert bad == []


# ---------------------------------------------------------------------------------------------- hostile text


def test_the_worker_has_limits_of_its_own(verifier):
    """Its own address space (a huge power fails there) and the OOM killer's first choice."""
    verifier.equivalent("1", "2")  # starts the worker
    (worker,) = [w for w in verifier._free if w is not None]
    limits = open(f"/proc/{worker.proc.pid}/limits").read()
    assert re.search(rf"Max address space\s+{WORKER_MEMORY_BYTES}\s+{WORKER_MEMORY_BYTES}\s", limits), limits
    assert re.search(r"Max core file size\s+0\s+0\s", limits), limits
    assert open(f"/proc/{worker.proc.pid}/oom_score_adj").read().strip() == "1000"


def test_oversized_texts_and_answers_are_not_compared(verifier):
    assert verifier.score("1", "1" * (MAX_TEXT_CHARS + 1)) == Score(0.0, None, "too_long")
    s = verifier.score("1", r"\boxed{" + "1" * (MAX_ANSWER_CHARS + 1) + "}")
    assert (s.reward, s.reason) == (0.0, "answer_too_long")
    assert verifier.score("1", r"\boxed{" + " " * MAX_ANSWER_CHARS + "1}").reward == 1.0  # stripped: 1


def test_a_dead_worker_is_named_and_replaced(verifier):
    verifier.equivalent("1", "2")
    (worker,) = [w for w in verifier._free if w is not None]
    os.kill(worker.proc.pid, 9)
    assert verifier.equivalent("1/2", "0.25") == (False, "worker_died")
    assert verifier.equivalent("1/2", "0.5") == (True, None)


@pytest.mark.parametrize("grader", ["rolecast", "rllm"])
def test_study_and_rolecast_answers_in_the_same_workers(verifier, grader):
    """The study's rules run in the verifier's workers too: 3+4 is 7 for rolecast, not for the study (it compares
    the boxed answer, an integer gold needs an integer answer)."""
    assert verifier.score("7", r"\boxed{3+4}", grader).reward == (1.0 if grader == "rolecast" else 0.0)
    assert verifier.score(r"\frac{1}{2}", r"\boxed{\dfrac12}", grader).reward == 1.0
