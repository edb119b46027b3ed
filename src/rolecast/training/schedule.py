"""Learning-rate schedules as pure functions of their position: the factor an lr schedule multiplies the base lr by
at optimizer step k (0-based). Nothing here touches an optimizer: training/optimizer.py turns a factor into the
`LambdaLR` it owns, and is the only module that sets an lr.

rolecast's warmup ramps linearly to 1 as (k + 1) / (warmup_steps + 1) rather than the common k / warmup_steps,
because the latter spends the whole first step (one full round of rollouts) at lr 0.

The `verl_*` schedules are verl's (`verl/utils/torch_functional.py`), which the reference study trains with:
warmup k / warmup_steps from lr 0, and a cosine whose progress is not clamped at `total_steps`, so past its
end the lr climbs back up (0.5 (1 + cos(pi p)) for p in [1, 2] goes from 0 back to 1). Under the study's
Isolated-Policy the trainer advances that one schedule once per role update (docs/training.md, "Learning-rate
schedules"): training/optimizer.py's shared clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable

Factor = Callable[[int], float]  # optimizer step (0-based) -> multiplier of the base lr
KINDS = ("cosine", "constant", "verl_cosine", "verl_constant")  # train.lr_schedule


def _warmup(step: int, warmup_steps: int) -> float:
    return (step + 1) / (warmup_steps + 1) if step < warmup_steps else 1.0


def warmup_cosine_factor(warmup_steps: int, total_steps: int, min_lr_ratio: float = 0.0) -> Factor:
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

    return factor


def constant_factor(warmup_steps: int = 0) -> Factor:
    """Constant lr, optionally after the same linear warmup."""
    return lambda step: _warmup(step, warmup_steps)


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


def schedule_factor(kind: str, warmup_steps: int, total_steps: int, min_lr_ratio: float = 0.0) -> Factor:
    """The factor of the schedule `train.lr_schedule` names: cosine | constant (rolecast's) | verl_cosine |
    verl_constant."""
    if kind == "cosine":
        return warmup_cosine_factor(warmup_steps, total_steps, min_lr_ratio)
    if kind == "constant":
        return constant_factor(warmup_steps)
    if kind == "verl_cosine":
        return lambda step: verl_cosine_factor(step, warmup_steps, total_steps, min_lr_ratio)
    if kind == "verl_constant":
        return lambda step: verl_constant_factor(step, warmup_steps)
    raise ValueError(f"train.lr_schedule: unknown schedule {kind!r} ({', '.join(KINDS)})")
