"""Which training problems a step uses: a pure function of (seed, step), so a resumed run needs no data cursor.

- ``random`` (default): ``problems_per_step`` problems drawn without replacement, afresh every step (a
  problem may come back the next step, another may wait long).
- ``epoch`` (the reference study's data loader: a shuffled pass over the training set): each training problem
  is used once per epoch, the order reshuffled every epoch. Step s is batch ``s mod B`` of epoch ``s // B``,
  with B = len(pool) // problems_per_step batches per epoch (a last partial batch is dropped, as a data loader
  with drop_last does, so every step has the same batch size).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TypeVar

from rolecast.rollout.engine import step_seed  # the trainer's per-(seed, step, purpose) formula

T = TypeVar("T")

SAMPLING_MODES = ("random", "epoch")


def epoch_order(n: int, seed: int, epoch: int) -> list[int]:
    """The shuffled order of problem indices for one epoch."""
    order = list(range(n))
    random.Random(step_seed(seed, epoch, 4)).shuffle(order)
    return order


def step_problems(pool: Sequence[T], *, seed: int, step: int, per_step: int, mode: str = "random") -> list[T]:
    """The problems of training step `step` (0-based)."""
    if not pool:
        return []
    k = min(per_step, len(pool))
    if mode == "random":
        return random.Random(step_seed(seed, step, 0)).sample(list(pool), k)
    if mode == "epoch":
        batches = len(pool) // k
        epoch, within = divmod(step, batches)
        order = epoch_order(len(pool), seed, epoch)
        return [pool[i] for i in order[within * k : (within + 1) * k]]
    raise ValueError(f"train.sampling: unknown mode {mode!r}; known: {SAMPLING_MODES}")
