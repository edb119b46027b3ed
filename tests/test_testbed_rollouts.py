"""Judging roles measured on a model's own workflow rollouts: the summaries, by hand, and on the shipped testbed."""

from __future__ import annotations

from rolecast.core.episode import AnswerClaim, Episode, PickClaim, Turn, VerdictClaim
from rolecast.testbed.rollouts import SUMMARIES


def _turn(role: str, claim) -> Turn:
    return Turn(role, role, "p", [1], [2], [0.0], "t", "stop", claim=claim)


def test_evaluator_summary_counts_every_verdict():
    # 3 verdicts on correct solutions (2 accepted), 2 on wrong ones (1 rejected).
    flags = [(True, True), (True, True), (False, True), (True, False), (False, False)]
    ep = Episode("a", 0, [_turn("evaluator", VerdictClaim(acc, "s", reviewed_correct=rc)) for acc, rc in flags])
    r = SUMMARIES["eval_opt"]([ep])
    assert r["n_verdicts"] == 5 and r["accept_rate"] == 0.6 and r["truly_correct"] == 0.6
    assert r["accepts_correct"] == round(2 / 3, 4) and r["rejects_wrong"] == 0.5
    assert r["balanced_accuracy"] == round((2 / 3 + 0.5) / 2, 4)


def test_aggregator_summary_is_measured_where_a_voter_was_right():
    picks = [
        PickClaim(1, ["a", "b", "c"], correct=True, candidates_correct=[False, True, False]),  # beats voter 1
        PickClaim(0, ["a", "b", "c"], correct=True, candidates_correct=[True, True, True]),  # ties it
        PickClaim(2, ["a", "b", "c"], correct=False, candidates_correct=[True, False, False]),  # loses
        PickClaim(0, ["a", "b", "c"], correct=None, candidates_correct=[False, False, False]),  # no job: left out
    ]
    r = SUMMARIES["voting"]([Episode(str(i), 0, [_turn("aggregator", c)]) for i, c in enumerate(picks)])
    assert r["n_with_correct"] == 3
    assert r["accuracy_with_correct"] == round(2 / 3, 4) and r["baseline_first"] == round(2 / 3, 4)
    assert r["vs_first"]["margin"] == 0.0  # +1, 0, -1
    assert r["baseline_random"] == round((1 / 3 + 1 + 1 / 3) / 3, 4)
    assert r["vs_random"]["margin"] == round(((1 - 1 / 3) + 0 + (0 - 1 / 3)) / 3, 4)


def test_synthesizer_summary_pairs_it_with_worker_1():
    def ep(w1: bool, w2: bool, syn: bool) -> Episode:
        turns = [_turn("orchestrator", None)]
        turns += [_turn("worker", AnswerClaim("w", correct=c)) for c in (w1, w2)]
        return Episode("x", 0, turns + [_turn("synthesizer", AnswerClaim("s", correct=syn))])

    r = SUMMARIES["orch_workers"](
        [ep(False, True, True), ep(True, True, True), ep(True, False, False), ep(False, False, True)]
    )
    assert r["accuracy"] == 0.75 and r["baseline_first"] == 0.5
    assert r["vs_first"]["margin"] == 0.25  # +1, 0, -1, +1


def test_synthesizer_summary_reads_a_synthesizer_that_names_a_worker():
    """Orch-Workers' `synthesis: pick`: the synthesizer's PickClaim is right when the worker it named is; with no
    worker right scoring leaves `correct` None, which counts as wrong."""

    def ep(flags: list[bool], picked: int) -> Episode:
        turns = [_turn("worker", AnswerClaim("w", correct=c)) for c in flags]
        pick = PickClaim(picked, ["w"] * len(flags), correct=flags[picked] if any(flags) else None)
        return Episode("x", 0, turns + [_turn("synthesizer", pick)])

    r = SUMMARIES["orch_workers"]([ep([False, True], 1), ep([True, False], 1), ep([False, False], 0)])
    assert r["accuracy"] == round(1 / 3, 4) and r["baseline_first"] == round(1 / 3, 4)
    assert r["vs_first"]["margin"] == 0.0  # +1, -1, 0


