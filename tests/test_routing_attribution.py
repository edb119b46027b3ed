"""Routing tables, group keys and reward attribution on hand-built episodes."""

from __future__ import annotations

import pytest

from rolecast.core.episode import AnswerClaim, Episode, PickClaim, Turn, VerdictClaim, group_turns, turns_by_policy
from rolecast.policies.router import build_routing
from rolecast.scoring import attribute, score_episodes
from rolecast.tasks.base import Problem, Score, Task
from rolecast.workflows.parsing import last_boxed


def test_shared_isolated_and_map_routing():
    roles = ["generator", "aggregator"]
    assert build_routing(roles, "shared")("aggregator", "aggregator") == "shared"
    iso = build_routing(roles, "isolated")
    assert iso("generator", "generator/2") == "generator" and iso("aggregator", "aggregator") == "aggregator"
    each_voter = build_routing(roles, "map", {"generator": "gen", "generator/1": "gen1", "aggregator": "agg"})
    assert [each_voter("generator", f"generator/{i}") for i in range(3)] == ["gen", "gen1", "gen"]
    assert each_voter.policy_ids == ["agg", "gen", "gen1"]
    assert build_routing(roles, "map", {"*": "base", "aggregator": "agg"})("generator", "generator/0") == "base"


@pytest.mark.parametrize(
    "mapping,needle",
    [
        ({"generator": "g"}, "aggregator"),  # a role missing from the map
        ({"generator": "gen", "aggregator": "agg", "critic": "crit"}, "critic"),  # not a role of this workflow
        ({"generator/0": "g0", "aggregator": "agg"}, "generator"),  # only an instance: other instances unrouted
        ({"generator": "g.x", "aggregator": "agg"}, "g.x"),
        ({"generator": "gen", "aggregator": "a"}, "lora_"),  # not an identifier
    ],
)
def test_bad_routing_maps_name_the_entry(mapping, needle):
    with pytest.raises(ValueError, match=needle):
        build_routing(["generator", "aggregator"], "map", mapping)


def test_a_policy_id_that_does_not_exist_is_named():
    with pytest.raises(ValueError, match="'gen'.*does not exist"):
        build_routing(
            ["generator", "aggregator"],
            "map",
            {"generator": "gen", "aggregator": "agg"},
            policies=["generator_policy", "agg"],
        )


def turn(role, instance=None, index=0, claim=None):
    return Turn(role, instance or role, "p", [1], [2], [0.0], "", "stop", index=index, claim=claim)


def test_group_keys():
    e1 = Episode(
        "q1", 0, [turn("generator", "generator/0", 0), turn("generator", "generator/1", 1), turn("aggregator", index=2)]
    )
    e2 = Episode(
        "q1", 1, [turn("generator", "generator/0", 0), turn("generator", "generator/1", 1), turn("aggregator", index=2)]
    )
    e3 = Episode("q2", 0, [turn("generator", "generator/0", 0)])
    by_role = group_turns([e1, e2, e3], "role")
    assert {k: len(v) for k, v in by_role.items()} == {
        ("q1", "generator"): 4,
        ("q1", "aggregator"): 2,
        ("q2", "generator"): 1,
    }
    by_inst = group_turns([e1, e2, e3], "instance")
    assert len(by_inst[("q1", "generator", "generator/1")]) == 2 and len(by_inst) == 4
    by_turn = group_turns([e1, e2], "turn")
    assert set(by_turn) == {("q1", "generator", 0), ("q1", "generator", 1), ("q1", "aggregator", 2)}
    with pytest.raises(ValueError, match="group_by"):
        group_turns([e1], "episode")


class BoxTask(Task):
    family = "testbed"

    def extract_answer(self, text):
        return last_boxed(text)

    def score(self, problem, text):
        return Score(float(last_boxed(text) == problem.reference), last_boxed(text))


