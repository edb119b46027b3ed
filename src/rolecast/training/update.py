"""One policy's update on its turns of a step, in the order it runs; each part is its own module:

1. the old log-probs (training/old_logprobs.py): the sampler's, or the trainer's own before this update;
2. per epoch and mini-batch, the loss step (training/loss_step.py): forward and backward over token-budget
   micro-batches, the loss normalised over the whole mini-batch so any split into micro-batches is exact; per agent
   instance when per-role gradients are captured (training/role_batches.py, `GradientCapture`);
3. the distributed reduction (training/distributed.py): the gradient summed over processes (per instance when
   captured), reported to the gradient diagnostics, each role's rescaled by the interventions
   (training/interventions.py), clipped; a non-finite loss or gradient skips the optimizer step;
4. the optimizer step (the optimizer is training/optimizer.py's), and the policy's stats and per-role token tallies.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass

import torch

from rolecast.config.schema import RunConfig
from rolecast.core.episode import Turn
from rolecast.diagnostics.gradients import GradientMonitor
from rolecast.policies.models import PolicySet
from rolecast.training.batching import plan_micro_batches
from rolecast.training.distributed import Dist
from rolecast.training.guard import NonFiniteUpdate
from rolecast.training.interventions import Interventions
from rolecast.training.loss_step import TALLY_KEYS, LossStep, MiniBatch, Tally, merge_tallies, tally_means
from rolecast.training.old_logprobs import OldLogprobs
from rolecast.training.role_batches import GradientCapture, InstanceGradients, instance_segments

log = logging.getLogger("rolecast.training")


@dataclass
class PolicyUpdate:
    """What one policy's update did."""

    stats: dict[str, float]  # the policy's metrics of the step (optimizer_steps, skipped_nan, loss, grad_norm, ...)
    tally: Tally  # per-role token sums, so the caller can merge roles that span several policies
    skipped_in_a_row: float = 0.0  # optimizer updates skipped since the last good one (the divergence guard's streak)


def update_policy(
    pid: str,
    turns: list[Turn],
    *,
    cfg: RunConfig,
    policies: PolicySet,
    optimizer: torch.optim.Optimizer,
    pad_id: int,
    rng: random.Random,
    check_logprobs: bool,
    monitor: GradientMonitor | None = None,
    interventions: Interventions | None = None,
    dist: Dist | None = None,
) -> PolicyUpdate:
    """Update one policy on its turns: its stats, per-role token tallies (summed over tokens, so the caller can
    merge roles that span several policies) and its streak of skipped updates.

    `monitor` (only on steps where gradient diagnostics run) receives per-instance gradients of the first pass
    over the data and each optimizer step's size. `interventions` defaults to the config's (None when all are
    off). Per-instance gradients need each mini-batch's rows grouped by agent instance before micro-batching,
    which changes the summation order of the accumulated gradient (equal to float tolerance, not bit for
    bit); without a monitor and without a rescaling intervention the rows are batched exactly as before.

    `dist` (a data-parallel run, training/distributed.py): `turns` are this process's share; counts, gradients,
    losses and tallies are summed over processes, so the step equals one process's on all the turns."""
    if interventions is None:
        interventions = Interventions.from_config(cfg.interventions, cfg.train.kl_coef)
    counts = instance_counts(turns)  # counted before any turn is left out of the loss
    update = _Update(pid, cfg, policies, optimizer, pad_id, check_logprobs, monitor, interventions, dist or Dist())
    return update.run(trainable(turns, cfg.train.mask_truncated), rng, counts)


def instance_counts(turns: list[Turn]) -> dict[str, int]:
    """Each role's number of parallel instances among `turns` (interventions.multiplicity_norm)."""
    counts: dict[str, int] = {}
    for role, _ in {(t.role, t.instance) for t in turns}:
        counts[role] = counts.get(role, 0) + 1
    return counts


def trainable(turns: list[Turn], mask_truncated: bool) -> list[Turn]:
    """The turns the loss learns from: an empty completion carries no token to learn from, and with
    train.mask_truncated a completion cut at max_new_tokens is left out."""
    turns = [t for t in turns if t.completion_ids]
    if mask_truncated:
        turns = [t for t in turns if t.finish_reason != "length"]
    return turns


