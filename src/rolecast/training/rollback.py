"""Rollback on early warning (config `interventions.rollback`, off while `signals` and `precursors` are empty).

When configured early-warning signals (diagnostics/warnings.py) or precursor triggers (training/precursors.py: a
precursor past its threshold) fire on `patience` consecutive steps, the loop restores the best checkpoint written
so far: the highest held-out pass@1 among the periodic evaluations of checkpoints still on disk (the later one on
ties: less training is thrown away), or, when no kept checkpoint was evaluated, the latest one. Weights, optimizer
and lr-scheduler state come from that one checkpoint (never the weights of one step with the Adam moments of
another), the step counter goes on (the run still ends at `train.steps`; the schedule keeps its position), and the
learning rate is multiplied by `lr_factor` (again at each further rollback). With `action: lr_cut` nothing is
restored: the learning rate alone is cut, in place. At most `max_rollbacks`; after one, `cooldown` steps pass
before the next can fire.

Deciding is pure bookkeeping over the step's alerts and the run's files; restoring is the loop's job
(training/resume.py, `SessionState.roll_back`). The state here (count, lr scale, streaks, events) is plain JSON and
travels in every checkpoint, so a resumed run rolls back exactly when an uninterrupted one would.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rolecast.config.schema import RollbackSettings
from rolecast.core.metric_keys import rollback_key
from rolecast.core.rundir import EVAL, read_jsonl
from rolecast.diagnostics.warnings import Alert
from rolecast.training.checkpoint import list_checkpoints

log = logging.getLogger("rolecast.training")


@dataclass
class RollbackEvent:
    step: int  # the training step at whose end the rollback happened
    to_step: int | None  # the checkpoint restored; None: an lr cut, nothing restored
    signals: list[str]  # the configured signals that fired, "name:subject"
    count: int  # rollbacks so far, this one included
    lr_scale: float  # the multiplier on train.lr from now on
    accuracy: float | None  # the held-out pass@1 that made `to_step` the best; None: fallback to the latest

    def metrics(self) -> dict[str, Any]:
        out: dict[str, Any] = {rollback_key("to_step"): self.to_step} if self.to_step is not None else {}
        if self.to_step is None:
            out[rollback_key("action")] = "lr_cut"
        out |= {
            rollback_key("count"): self.count,
            rollback_key("lr_scale"): self.lr_scale,
            rollback_key("signals"): ", ".join(self.signals),
        }
        if self.accuracy is not None:
            out[rollback_key("accuracy")] = self.accuracy
        return out

    def message(self, max_rollbacks: int) -> str:
        if self.to_step is None:
            return (
                f"step {self.step}: lr cut {self.count}/{max_rollbacks} on {', '.join(self.signals)}; "
                f"lr x{self.lr_scale:g}"
            )
        why = f"eval pass@1 {self.accuracy:.3f}" if self.accuracy is not None else "latest; none evaluated"
        return (
            f"step {self.step}: rollback {self.count}/{max_rollbacks} to checkpoint step_{self.to_step} ({why}) on "
            f"{', '.join(self.signals)}; lr x{self.lr_scale:g}"
        )


def best_checkpoint(
    eval_rows: Iterable[dict[str, Any]], checkpoints: Sequence[int], before: int
) -> tuple[int, float | None] | None:
    """(step, pass@1) of the kept checkpoint (step < `before`) with the best periodic evaluation, the later on
    ties; (latest step, None) when none of them was evaluated; None when there is no checkpoint before `before`.
    Of several rows for one step the last counts (a re-evaluation after a resume)."""
    steps = [s for s in checkpoints if 0 < s < before]
    if not steps:
        return None
    acc: dict[int, float] = {}
    for row in eval_rows:
        s, p = row.get("step"), row.get("pass@1")
        if row.get("tag") == "periodic" and s in steps and isinstance(p, (int, float)):
            acc[s] = float(p)
    if not acc:
        return max(steps), None
    best = max(acc, key=lambda s: (acc[s], s))
    return best, acc[best]


class Rollback:
    """Decides when to roll back and to which checkpoint; see the module docstring."""

    def __init__(self, settings: RollbackSettings):
        # the early-warning signals and the precursor triggers (their alerts carry the precursor's name)
        self.signals = set(settings.signals) | {t.name for t in settings.precursors}
        self.restores = settings.action == "rollback"
        self.lr_factor = float(settings.lr_factor)
        self.max_rollbacks = int(settings.max_rollbacks)
        self.patience = int(settings.patience)
        self.cooldown = int(settings.cooldown)
        self.count = 0
        self.lr_scale = 1.0
        self.last_step = 0  # the step of the last rollback (0: none yet)
        self.streaks: dict[str, int] = {}  # signal -> consecutive steps it fired
        self.events: list[dict[str, Any]] = []

    @classmethod
    def from_config(cls, settings: RollbackSettings) -> Rollback | None:
        """The rollback `interventions.rollback` configures, None while its `signals` and `precursors` are empty."""
        return cls(settings) if settings.signals or settings.precursors else None

    def due(self, step: int, alerts: Iterable[Alert]) -> list[str]:
        """Count this step's alerts; the "name:subject" of the configured ones that fired when a rollback is due
        now, else []."""
        fired = [a for a in alerts if a.name in self.signals]
        names = {a.name for a in fired}
        self.streaks = {n: self.streaks.get(n, 0) + 1 for n in names}  # a step without the signal ends its streak
        if self.count >= self.max_rollbacks or (self.count and step - self.last_step <= self.cooldown):
            return []
        ready = {n for n, k in self.streaks.items() if k >= self.patience}
        return sorted({f"{a.name}:{a.subject}" for a in fired if a.name in ready})

    def decide(self, step: int, alerts: Iterable[Alert], run_dir: Path) -> RollbackEvent | None:
        """The rollback to perform at the end of `step`, or None. The caller restores `to_step` (unless None: an lr
        cut) and sets the lr."""
        signals = self.due(step, alerts)
        if not signals:
            return None
        target: tuple[int | None, float | None] | None = (None, None)
        if self.restores:
            target = best_checkpoint(read_jsonl(run_dir / EVAL), list_checkpoints(run_dir), before=step)
        if target is None:
            log.warning("step %d: rollback due on %s, but no checkpoint precedes this step", step, ", ".join(signals))
            return None
        self.count += 1
        self.lr_scale *= self.lr_factor
        self.last_step = step
        self.streaks = {}
        event = RollbackEvent(step, target[0], signals, self.count, self.lr_scale, target[1])
        self.events.append(asdict(event))
        return event

    def state_dict(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "lr_scale": self.lr_scale,
            "last_step": self.last_step,
            "streaks": dict(self.streaks),
            "events": [dict(e) for e in self.events],
        }

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        state = state or {}
        self.count = int(state.get("count", 0))
        self.lr_scale = float(state.get("lr_scale", 1.0))
        self.last_step = int(state.get("last_step", 0))
        self.streaks = {k: int(v) for k, v in state.get("streaks", {}).items()}
        self.events = [dict(e) for e in state.get("events", [])]
