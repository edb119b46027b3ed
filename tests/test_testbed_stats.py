"""The role-competence intervals against hand-computed values: independent and clustered by problem."""

from __future__ import annotations

import math

import pytest

from rolecast.core.episode import Episode, PickClaim, Turn, VerdictClaim
from rolecast.testbed.rollouts import _aggregator, _evaluator
from rolecast.testbed.stats import (
    clustered_balanced_accuracy,
    clustered_margin,
    clustered_mean,
    clustered_rate,
    paired_margin,
)


def test_one_member_per_cluster_is_the_ordinary_paired_interval():
    # [1, 0, 1, 1]: mean 0.75, sample variance 0.25, so 1.96 * sqrt(0.25 / 4) = 0.49
    mean, hw = clustered_mean([1, 0, 1, 1], ["a", "b", "c", "d"])
    assert mean == 0.75 and hw == pytest.approx(0.49)
    model, base = [True, True, False, True], [0.0, 1.0, 0.0, 0.5]
    assert clustered_margin(model, base, [0, 1, 2, 3]) == paired_margin(model, base)


def test_samples_that_move_together_count_as_one():
    # two problems, each answered the same way twice: the information of two observations (1, 0),
    # 1.96 * sqrt(0.5 / 2) = 0.98, where treating the four as independent would give 0.566
    p, hw = clustered_rate([True, True, False, False], ["a", "a", "b", "b"])
    assert p == 0.5 and hw == 0.98
    assert clustered_rate([True, False, True, False], ["a", "a", "b", "b"]) == (0.5, 0.0)  # within-problem only


def test_clustered_balanced_accuracy_by_hand():
    # problem a: accepts a right answer and a wrong one; b: rejects both; c: accepts the right, rejects the wrong.
    # tpr = tnr = 2/3. Influences on each rate, /3 per side and halved for the mean of the two:
    # a: (1/3)/6 + (-2/3)/6 = -1/18; b: -1/18; c: 2/18. Variance 3/2 * 6/324 = 1/36, half-width 1.96/6.
    accept = [True, True, False, False, True, False]
    truth = [True, False, True, False, True, False]
    tpr, tnr, ba, hw = clustered_balanced_accuracy(accept, truth, ["a", "a", "b", "b", "c", "c"])
    assert (tpr, tnr, ba) == pytest.approx((2 / 3, 2 / 3, 2 / 3))
    assert hw == pytest.approx(1.96 / 6)
    assert clustered_balanced_accuracy([], [], []) == (0.0, 0.0, 0.0, 0.0)


def _turn(claim) -> Turn:
    return Turn("r", "r", "p", [1], [2], [0.0], "t", "stop", claim=claim)


def test_the_evaluator_summary_clusters_its_verdicts_by_problem():
    def verdict(accept: bool, truth: bool) -> Turn:
        return _turn(VerdictClaim(accept, "x", reviewed_correct=truth))

    eps = [  # the hand example above, the verdicts of a problem spread over two samples and two rounds
        Episode("a", 0, [verdict(True, True)]),
        Episode("a", 1, [verdict(True, False)]),
        Episode("b", 0, [verdict(False, True), verdict(False, False)]),
        Episode("c", 0, [verdict(True, True), verdict(False, False)]),
    ]
    r = _evaluator(eps)
    assert r["n_verdicts"] == 6 and r["balanced_accuracy"] == round(2 / 3, 4)
    assert r["balanced_accuracy_ci"] == round(1.96 / 6, 4)


