"""Learning-rate schedules as `LambdaLR`s (so their state round-trips through checkpoints) that can be put at any
position of their schedule (`Schedule.seek`, `rebase`).

Convention: optimizer step k (0-based) runs at `base_lr * factor(k)`; call `scheduler.step()` after each
`optimizer.step()`. Warmup ramps linearly to 1 as (k + 1) / (warmup_steps + 1) rather than the common
k / warmup_steps, because the latter spends the whole first step (one full round of rollouts) at lr 0.

The `verl_*` schedules are verl's (`verl/utils/torch_functional.py`), which the reference study trains with:
warmup k / warmup_steps from lr 0, and a cosine whose progress is not clamped at `total_steps`, so past its
end the lr climbs back up (0.5 (1 + cos(pi p)) for p in [1, 2] goes from 0 back to 1). Under the study's
Isolated-Policy the trainer advances that one schedule once per role update (docs/training.md, "Learning-rate
schedules"), which is what `Schedule.seek` with a shared clock reproduces.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR


class Schedule(LambdaLR):
    """A `LambdaLR` that can also be put at any position of its schedule; its state dict is LambdaLR's."""

    def seek(self, position: int, base_lr: float | None = None) -> float:
        """Put the schedule at `position` and set its optimizer's lr there (optionally with a new base lr);
        returns the lr. Used by the shared role-update clock, by resumes that change train.lr or train.steps,
        and by rollbacks (which keep the schedule at the step reached)."""
        if base_lr is not None:
            self.base_lrs = [base_lr] * len(self.base_lrs)
        self.last_epoch = position
        lrs = [float(base * lam(position)) for lam, base in zip(self.lr_lambdas, self.base_lrs, strict=True)]
        for group, lr, base in zip(self.optimizer.param_groups, lrs, self.base_lrs, strict=True):
            group["initial_lr"], group["lr"] = base, lr
        self._last_lr = list[float | torch.Tensor](lrs)  # what get_last_lr() returns
        return lrs[0]


def _warmup(step: int, warmup_steps: int) -> float:
    return (step + 1) / (warmup_steps + 1) if step < warmup_steps else 1.0


def warmup_cosine(optimizer: Optimizer, warmup_steps: int, total_steps: int, min_lr_ratio: float = 0.0) -> Schedule:
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

    return Schedule(optimizer, factor)


def constant(optimizer: Optimizer, warmup_steps: int = 0) -> Schedule:
    """Constant lr, optionally after the same linear warmup."""
    return Schedule(optimizer, lambda step: _warmup(step, warmup_steps))


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


def build(optimizer: Optimizer, kind: str, warmup_steps: int, total_steps: int, min_lr_ratio: float = 0.0) -> Schedule:
    """The schedule `train.lr_schedule` names: cosine | constant (rolecast's) | verl_cosine | verl_constant."""
    if kind == "cosine":
        return warmup_cosine(optimizer, warmup_steps, total_steps, min_lr_ratio)
    if kind == "constant":
        return constant(optimizer, warmup_steps)
    if kind == "verl_cosine":
        return Schedule(optimizer, lambda step: verl_cosine_factor(step, warmup_steps, total_steps, min_lr_ratio))
    if kind == "verl_constant":
        return Schedule(optimizer, lambda step: verl_constant_factor(step, warmup_steps))
    raise ValueError(f"train.lr_schedule: unknown schedule {kind!r} (cosine, constant, verl_cosine, verl_constant)")


def rebase(schedulers: Iterable[Schedule], base_lr: float, position: int | None = None) -> None:
    """After restoring optimizer and scheduler state, make a changed train.lr (or train.steps, which moves the
    cosine schedule) take effect: the restored state carries the old base lr and the lr it last set. `base_lr`:
    train.lr (times the rollbacks' multiplier); `position`: move each schedule there (a rollback restores an
    earlier scheduler state, but the run goes on from the step it reached), else each stays where it is."""
    for sched in schedulers:
        sched.seek(sched.last_epoch if position is None else position, base_lr=base_lr)