class _Update:
    """One policy's update (see the module docstring); `run` goes through it once."""

    def __init__(
        self,
        pid: str,
        cfg: RunConfig,
        policies: PolicySet,
        optimizer: torch.optim.Optimizer,
        pad_id: int,
        check_logprobs: bool,
        monitor: GradientMonitor | None,
        interventions: Interventions | None,
        dist: Dist,
    ):
        self.pid, self.cfg, self.train = pid, cfg, cfg.train
        self.policies, self.optimizer, self.pad_id = policies, optimizer, pad_id
        self.interventions, self.dist = interventions, dist
        self.params = policies.parameters(pid)
        self.rescale = interventions is not None and interventions.rescales
        self.old = OldLogprobs(pid, cfg.train, check=check_logprobs)  # checked on the first micro-batch
        self.capture = GradientCapture(pid, self.params, monitor, self.rescale, dist)
        self.diagnose = monitor is not None  # per-instance gradients for the diagnostics, on the first pass
        self.result = PolicyUpdate({"optimizer_steps": 0.0, "skipped_nan": 0.0, "loss": 0.0}, {})
        self.grad_norms: list[float] = []

    def run(self, turns: list[Turn], rng: random.Random, instance_counts: dict[str, int]) -> PolicyUpdate:
        if not self.dist.total(len(turns))[0]:
            self.capture.finish(turns, gather=False)
            return self.result
        self.old.prepare(turns, self.policies, self.pad_id, self.cfg.rollout.temperature, self.dist)
        loss_step = LossStep(
            self.pid, self.cfg, self.policies, self.pad_id, self.old, self.interventions, instance_counts
        )
        for epoch in range(self.train.epochs):
            if self.train.update_schedule == "per_step":
                minibatches = [turns]
            else:  # one shuffle of the global batch, so several processes take the same mini-batches as one
                minibatches = self.dist.minibatches(turns, rng, self.train.mini_batch_size)
            for mb in minibatches:
                self.minibatch(loss_step, mb, diagnose=self.diagnose and epoch == 0)
        self.finish(turns)
        return self.result

    def minibatch(self, loss_step: LossStep, turns: list[Turn], diagnose: bool) -> None:
        """One optimizer step on a mini-batch's rows (skipped when its loss or gradient is not finite)."""
        self.optimizer.zero_grad(set_to_none=True)
        mb = MiniBatch.of(turns, self.cfg, self.dist)  # normalised over the global mini-batch
        grads = self.capture.start(diagnose)
        finite = self.dist.all_true(self.backward(loss_step, mb, grads))  # every process skips a bad step, or none
        grad_norm = self.reduce_and_clip(grads, diagnose) if finite else None
        if grad_norm is None or not torch.isfinite(grad_norm):
            self.skip()
            return
        self.step(mb, grad_norm)

    def backward(self, loss_step: LossStep, mb: MiniBatch, grads: InstanceGradients | None) -> bool:
        """Accumulate the mini-batch's gradient; False at the first micro-batch whose loss is not finite."""
        # per-instance gradients: each agent instance's rows form their own micro-batches (training/role_batches.py)
        segments = instance_segments(mb.turns) if grads is not None else [mb.turns]
        with self.policies.training(self.pid) as model:
            # the loss is normalised over the whole mini-batch, so any split into micro-batches is exact
            for segment in segments:
                for micro in plan_micro_batches(segment, self.train.micro_batch_tokens):
                    if not loss_step(model, micro, mb):
                        return False
                if grads is not None:
                    grads.capture(segment[0].role, segment[0].instance)
        return True

    def reduce_and_clip(self, grads: InstanceGradients | None, diagnose: bool) -> torch.Tensor:
        """The distributed reduction (per instance when captured: reported to the diagnostics, each role's rescaled
        by the interventions), the sum put in `.grad` and clipped; returns the norm before clipping."""
        if grads is None:
            self.dist.sum_gradients(self.params)
        else:
            grads.all_reduce(self.dist)  # per-instance gradients of the global batch
            self.capture.report(grads, diagnose)  # raw, before any intervention
            coefs = (
                self.interventions.role_coefficients(self.pid, grads.role_vectors())
                if self.rescale and self.interventions
                else None
            )
            grads.write_back(coefs)
        return torch.nn.utils.clip_grad_norm_(self.params, self.train.max_grad_norm)

    def skip(self) -> None:
        """Never train on a NaN/inf step: drop its gradients, count it, say so."""
        self.optimizer.zero_grad(set_to_none=True)
        self.result.stats["skipped_nan"] += 1
        self.result.skipped_in_a_row += 1
        log.warning("policy %s: non-finite loss or gradient; optimizer step skipped", self.pid)

    def step(self, mb: MiniBatch, grad_norm: torch.Tensor) -> None:
        """The optimizer step, and the mini-batch's share of the policy's stats."""
        stats = self.result.stats
        before = self.capture.weights_before_step()
        try:
            self.optimizer.step()
        except RuntimeError as e:  # AdamW raises when lr x update overflows float32 (e.g. lr 1e38)
            if "overflow" not in str(e):
                raise
            raise NonFiniteUpdate(f"policy {self.pid!r}: the optimizer step overflowed ({e})") from None
        self.result.skipped_in_a_row = 0.0
        self.capture.after_step(before, mb.turns)
        stats["optimizer_steps"] += 1
        stats["loss"] += self.dist.total(mb.loss_sum)[0]
        self.grad_norms.append(float(grad_norm))
        merge_tallies(self.result.tally, self.dist.merge_tallies(mb.tally))

    def finish(self, turns: list[Turn]) -> None:
        stats, tally = self.result.stats, self.result.tally
        stats["loss"] /= max(stats["optimizer_steps"], 1)
        gap = self.old.gap(self.dist)
        if gap is not None:  # mean |sampler - trainer| log-prob per token, before this update
            stats["logprob_gap"] = gap
        grad_norms = self.grad_norms
        stats["grad_norm"] = sum(grad_norms) / len(grad_norms) if grad_norms else float("nan")
        stats.update(tally_means({k: sum(row[k] for row in tally.values()) for k in TALLY_KEYS}))
        self.capture.finish(turns)