def test_the_aggregator_margin_clusters_its_picks_by_problem():
    def pick(correct: bool, flags: list[bool]) -> Turn:
        return _turn(PickClaim(0, ["1", "2", "3"], correct=correct, candidates_correct=flags))

    eps = [
        Episode("p", 0, [pick(True, [False, True, False])]),
        Episode("p", 1, [pick(True, [False, True, True])]),
        Episode("q", 0, [pick(False, [True, False, False])]),
        Episode("q", 1, [pick(True, [True, True, False])]),
        Episode("r", 0, [pick(False, [False, False, False])]),  # no voter right: not counted
    ]
    r = _aggregator(eps)
    # model - voter 1 = [1, 1, -1, 0], mean 0.25; cluster influences (0.75 + 0.75) / 4 and (-1.25 - 0.25) / 4,
    # variance 2 * 2 * 0.375^2 = 0.5625, half-width 1.96 * 0.75
    assert r["n_with_correct"] == 4
    assert r["vs_first"] == {"margin": 0.25, "margin_ci": round(1.96 * 0.75, 4)}
    assert r["accuracy_with_correct"] == 0.75
    # the same picks as four problems: the ordinary paired interval, narrower
    alone = [Episode(str(i), 0, e.turns) for i, e in enumerate(eps)]
    assert _aggregator(alone)["vs_first"]["margin_ci"] == round(
        1.96 * math.sqrt((2 * 0.75**2 + 1.25**2 + 0.25**2) / 3 / 4), 4
    )


def test_checked_worker_reads_the_first_row_said_yes_to():
    from rolecast.testbed.rollouts import checked_worker

    two_rows = "1:x*2+1 1*2+1=3 vs 3 2*2+1=5 vs 6 no 2:x*2 1*2=2 vs 2 yes ```python\ndef f(x): return x*2\n```"
    assert checked_worker(two_rows) == 2
    assert checked_worker("1:x+1 0+1=1 vs 1 yes 2:x+2 0+2=2 vs 1 no") == 1
    # no yes: the synthesizer derives and writes its own program; `?` (no function) fails at once
    assert checked_worker("1:? no 2:x*3 1*3=3 vs 4 no 8-4=4 x*4 ```python\ndef f(x): return x*4\n```") is None
    assert checked_worker("") is None


def test_synthesizer_picks_by_hand():
    """Four episodes of two problems: the checked pick follows the rows, the own answer the synthesizer's claim."""
    from rolecast.core.episode import AnswerClaim
    from rolecast.testbed.rollouts import synthesizer_picks

    def ep(pid: str, workers: list[bool], rows: str, own: bool) -> Episode:
        turns = []
        for role, text, ok in [*(("worker", f"w{i}", w) for i, w in enumerate(workers)), ("synthesizer", rows, own)]:
            turns.append(Turn(role, role, "p", [1], [2], [0.0], text, "stop", claim=AnswerClaim(text, correct=ok)))
        return Episode(pid, 0, turns)

    r = synthesizer_picks(
        [
            ep("a", [False, True, True], "1:x no 2:x+1 yes", own=False),  # a copy slip: it chose worker 2, wrote wrong
            ep("a", [True, False, False], "1:x yes", own=True),
            ep("b", [False, False, True], "1:x no 2:y no 3:z no", own=False),  # no yes: its own (wrong) program
            ep("b", [False, True, False], "1:x no 2:y yes", own=True),
        ]
    )
    assert r["n_episodes"] == 4 and r["checked_right_own_wrong"] == 1
    assert r["own"][0] == 0.5 and r["checked"][0] == 0.75
    assert r["worker_1"] == 0.25 and r["any_worker"] == 1.0
    # checked - worker 1 = [1, 0, 0, 1]: mean 0.5; clusters a (0.5 + -0.5) = 0 and b (-0.5 + 0.5) = 0: no spread
    assert r["checked_vs_first"] == {"margin": 0.5, "margin_ci": 0.0}
    assert r["own_vs_first"]["margin"] == 0.25


def test_margin_text_by_hand():
    from rolecast.testbed.stats import margin_text

    assert margin_text({"margin": 0.0469, "margin_ci": 0.0486}, 3) == "+0.047 ± 0.049"
    assert margin_text({"margin": -0.0156, "margin_ci": 0.0554}) == "-0.02 ± 0.06"
