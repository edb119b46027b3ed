"""Group-relative advantage estimators over flat reward tensors.

Every estimator maps `rewards [n]` and `group_ids [n]` (any long labels; rows with equal labels form one
GRPO group) to `advantages [n]`, vectorised over groups with `index_add_` so a step with thousands of
turns costs a handful of tensor ops. Register new estimators with `@register_advantage("name")`.

Conventions (deliberate; tests pin them):
- `grpo`: (r - mean) / (std + eps) with the *unbiased* std (Bessel, n-1), as `torch.std` computes it by
  default and as verl's `compute_grpo_outcome_advantage` uses it.
- A group of size 1 has no baseline to compare against, so every estimator gives it advantage 0.
  (verl instead sets mean=0, std=1 for singletons, i.e. advantage = r / (1 + eps); we prefer no signal over
  an unbaselined one. `singleton="reward"` gives verl's, as the reference study trains: grpo r / (1 + eps),
  dr_grpo r.)
- All-equal groups give exactly 0 (no learning signal), never NaN.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from rolecast.core.registry import Registry

AdvantageFn = Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]
ADVANTAGES: Registry[AdvantageFn] = Registry("advantage estimator")
register_advantage = ADVANTAGES.register


def _group_stats(rewards: torch.Tensor, group_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row (group index, group size, group sum), computed in float64 so large groups stay exact."""
    _, inv = torch.unique(group_ids, return_inverse=True)
    n_groups = int(inv.max()) + 1 if inv.numel() else 0
    r = rewards.double()
    counts = torch.zeros(n_groups, dtype=torch.float64, device=r.device).index_add_(0, inv, torch.ones_like(r))
    sums = torch.zeros(n_groups, dtype=torch.float64, device=r.device).index_add_(0, inv, r)
    return inv, counts, sums


@register_advantage("grpo")
def grpo(rewards: torch.Tensor, group_ids: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    inv, counts, sums = _group_stats(rewards, group_ids)
    r = rewards.double()
    centred = r - (sums / counts)[inv]
    sq = torch.zeros_like(counts).index_add_(0, inv, centred * centred)
    std = (sq / (counts - 1).clamp(min=1)).sqrt()  # unbiased; singleton clamp avoids 0/0
    adv = centred / (std[inv] + eps)
    return torch.where(counts[inv] > 1, adv, torch.zeros_like(adv)).to(rewards.dtype)


@register_advantage("dr_grpo")
def dr_grpo(rewards: torch.Tensor, group_ids: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Dr. GRPO: mean baseline without std scaling (which over-weights near-uniform groups)."""
    inv, counts, sums = _group_stats(rewards, group_ids)
    return (rewards.double() - (sums / counts)[inv]).to(rewards.dtype)  # singleton: r - r = 0


@register_advantage("rloo")
def rloo(rewards: torch.Tensor, group_ids: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Leave-one-out baseline: r_i - mean of the other members, an unbiased baseline for each sample."""
    inv, counts, sums = _group_stats(rewards, group_ids)
    r = rewards.double()
    n = counts[inv]
    adv = r - (sums[inv] - r) / (n - 1).clamp(min=1)
    return torch.where(n > 1, adv, torch.zeros_like(adv)).to(rewards.dtype)


# How a group of one is treated: "zero" (rolecast: no baseline, no signal) or "reward" (verl's
# compute_grpo_outcome_advantage: mean 0 and std 1, so the advantage is the reward itself, over 1 + eps for grpo)
SINGLETON_RULES = ("zero", "reward")
SINGLETON_REWARD_ESTIMATORS = ("grpo", "dr_grpo")  # estimators verl defines the singleton rule for


def compute_advantages(
    name: str, rewards: torch.Tensor, group_ids: torch.Tensor, eps: float = 1e-6, singleton: str = "zero"
) -> torch.Tensor:
    if singleton not in SINGLETON_RULES:
        raise ValueError(f"singleton must be one of {SINGLETON_RULES}, got {singleton!r}")
    if singleton == "reward" and name not in SINGLETON_REWARD_ESTIMATORS:
        raise ValueError(f"singleton='reward' is verl's rule for {SINGLETON_REWARD_ESTIMATORS}, not {name!r}")
    estimator = ADVANTAGES.resolve(name, "train.advantage")
    if rewards.shape != group_ids.shape or rewards.dim() != 1:
        raise ValueError(
            f"rewards {tuple(rewards.shape)} and group_ids {tuple(group_ids.shape)} must have the same 1-D shape"
        )
    if not rewards.is_floating_point():
        raise TypeError(f"rewards must be floating point, got {rewards.dtype}")
    if rewards.numel() == 0:
        return rewards.clone()
    adv = estimator(rewards, group_ids.long(), eps)
    if singleton == "reward":
        inv, counts, _ = _group_stats(rewards, group_ids.long())
        alone = counts[inv] == 1
        r = rewards.double()
        verl = r / (1.0 + eps) if name == "grpo" else r  # (r - 0) / (1 + eps), or r - 0 without the std
        adv = torch.where(alone, verl.to(adv.dtype), adv)
    return adv


def group_advantages(
    rewards: Sequence[Sequence[float]], name: str = "grpo", eps: float = 1e-6, singleton: str = "zero"
) -> list[list[float]]:
    """The advantages of each group's rewards (one list per group, in order), in one vectorised call. Writing them
    onto turns is scoring.assign_advantages'."""
    group_ids = [g for g, group in enumerate(rewards) for _ in group]
    flat = torch.tensor([r for group in rewards for r in group], dtype=torch.float64)
    adv = iter(compute_advantages(name, flat, torch.tensor(group_ids, dtype=torch.long), eps, singleton).tolist())
    return [[next(adv) for _ in group] for group in rewards]
