"""Every policy's optimizer and learning rate, over the whole life of a run. The only module that sets an lr.

- **Build**: one AdamW per policy (an update of one policy never touches another's parameters; float32 master
  weights for a bf16 / fp16 full fine-tune, training/master_weights.py) and one lr schedule per policy
  (training/schedule.py's factors as a `LambdaLR`, so its state round-trips through checkpoints).
- **The clock** (`train.lr_clock`): `step` advances each policy's schedule once per training step, with or without
  data; `role_update` (the study's Isolated-Policy) keeps one clock shared by the policies, advanced once per policy
  update that had data, and puts a policy's schedule at the clock before its update (docs/training.md).
- **Per update**: `lr(pid, trains)` is the lr the policy's update trains with (on the shared clock the schedule is
  first put there); `advance(pid, trains)` moves the clock after it.
- **Save / restore**: the checkpoint entries `optim/<pid>` (Adam's moments and step counts, the masters),
  `sched/<pid>` (the schedule's position and base lr) and `lr_clock`. A resume restores all of them; a rollback
  restores the optimizers and schedules of the checkpoint it goes back to but keeps the clock (the run goes on from
  the updates it reached).
- **Rebase**: after a restore, a changed train.lr (or train.steps, which moves a cosine's end) takes effect, and a
  rollback puts the schedules back at the step reached with its lowered lr.

A schedule follows the convention optimizer step k (0-based) runs at `base_lr * factor(k)`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

from rolecast.config.schema import TrainSettings
from rolecast.policies.models import PolicySet
from rolecast.training.checkpoint import required_entry
from rolecast.training.master_weights import MasterWeightAdamW, needs_master
from rolecast.training.schedule import Factor, constant_factor, schedule_factor, warmup_cosine_factor

LR_CLOCK = "lr_clock"  # the checkpoint entry of the shared role-update clock


def optimizer_entry(pid: str) -> str:
    """The checkpoint entry of a policy's optimizer state."""
    return f"optim/{pid}"


def schedule_entry(pid: str) -> str:
    """The checkpoint entry of a policy's lr-schedule state."""
    return f"sched/{pid}"


class Schedule(LambdaLR):
    """A `LambdaLR` that can also be put at any position of its schedule; its state dict is LambdaLR's."""

    def seek(self, position: int, base_lr: float | None = None) -> float:
        """Put the schedule at `position` and set its optimizer's lr there (optionally with a new base lr);
        returns the lr."""
        if base_lr is not None:
            self.base_lrs = [base_lr] * len(self.base_lrs)
        self.last_epoch = position
        lrs = [float(base * lam(position)) for lam, base in zip(self.lr_lambdas, self.base_lrs, strict=True)]
        for group, lr, base in zip(self.optimizer.param_groups, lrs, self.base_lrs, strict=True):
            group["initial_lr"], group["lr"] = base, lr
        self._last_lr = list[float | torch.Tensor](lrs)  # what get_last_lr() returns
        return lrs[0]


def warmup_cosine(optimizer: Optimizer, warmup_steps: int, total_steps: int, min_lr_ratio: float = 0.0) -> Schedule:
    """rolecast's cosine (training/schedule.py) on `optimizer`."""
    return Schedule(optimizer, warmup_cosine_factor(warmup_steps, total_steps, min_lr_ratio))


def constant(optimizer: Optimizer, warmup_steps: int = 0) -> Schedule:
    """rolecast's constant lr (after an optional warmup) on `optimizer`."""
    return Schedule(optimizer, constant_factor(warmup_steps))


def build(optimizer: Optimizer, kind: str, warmup_steps: int, total_steps: int, min_lr_ratio: float = 0.0) -> Schedule:
    """The schedule `train.lr_schedule` names on `optimizer`: cosine | constant | verl_cosine | verl_constant."""
    factor: Factor = schedule_factor(kind, warmup_steps, total_steps, min_lr_ratio)
    return Schedule(optimizer, factor)


class PolicyOptimizers:
    """Each policy's optimizer and lr schedule, and the clock that positions the schedules (module docstring)."""

    def __init__(self, policies: PolicySet, train: TrainSettings):
        self.role_clock = train.lr_clock == "role_update"
        # train.lr_clock role_update: policy updates made so far, the position of the one schedule they share;
        # unused under the step clock
        self.clock = 0
        self.optimizers: dict[str, Optimizer] = {}
        self.schedules: dict[str, Schedule] = {}
        for pid in policies.policy_ids:
            params = list(policies.parameters(pid))
            adamw = MasterWeightAdamW if train.fp32_master_weights and needs_master(params) else torch.optim.AdamW
            self.optimizers[pid] = adamw(params, lr=train.lr, betas=train.betas, weight_decay=train.weight_decay)
            self.schedules[pid] = build(
                self.optimizers[pid], train.lr_schedule, train.warmup_steps, max(train.steps, 1), train.min_lr_ratio
            )

    def optimizer(self, pid: str) -> Optimizer:
        return self.optimizers[pid]

    # --- one update ---

    def lr(self, pid: str, trains: bool) -> float:
        """The lr `pid`'s update of this step trains with; `trains`: the policy has turns this step (the study's
        trainer skips a role with no samples, so on the shared clock only such an update moves the schedule)."""
        if self.role_clock and trains:
            self.schedules[pid].seek(self.clock)
        return float(self.schedules[pid].get_last_lr()[0])

    def advance(self, pid: str, trains: bool) -> None:
        """After `pid`'s update of this step: its own schedule moves one step, or the shared clock one update."""
        if not self.role_clock:
            self.schedules[pid].step()
        elif trains:
            self.clock += 1

    # --- checkpoints ---

    def state_dict(self) -> dict[str, Any]:
        """The checkpoint entries: every policy's optimizer and schedule state, and the shared clock (if used)."""
        state: dict[str, Any] = {}
        for pid in self.optimizers:
            state[optimizer_entry(pid)] = self.optimizers[pid].state_dict()
            state[schedule_entry(pid)] = self.schedules[pid].state_dict()
        if self.role_clock:
            state[LR_CLOCK] = self.clock
        return state

    def load_state_dict(self, state: Mapping[str, Any], *, keep_clock: bool = False) -> None:
        """Restore the optimizers and schedules from a checkpoint (after the weights: master weights saved without
        masters start from them); the clock too, unless `keep_clock` (a rollback)."""
        for pid in self.optimizers:
            self.optimizers[pid].load_state_dict(required_entry(state, optimizer_entry(pid), "optim/"))
            self.schedules[pid].load_state_dict(required_entry(state, schedule_entry(pid), "optim/"))
        if not keep_clock:
            self.clock = int(state.get(LR_CLOCK, 0))

    def rebase(self, base_lr: float, position: int | None = None) -> None:
        """After a restore, make a changed train.lr (or train.steps, which moves the cosine schedule) take effect:
        the restored state carries the old base lr and the lr it last set. `base_lr`: train.lr (times the
        rollbacks' multiplier); `position`: move each schedule there (a rollback restores an earlier schedule
        state, but the run goes on from the step it reached), else each stays where it is."""
        for sched in self.schedules.values():
            sched.seek(sched.last_epoch if position is None else position, base_lr=base_lr)
