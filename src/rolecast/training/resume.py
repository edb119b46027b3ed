"""What a session's checkpoint holds and how a resume or a rollback restores it, in one place.

A checkpoint holds every policy's weights, the RNG state and the trainer's counters (training/checkpoint.py's
`trainer_state`), the optimizers' and lr schedules' state with the role-update lr clock (training/optimizer.py), plus
one entry per other stateful component of the session: the early warning's history, the gradient diagnostics' and
the interventions' EMAs, the rollback's bookkeeping, the precursors' probe sets and base values. `SessionState` holds those components; its `checkpoint` builds
the state and `restore` reads it back, so each entry is named once. A resume also rewinds the run's logs to the
step it continues from.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rolecast.config.schema import RunConfig
from rolecast.core.errors import ConfigError
from rolecast.core.rundir import EVAL, METRICS, RESUMES, append_jsonl, cut_back_jsonl, eval_set_file
from rolecast.diagnostics.gradients import GradientMonitor
from rolecast.diagnostics.signatures import AnswerExtractor
from rolecast.diagnostics.warnings import EarlyWarning
from rolecast.policies.models import PolicySet
from rolecast.training.checkpoint import (
    capture_rng_state,
    latest_step,
    load_checkpoint,
    load_latest_intact,
    restore_rng_state,
    restore_trainer_state,
    trainer_state,
)
from rolecast.training.guard import DivergenceGuard
from rolecast.training.interventions import Interventions
from rolecast.training.optimizer import PolicyOptimizers
from rolecast.training.precursors import Precursors
from rolecast.training.rollback import Rollback, RollbackEvent

# the checkpoint entries of the session's components (besides trainer_state's and the optimizers')
EARLY_WARNING = "early_warning"
GRADIENTS = "diagnostics/gradients"
INTERVENTIONS = "interventions"
ROLLBACK = "rollback"
PRECURSORS = "precursors"

# the eval.jsonl rows the trainer writes (`rolecast eval` writes "checkpoint" rows, which a resume keeps)
TRAINER_EVAL_TAGS = ("base", "periodic", "final")


@dataclass
class SessionState:
    """The session's stateful components: what a checkpoint saves and a resume restores. A rollback restores
    part of it (weights, optimizer and schedule state, the divergence streaks, the diagnostics' and
    interventions' state); the early warning, the rollback's own bookkeeping, the precursors (their probe sets and
    base values are the untrained policy's), the lr clock and the random streams go on (every step reseeds its
    own streams from (seed, step))."""

    policies: PolicySet
    optim: PolicyOptimizers  # every policy's optimizer and lr schedule, and the lr clock
    guard: DivergenceGuard
    warn: EarlyWarning
    monitor: GradientMonitor | None  # per-role gradient diagnostics (None when off)
    interventions: Interventions | None  # None when all are off
    rollback: Rollback | None  # rollback on early warning (None when off)
    precursors: Precursors | None  # diagnostics.precursors (None when off)

    @classmethod
    def fresh(cls, cfg: RunConfig, policies: PolicySet, extract: AnswerExtractor) -> SessionState:
        """The session's stateful parts, new: the optimizers and lr schedules, the divergence guard, the early
        warning (reading answers with the task's `extract`), and the gradient diagnostics, interventions,
        rollback and precursors (None when off). Built before a checkpoint is loaded, so the monitor's copy of the starting
        weights (for drift) is the initialisation, not the resumed weights."""
        trainable = {pid: policies.parameters(pid) for pid in policies.policy_ids}
        return cls(
            policies=policies,
            optim=PolicyOptimizers(policies, cfg.train),
            guard=DivergenceGuard(cfg.train, policies.vocab_size),
            warn=EarlyWarning(extract=extract),
            monitor=GradientMonitor.from_config(cfg.diagnostics.gradients, trainable, seed=cfg.seed),
            interventions=Interventions.from_config(cfg.interventions, cfg.train.kl_coef),
            rollback=Rollback.from_config(cfg.interventions.rollback),
            precursors=Precursors.from_config(cfg, policies),
        )

    def checkpoint(self, step: int) -> dict[str, Any]:
        """Everything a resume needs to continue after `step` (1-based) bit for bit."""
        state = trainer_state(step, self.policies, guard=self.guard.counts)
        state.update(self.optim.state_dict())
        state[EARLY_WARNING] = self.warn.state_dict()
        if self.monitor is not None and self.monitor.state_dict():
            state[GRADIENTS] = self.monitor.state_dict()
        if self.interventions is not None and self.interventions.state_dict():
            state[INTERVENTIONS] = self.interventions.state_dict()
        if self.rollback is not None:
            state[ROLLBACK] = self.rollback.state_dict()
        if self.precursors is not None and self.precursors.ready:
            state[PRECURSORS] = self.precursors.state_dict()
        return state

    def restore(self, state: Mapping[str, Any], *, rollback: bool = False) -> None:
        """Load a checkpoint's state: all of it on a resume, a rollback's part with `rollback` (see the class)."""
        rng = capture_rng_state() if rollback else None
        self.guard.counts = restore_trainer_state(state, self.policies).get("guard", {})
        self.optim.load_state_dict(state, keep_clock=rollback)
        if rng is not None:
            restore_rng_state(rng)
        if self.monitor is not None:
            self.monitor.load_state_dict(state.get(GRADIENTS))
        if self.interventions is not None:
            self.interventions.load_state_dict(state.get(INTERVENTIONS))
        if rollback:
            return
        if EARLY_WARNING in state:
            self.warn.load_state_dict(state[EARLY_WARNING])
        if self.rollback is not None:
            self.rollback.load_state_dict(state.get(ROLLBACK))
        if self.precursors is not None:
            self.precursors.load_state_dict(state.get(PRECURSORS))

    def resume(self, run_dir: Path, cfg: RunConfig, changes: Mapping[str, tuple[Any, Any]]) -> tuple[int, list[str]]:
        """Restore the newest intact checkpoint of `run_dir` (if any): (its step, or 0, and one line per damaged
        checkpoint skipped). A changed train.lr or train.steps takes effect on the restored schedules."""
        if latest_step(run_dir) is None:
            return 0, []
        start, state, damaged = load_latest_intact(run_dir)
        if cfg.train.steps < start:
            raise ConfigError(f"train.steps: {cfg.train.steps} is below the step {start} {run_dir} has reached")
        self.restore(state)
        if self.precursors is not None:
            self.precursors.read_history(run_dir, start)
        if "train.lr" in changes or "train.steps" in changes:
            scale = self.rollback.lr_scale if self.rollback else 1.0
            self.optim.rebase(cfg.train.lr * scale)
        return start, damaged

    def roll_back(self, run_dir: Path, event: RollbackEvent, lr: float) -> None:
        """Restore checkpoint `event.to_step` (all of one checkpoint: never the weights of one step with the Adam
        moments of another; nothing for an lr cut, `to_step` None), keep the schedule at the step reached and
        lower the lr to `event.lr_scale` x `lr` (train.lr)."""
        if event.to_step is not None:
            _, state = load_checkpoint(run_dir, event.to_step)
            self.restore(state, rollback=True)
        self.optim.rebase(lr * event.lr_scale, position=event.step)


def rewind_logs(run_dir: Path, start: int, extra_sets: Iterable[str]) -> None:
    """Forget what was logged after the checkpoint the run continues from (it is redone; a new run starts at 0);
    rows of `rolecast eval` (tag "checkpoint") are not the trainer's to cut."""
    cut_back_jsonl(run_dir / METRICS, lambda r: 0 < r.get("step", 0) <= start)
    cut_back_jsonl(
        run_dir / EVAL,
        lambda r: r.get("tag") not in TRAINER_EVAL_TAGS or (start > 0 and r.get("step", 0) <= start),
    )
    for name in extra_sets:
        cut_back_jsonl(run_dir / eval_set_file(name), lambda r: start > 0 and r.get("step", 0) <= start)


def record_resume(run_dir: Path, start: int, changes: Mapping[str, tuple[Any, Any]], damaged: list[str]) -> str:
    """Append the resume to the run's resumes.jsonl; returns the line that tells the user."""
    note = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "step": start,
        "changed": {k: list(v) for k, v in changes.items()},
        "damaged_checkpoints": damaged,
    }
    append_jsonl(run_dir / RESUMES, note)
    what = "; ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in changes.items())
    return f"resumed from {run_dir} at step {start}" + (f" (changed: {what})" if what else "")
