"""Signs that training diverged, counted per policy across steps (docs/training.md, "Divergence")."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from rolecast.config.schema import TrainSettings


class NonFiniteUpdate(RuntimeError):
    """An optimizer step that could not produce finite weights (the run cannot go on from its state)."""


class DivergenceGuard:
    """Per-policy signs that training diverged, counted across steps (and carried in checkpoints, so a resume
    continues a streak). `reason` says why the run must stop, or None:
    - an update left weights whose outputs are not finite, or grew their norm more than `max_weight_growth`
      times: at once;
    - `max_skipped_updates` optimizer updates in a row skipped for a non-finite loss or gradient;
    - the mean token entropy within `max_entropy_tol` x log|V| of its maximum log|V| (the policy samples
      uniformly at random) for `max_entropy_steps` steps in a row. Only for a policy that started below
      that: a random-weight model starts there, and training did not drive it there."""

    def __init__(self, settings: TrainSettings, vocab_size: int):
        self.settings = settings
        self.max_entropy = math.log(vocab_size)
        self.counts: dict[str, dict[str, Any]] = {}

    def _at_max(self, entropy: float) -> bool:
        return entropy >= (1 - self.settings.max_entropy_tol) * self.max_entropy

    def update(
        self,
        pid: str,
        stats: dict[str, float],
        skipped_in_a_row: float,
        *,
        outputs_finite: bool,
        norms: tuple[float, float] | None = None,
    ) -> None:
        """Count one step of `pid`: its update stats, whether its outputs are finite after the update, and its
        weight norm (before, after)."""
        c = self.counts
        growth = self.settings.max_weight_growth
        if norms is not None and growth and not (norms[1] <= growth * norms[0]):
            c.setdefault("blown_up", {})[pid] = list(norms)
        skips = c.setdefault("skipped_in_a_row", {})
        # no successful update this step: the streak goes on from earlier steps
        skips[pid] = skipped_in_a_row + (skips.get(pid, 0) if not stats["optimizer_steps"] else 0)
        entropy = stats.get("entropy", float("nan"))
        if math.isfinite(entropy):
            start = c.setdefault("entropy_start", {}).setdefault(pid, entropy)
            at_max = c.setdefault("entropy_at_max", {})
            at_max[pid] = at_max.get(pid, 0) + 1 if self._at_max(entropy) and not self._at_max(start) else 0
        if not outputs_finite:
            c.setdefault("non_finite", {})[pid] = True

    def suspect(self) -> bool:
        """A policy on a streak towards a stop (its weights are not worth a checkpoint)."""
        return any(n > 0 for n in self.counts.get("entropy_at_max", {}).values())

    def reason(self, step: int) -> str | None:
        tc = self.settings
        for pid in self.counts.get("non_finite", {}):
            return (
                f"policy {pid!r}: its weights give non-finite outputs after the update of step {step} "
                f"(train.lr {tc.lr:g} too large?)"
            )
        for pid, (before, after) in self.counts.get("blown_up", {}).items():
            return (
                f"policy {pid!r}: the update of step {step} grew its weight norm from {before:.4g} to {after:.4g} "
                f"(more than train.max_weight_growth {tc.max_weight_growth:g}x; train.lr {tc.lr:g} too large?)"
            )
        for pid, n in self.counts.get("skipped_in_a_row", {}).items():
            if tc.max_skipped_updates and n >= tc.max_skipped_updates:
                return (
                    f"policy {pid!r}: {int(n)} optimizer updates in a row skipped for a non-finite loss or "
                    f"gradient (train.max_skipped_updates {tc.max_skipped_updates})"
                )
        for pid, n in self.counts.get("entropy_at_max", {}).items():
            if tc.max_entropy_steps and n >= tc.max_entropy_steps:
                return (
                    f"policy {pid!r}: token entropy at its maximum log|V| = {self.max_entropy:.3f} (within "
                    f"train.max_entropy_tol {tc.max_entropy_tol:g}) for {n} steps in a row "
                    f"(train.max_entropy_steps {tc.max_entropy_steps}): it samples uniformly at random"
                )
        return None


def weight_norm(params: Sequence[torch.nn.Parameter]) -> float:
    """The policy's trainable weights' norm, accumulated in float64 (the guard's `norms`)."""
    with torch.no_grad():
        return math.sqrt(sum(float(p.double().pow(2).sum()) for p in params))
