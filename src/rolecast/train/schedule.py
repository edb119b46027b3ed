"""Learning-rate schedules as `LambdaLR`s (so their state round-trips through checkpoints).

Convention: optimizer step k (0-based) runs at `base_lr * factor(k)`; call `scheduler.step()` after each
`optimizer.step()`. Warmup ramps linearly to 1 as (k + 1) / (warmup_steps + 1) rather than the common
k / warmup_steps, because the latter spends the whole first step (one full round of rollouts) at lr 0.
"""

from __future__ import annotations

import math

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