def test_code_rollouts_are_clustered_by_hidden_function():
    """The code task's two starts of one function are one cluster: worker 1 wrong and the synthesizer right on both
    problems of x*2 (+1, +1), level on both of x+3 (0, 0). By function: G = 2, influences +-0.25, half-width
    1.96 * sqrt(2 * 2 * 0.0625) = 0.98; by problem it would be 1.96 * sqrt(4/3 * 4 * 0.125^2) = 0.566."""
    from rolecast.testbed.rollouts import cluster_of

    assert cluster_of("testbed_code/test/x*2/0") == cluster_of("testbed_code/test/x*2/1") == "testbed_code/test/x*2"
    assert cluster_of("testbed/test/17") == "testbed/test/17"

    def ep(pid: str, w1: bool, syn: bool) -> Episode:
        turns = [_turn("worker", AnswerClaim("w", correct=w1)), _turn("synthesizer", AnswerClaim("s", correct=syn))]
        return Episode(pid, 0, turns)

    r = SUMMARIES["orch_workers"](
        [
            ep("testbed_code/test/x*2/0", False, True),
            ep("testbed_code/test/x*2/1", False, True),
            ep("testbed_code/test/x+3/0", True, True),
            ep("testbed_code/test/x+3/1", False, False),
        ],
        True,
    )
    assert r["vs_first"] == {"margin": 0.5, "margin_ci": 0.98}


def test_a_build_of_another_seed_is_measured_on_its_own_split():
    """`task_options={"seed": 1}`: the episodes are the held-out problems of the code task's split 1 (functions
    split 0 trains on), and the protocol records it."""
    from rolecast.tasks.testbed import CodeTestbed
    from rolecast.testbed import default_path
    from rolecast.testbed.rollouts import workflow_episodes

    split1 = [p.id for p in CodeTestbed(seed=1).problems("test")[:3]]
    assert not set(split1) & {p.id for p in CodeTestbed(seed=0).problems("test")[:3]}
    eps, _, n = workflow_episodes(
        default_path("small", "code"), "orch_workers", task="testbed_code", problems=3, samples=1,
        task_options={"seed": 1},
    )  # fmt: skip
    assert n == 3 and [ep.problem_id for ep in eps] == split1


def test_a_builds_split_and_contract_are_read_from_its_build_info(tmp_path):
    from rolecast.testbed.rollouts import build_split, build_synthesis

    assert build_split(tmp_path) is None and build_synthesis(tmp_path) == "checks"  # no build_info.json
    (tmp_path / "build_info.json").write_text('{"seed": 2, "code_synthesis": "pick"}')
    assert build_split(tmp_path) == {"seed": 2} and build_synthesis(tmp_path) == "pick"
    (tmp_path / "build_info.json").write_text('{"seed": 0}')
    assert build_split(tmp_path) is None


def test_rollout_competence_runs_the_real_workflows():
    """A few problems through the shipped testbed: each workflow's pass@1 is what its episodes scored."""
    from rolecast.testbed import default_path, format_rollouts
    from rolecast.testbed.rollouts import rollout_competence

    r = rollout_competence(default_path(), problems=6, samples=2, threads=2)
    assert r["protocol"] == {
        "task": "testbed",
        "problems": 6,
        "samples": 2,
        "temperature": 0.7,
        "intervals": "clustered by problem",
    }
    for name in ("eval_opt", "voting", "orch_workers"):
        assert r[name]["n_episodes"] == 12
    # Orch-Workers returns the synthesizer's answer, so its pass@1 is the synthesizer's accuracy.
    assert r["orch_workers"]["pass1"] == r["orch_workers"]["accuracy"]
    assert r["eval_opt"]["n_verdicts"] >= 12  # at least one verdict per episode
    assert "synthesizer" in format_rollouts(r) and "intervals clustered by problem" in format_rollouts(r)
