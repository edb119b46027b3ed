"""Learning-rate schedules as `LambdaLR`s (so their state round-trips through checkpoints).

Convention: optimizer step k (0-based) runs at `base_lr * factor(k)`; call `scheduler.step()` after each
`optimizer.step()`. Warmup ramps linearly to 1 as (k + 1) / (warmup_steps + 1) rather than the common
k / warmup_steps, because the latter spends the whole first step (one full round of rollouts) at lr 0.

The `verl_*` schedules are verl's (`verl/utils/torch_functional.py`), which the reference study trains with:
warmup k / warmup_steps from lr 0, and a cosine whose progress is not clamped at `total_steps`, so past its
end the lr climbs back up (0.5 (1 + cos(pi p)) for p in [1, 2] goes from 0 back to 1). Under the study's
Isolated-Policy the trainer advances that one schedule once per role update (docs/training.md, "Learning-rate
schedules"), which is what `seek` with a shared clock reproduces.
"""

from __future__ import annotations

import math

import torch
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR


def _warmup(step: int, warmup_steps: int) -> float:
    return (step + 1) / (warmup_steps + 1) if step < warmup_steps else 1.0


def warmup_cosine(optimizer: Optimizer, warmup_steps: int, total_steps: int, min_lr_ratio: float = 0.0) -> LambdaLR:
    """Linear warmup to 1, then cosine decay to `min_lr_ratio` at `total_steps`, flat afterwards."""
    if not 0 <= warmup_steps <= total_steps or not 0.0 <= min_lr_ratio <= 1.0:
        raise ValueError(
            f"need 0 <= warmup_steps ({warmup_steps}) <= total_steps ({total_steps}) "
            f"and 0 <= min_lr_ratio ({min_lr_ratio}) <= 1"
        )

    def factor(step: int) -> float:
        if step < warmup_steps:
            return _warmup(step, warmup_steps)
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return LambdaLR(optimizer, factor)


def constant(optimizer: Optimizer, warmup_steps: int = 0) -> LambdaLR:
    """Constant lr, optionally after the same linear warmup."""
    return LambdaLR(optimizer, lambda step: _warmup(step, warmup_steps))


def verl_cosine_factor(step: int, warmup_steps: int, total_steps: int, min_lr_ratio: float = 0.0) -> float:
    """verl's `get_cosine_schedule_with_warmup` (num_cycles 0.5): step / warmup_steps during warmup (0 at step 0),
    then max(0, m + (1 - m) (1 + cos(pi p)) / 2) with p = (step - warmup) / (total - warmup) NOT clamped to 1."""
    if step < warmup_steps:
        return step / max(1, warmup_steps)
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return max(0.0, min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress)))


def verl_constant_factor(step: int, warmup_steps: int) -> float:
    """verl's `get_constant_schedule_with_warmup`: min(1, step / warmup_steps)."""
    return min(1.0, step / max(1, warmup_steps))


def build(optimizer: Optimizer, kind: str, warmup_steps: int, total_steps: int, min_lr_ratio: float = 0.0) -> LambdaLR:
    """The schedule `train.lr_schedule` names: cosine | constant (rolecast's) | verl_cosine | verl_constant."""
    if kind == "cosine":
        return warmup_cosine(optimizer, warmup_steps, total_steps, min_lr_ratio)
    if kind == "constant":
        return constant(optimizer, warmup_steps)
    if kind == "verl_cosine":
        return LambdaLR(optimizer, lambda step: verl_cosine_factor(step, warmup_steps, total_steps, min_lr_ratio))
    if kind == "verl_constant":
        return LambdaLR(optimizer, lambda step: verl_constant_factor(step, warmup_steps))
    raise ValueError(f"train.lr_schedule: unknown schedule {kind!r} (cosine, constant, verl_cosine, verl_constant)")


def seek(scheduler: LambdaLR, position: int, base_lr: float | None = None) -> float:
    """Put `scheduler` at `position` on its schedule and set its optimizer's lr there (optionally with a new
    base lr); returns the lr. Used by the shared role-update clock, by resumes that change train.lr or
    train.steps, and by rollbacks (which keep the schedule at the step reached)."""
    if base_lr is not None:
        scheduler.base_lrs = [base_lr] * len(scheduler.base_lrs)
    scheduler.last_epoch = position
    lrs = [float(base * lam(position)) for lam, base in zip(scheduler.lr_lambdas, scheduler.base_lrs, strict=True)]
    for group, lr, base in zip(scheduler.optimizer.param_groups, lrs, scheduler.base_lrs, strict=True):
        group["initial_lr"], group["lr"] = base, lr
    scheduler._last_lr = list[float | torch.Tensor](lrs)  # what get_last_lr() returns
    return lrs[0]