def voting_episode():
    gens = [
        turn("generator", f"generator/{i}", i, AnswerClaim(t))
        for i, t in enumerate([r"\boxed{5}", r"\boxed{4}", r"\boxed{4}"])
    ]
    agg = turn("aggregator", index=3, claim=PickClaim(1, [r"\boxed{5}", r"\boxed{4}", r"\boxed{4}"]))
    return Episode("q", 0, gens + [agg], final_text=r"\boxed{4}")


def evalopt_episode():
    g1 = turn("generator", index=0, claim=AnswerClaim(r"\boxed{4}"))
    e1 = turn("evaluator", index=1, claim=VerdictClaim(True, r"\boxed{4}"))
    return Episode("q", 1, [g1, e1], final_text=r"\boxed{4}")


def test_team_attribution_copies_the_outcome():
    eps = [voting_episode(), evalopt_episode()]
    score_episodes(eps, {"q": Problem("q", "2+3", "5")}, BoxTask())
    attribute(eps, "team")
    assert [t.reward for ep in eps for t in ep.turns] == [0.0] * 6
    assert eps[0].reward == 0.0 and eps[0].final_answer == "4"


def test_role_attribution_uses_role_local_rewards():
    eps = [voting_episode(), evalopt_episode()]
    score_episodes(eps, {"q": Problem("q", "2+3", "5")}, BoxTask())
    attribute(eps, "role")
    # generators: own answer 5 (right), 4, 4; aggregator picked a wrong one although candidate 1 was right
    assert [t.reward for t in eps[0].turns] == [1.0, 0.0, 0.0, 0.0]
    # the evaluator accepted a wrong answer: its verdict is wrong
    assert [t.reward for t in eps[1].turns] == [0.0, 0.0]
    assert eps[1].turns[1].claim.reviewed_correct is False


def test_role_attribution_aggregator_without_a_correct_candidate_gets_team_reward():
    ep = voting_episode()
    ep.turns[0].claim.text = r"\boxed{3}"
    ep.turns[3].claim.candidates[0] = r"\boxed{3}"
    score_episodes([ep], {"q": Problem("q", "2+3", "5")}, BoxTask())
    attribute([ep], "role")
    assert ep.turns[3].claim.correct is None and ep.turns[3].reward == ep.reward == 0.0


def double_reward(ep):  # custom attribution hook used below: one reward per turn
    return [2.0 * ep.reward + (0.5 if t.role == "evaluator" else 0.0) for t in ep.turns]


def test_custom_attribution_hook():
    ep = evalopt_episode()
    score_episodes([ep], {"q": Problem("q", "2+2", "4")}, BoxTask())
    attribute([ep], f"{__name__}:double_reward")
    assert [t.reward for t in ep.turns] == [2.0, 2.5]


def sets_turns_itself(ep):  # the former form of a hook: it wrote turn.reward and returned nothing
    for t in ep.turns:
        t.reward = 1.0


def one_reward_too_few(ep):
    return [1.0] * (len(ep.turns) - 1)


@pytest.mark.parametrize("hook", ["sets_turns_itself", "one_reward_too_few"])
def test_a_hook_that_does_not_return_one_reward_per_turn_is_named(hook):
    ep = evalopt_episode()
    score_episodes([ep], {"q": Problem("q", "2+2", "4")}, BoxTask())
    with pytest.raises(
        ValueError, match=rf"train.attribution '{__name__}:{hook}' returned .* one finite reward per turn"
    ):
        attribute([ep], f"{__name__}:{hook}")


def test_ended_reward_is_checked():
    with pytest.raises(ValueError, match="ended_reward must be one of"):
        attribute([evalopt_episode()], "team", ended_reward="study")


def test_turns_by_policy_keeps_every_policy():
    e1 = Episode("q", 0, [turn("generator", "generator/0"), turn("aggregator", index=1)])
    by_policy = turns_by_policy([e1, Episode("q", 1, [turn("generator")])], ["p", "unused"])
    assert list(by_policy) == ["p", "unused"] and len(by_policy["p"]) == 3 and by_policy["unused"] == []
