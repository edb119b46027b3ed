"""The belt above the graders (issue 33): an exception while scoring one text scores that text 0 with reason
`grader_error`, is kept on its episode, logged once per episode and counted in the step's metrics; the same
exception on more than half of a batch (and two or more texts) is a grader bug and stops the run (GraderBug).

The failing grader here is a scripted task (its verifier raises on the texts a test names), because the real
graders no longer raise on any text (tests/test_hostile_fuzz.py); score_code_many's own containment is checked
with tests whose judging raises for one problem."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from rolecast.core.episode import AnswerClaim, Episode, Turn
from rolecast.core.metric_keys import grader_errors_key
from rolecast.rewards.code import CodeTests, score_code_many
from rolecast.rewards.score import GRADER_ERROR, MAX_TEXT_CHARS, Score, grader_error
from rolecast.rollout.engine import RolloutStats
from rolecast.sandbox import SandboxPool
from rolecast.scoring import GraderBug, score_batch, score_episodes
from rolecast.tasks import make_task
from rolecast.tasks.base import Problem, Task
from rolecast.training.step_metrics import rollout_metrics


class Picky(Task):
    """Right answer "4"; raises `exc` on any text in `bad`. `batch_raises`: score_many itself raises whenever a
    bad text is in the batch (a task without its own per-text belt)."""

    name = "picky"

    def __init__(self, bad: dict[str, Exception], batch_raises: bool = False):
        self.bad, self.batch_raises = bad, batch_raises

    def score(self, problem: Problem, text: str | None) -> Score:
        if text in self.bad:
            raise self.bad[text]
        return Score(float(text == "4"), text)

    def score_many(self, problems: Sequence[Problem], texts: Sequence[str | None]) -> list[Score]:
        if self.batch_raises:
            return [self.score(p, t) for p, t in zip(problems, texts, strict=True)]
        out = []
        for p, t in zip(problems, texts, strict=True):
            try:
                out.append(self.score(p, t))
            except Exception as e:  # noqa: BLE001 - the task contains it itself, as the real graders do
                out.append(grader_error(e, t))
        return out


PROBLEM = Problem("q", "2 + 2", "4")


def episode(sample: int, final: str, claim: str | None = None) -> Episode:
    turns = [Turn("generator", "generator", "p", [1], [2], [0.0], final, "stop", claim=AnswerClaim(claim or final))]
    return Episode("q", sample, turns, final_text=final)


@pytest.mark.parametrize("batch_raises", [False, True])
def test_one_texts_exception_scores_it_zero_and_the_rest_normally(caplog, batch_raises):
    task = Picky({"boom": RecursionError("maximum recursion depth exceeded")}, batch_raises=batch_raises)
    eps = [episode(0, "4"), episode(1, "boom"), episode(2, "5"), episode(3, "4", claim="boom")]
    with caplog.at_level(logging.ERROR, logger="rolecast.scoring"):
        score_episodes(eps, {"q": PROBLEM}, task)
    assert [ep.reward for ep in eps] == [1.0, 0.0, 0.0, 1.0]
    assert eps[1].metadata["score_reason"] == GRADER_ERROR
    assert [ep.turns[0].claim.correct for ep in eps] == [True, False, False, False]
    for i in (1, 3):  # the final text of one, a claim of the other
        (fault,) = eps[i].metadata[GRADER_ERROR]
        assert fault.startswith("RecursionError: maximum recursion depth exceeded (at ")
    assert GRADER_ERROR not in eps[0].metadata and GRADER_ERROR not in eps[2].metadata
    logged = [r.getMessage() for r in caplog.records if GRADER_ERROR in r.getMessage()]
    assert len(logged) == 2  # once per episode, though episode 1's text was both its final text and its claim
    assert "sample 1" in logged[0] and "RecursionError" in logged[0] and "sample 3" in logged[1]
    assert rollout_metrics(RolloutStats(), eps, None)[grader_errors_key()] == 2


@pytest.mark.parametrize(
    "texts, raises",
    [
        (["a", "b", "c", "4"], True),  # 3 of 4 texts, one exception type: a grader bug
        (["a", "b", "4", "5"], False),  # 2 of 4: exactly half is not most
        (["a"], False),  # one text of one: scored 0, not a bug (at least two are needed)
        (["a", "b"], True),
        (["a", "x", "4"], False),  # 2 of 3 failed, but with different exceptions: each one is a minority
    ],
)
def test_the_same_exception_on_most_of_a_batch_stops_the_run(texts, raises):
    task = Picky({"a": KeyError("gold"), "b": KeyError("gold"), "c": KeyError("gold"), "x": ValueError("x")})
    if raises:
        with pytest.raises(GraderBug, match=r"picky: scoring raised KeyError on \d of \d texts.*the first: KeyError"):
            score_batch(task, [PROBLEM] * len(texts), texts)
    else:
        scores = score_batch(task, [PROBLEM] * len(texts), texts)
        assert [s.reason for s in scores] == [GRADER_ERROR if t in task.bad else None for t in texts]


@dataclass(frozen=True)
class BrokenJudging(CodeTests):
    """Tests whose judging raises (as a bug in reading one problem's tests would)."""

    @property
    def n_tests(self) -> int:
        raise ZeroDivisionError("no tests")


def test_score_code_many_contains_one_problems_exception():
    good = CodeTests(kind="asserts", asserts=("assert add(1, 2) == 3",))
    broken = BrokenJudging(kind="asserts", asserts=("assert add(1, 2) == 3",))
    text = "```python\ndef add(a, b):\n    return a + b\n```"
    with SandboxPool(1) as pool:
        scores = score_code_many([text, text, text], [good, broken, good], pool=pool)
    assert [(s.reward, s.reason) for s in scores] == [(1.0, None), (0.0, GRADER_ERROR), (1.0, None)]
    assert scores[1].fault is not None and scores[1].fault.exception == "ZeroDivisionError"
    assert scores[1].answer == "def add(a, b):\n    return a + b\n"  # what it read is still logged


def test_an_oversized_completion_is_not_read():
    good = CodeTests(kind="asserts", asserts=("assert add(1, 2) == 3",))
    text = "```python\ndef add(a, b):\n    return a + b\n```" + " " * MAX_TEXT_CHARS
    assert score_code_many([text], [good], pool=None) == [Score(0.0, None, "too_long")]


def test_the_study_graders_sympy_step_never_runs_in_the_trainer():
    """The study's rule evaluates an answer as a Python expression with sympy; at 879f012 it did so in the
    trainer's own process, where `9**9**9` ran for minutes (a run of 40 s was stopped). Now in the verifier's
    worker: a timeout after 5 s."""
    task = make_task("math", grader="rllm")
    t = time.monotonic()
    score = task.score(Problem("q", "?", "\\frac{1}{2}"), "\\boxed{9**9**9}")
    assert (score.reward, score.reason) == (0.0, "timeout")
    assert time.monotonic() - t < 20
