"""Advantage estimators against hand-computed numbers."""

from __future__ import annotations

import math

import pytest
import torch

from rolecast.core.episode import Episode, Turn, group_turns
from rolecast.objectives.advantages import ADVANTAGES, compute_advantages, group_advantages
from rolecast.scoring import assign_advantages

EPS = 1e-6
# Two groups of 4: [1,0,0,1] (mean .5, unbiased var 1/3) and [1,1,1,0] (mean .75, unbiased var .25).
REWARDS = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0])
GROUPS = torch.tensor([7, 7, 7, 7, 3, 3, 3, 3])


def _close(got: torch.Tensor, want: list[float]) -> None:
    torch.testing.assert_close(got, torch.tensor(want, dtype=got.dtype), atol=1e-6, rtol=0)


def test_grpo_two_groups_hand_values() -> None:
    a = 0.5 / (math.sqrt(1 / 3) + EPS)  # 0.8660...
    b = 0.25 / (0.5 + EPS)  # std of [1,1,1,0] = sqrt(.75/3) = .5
    _close(compute_advantages("grpo", REWARDS, GROUPS), [a, -a, -a, a, b, b, b, -3 * b])


def test_dr_grpo_two_groups_hand_values() -> None:
    _close(compute_advantages("dr_grpo", REWARDS, GROUPS), [0.5, -0.5, -0.5, 0.5, 0.25, 0.25, 0.25, -0.75])


def test_rloo_two_groups_hand_values() -> None:
    # [1,0,0,1]: 1 - (1/3) = 2/3, 0 - (2/3); [1,1,1,0]: 1 - 2/3 = 1/3, 0 - 1 = -1
    _close(compute_advantages("rloo", REWARDS, GROUPS), [2 / 3, -2 / 3, -2 / 3, 2 / 3, 1 / 3, 1 / 3, 1 / 3, -1.0])


def test_mixed_sizes_singleton_and_all_equal_groups() -> None:
    # groups: size 2 [0,1], size 3 [.2,.5,.8], singleton [1], all-equal [1,1,1], interleaved on purpose
    rewards = torch.tensor([0.0, 0.2, 1.0, 1.0, 0.5, 1.0, 1.0, 0.8, 1.0])
    gids = torch.tensor([0, 1, 2, 0, 1, 3, 3, 1, 3])
    s2 = 0.5 / (math.sqrt(0.5) + EPS)  # [0,1]: unbiased std sqrt(.5)
    s3 = 0.3 / (0.3 + EPS)  # [.2,.5,.8]: unbiased std .3
    _close(compute_advantages("grpo", rewards, gids), [-s2, -s3, 0.0, s2, 0.0, 0.0, 0.0, s3, 0.0])
    _close(compute_advantages("dr_grpo", rewards, gids), [-0.5, -0.3, 0.0, 0.5, 0.0, 0.0, 0.0, 0.3, 0.0])
    # rloo [.2,.5,.8]: .2 - (1.3/2) = -.45, .5 - 1.0/2 = 0, .8 - .7/2 = .45
    _close(compute_advantages("rloo", rewards, gids), [-1.0, -0.45, 0.0, 1.0, 0.0, 0.0, 0.0, 0.45, 0.0])


@pytest.mark.parametrize("name", sorted(ADVANTAGES))
def test_all_equal_and_singleton_give_exact_zero(name: str) -> None:
    rewards = torch.tensor([0.3, 0.3, 0.3, 5.0])
    adv = compute_advantages(name, rewards, torch.tensor([0, 0, 0, 1]))
    assert torch.equal(adv, torch.zeros(4))


@pytest.mark.parametrize("name", sorted(ADVANTAGES))
def test_permutation_invariance(name: str) -> None:
    g = torch.Generator().manual_seed(0)
    rewards = torch.rand(40, generator=g)
    gids = torch.randint(0, 6, (40,), generator=g)
    perm = torch.randperm(40, generator=g)
    base = compute_advantages(name, rewards, gids)
    torch.testing.assert_close(compute_advantages(name, rewards[perm], gids[perm]), base[perm])


def test_rloo_is_scaled_dr_grpo() -> None:
    # r_i - (S - r_i)/(n-1) = n/(n-1) * (r_i - S/n): an independent identity check of the index_add code
    g = torch.Generator().manual_seed(1)
    rewards = torch.rand(30, generator=g, dtype=torch.float64)
    gids = torch.arange(30) % 5  # groups of 6
    rloo, dr = compute_advantages("rloo", rewards, gids), compute_advantages("dr_grpo", rewards, gids)
    torch.testing.assert_close(rloo, 6 / 5 * dr)


def test_dtype_preserved_and_bad_inputs() -> None:
    assert compute_advantages("grpo", REWARDS.half(), GROUPS).dtype == torch.float16
    with pytest.raises(ValueError, match="unknown"):
        compute_advantages("nope", REWARDS, GROUPS)
    with pytest.raises(ValueError):
        compute_advantages("grpo", REWARDS, GROUPS[:3])
    with pytest.raises(TypeError):
        compute_advantages("grpo", torch.tensor([1, 0]), torch.tensor([0, 0]))


def _turn(role: str, reward: float) -> Turn:
    return Turn(
        role=role,
        instance=role,
        policy_id="p",
        prompt_ids=[1],
        completion_ids=[2],
        logprobs=[-0.1],
        text="x",
        finish_reason="stop",
        reward=reward,
    )


def test_group_advantages_are_pure_and_written_onto_turns_per_group() -> None:
    assert group_advantages([[1.0, 0.0], [1.0, 1.0], [2.0]], "dr_grpo") == [[0.5, -0.5], [0.0, 0.0], [0.0]]
    assert group_advantages([], "grpo") == []
    # Two problems x two samples, generator + verifier roles; grouping by (problem, role).
    rewards = {("p1", 0): (1.0, 0.0), ("p1", 1): (0.0, 1.0), ("p2", 0): (1.0, 1.0), ("p2", 1): (1.0, 0.0)}
    episodes = [
        Episode(problem_id=p, sample=s, turns=[_turn("gen", rg), _turn("ver", rv)])
        for (p, s), (rg, rv) in rewards.items()
    ]
    assign_advantages(group_turns(episodes, by="role"), "dr_grpo")  # scoring writes them, one place
    got = {(ep.problem_id, ep.sample): tuple(t.advantage for t in ep.turns) for ep in episodes}
    # p1/gen [1,0] -> ±.5; p1/ver [0,1] -> ∓.5; p2/gen [1,1] -> 0; p2/ver [1,0] -> ±.5
    assert got == {("p1", 0): (0.5, -0.5), ("p1", 1): (-0.5, 0.5), ("p2", 0): (0.0, 0.5), ("p2", 1): (0.0, -0.5)}
    assign_advantages({}, "grpo")  # empty step is a no-op
