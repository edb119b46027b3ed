"""One policy's update on its turns of a step, in the order it runs:

1. old log-probs: the sampler's (train.old_logprobs sampler), or the trainer's own before this update;
2. per epoch and mini-batch: forward and backward over token-budget micro-batches, the loss normalised over the
   whole mini-batch so any split into micro-batches is exact (per agent instance when per-role gradients are
   needed: train/role_batches.py);
3. the gradient summed over processes (and each role's rescaled by an intervention), clipped; a non-finite loss
   or gradient skips the optimizer step;
4. the optimizer step, and the policy's stats and per-role token tallies.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field

import torch

from rolecast.config.schema import RunConfig
from rolecast.core.episode import Turn
from rolecast.diagnostics.gradients import GradientMonitor, flat_params, norm64
from rolecast.objectives.losses import clipped_surrogate, clipped_tokens, k3_kl
from rolecast.policies.models import PolicySet
from rolecast.train.batching import collate, generation_caps, padded_rows, plan_micro_batches, to_device
from rolecast.train.distributed import Dist
from rolecast.train.guard import NonFiniteUpdate
from rolecast.train.interventions import Interventions
from rolecast.train.logprobs import completion_logprobs, trainer_logprobs
from rolecast.train.role_batches import InstanceGradients, instance_segments

log = logging.getLogger("rolecast.train")

# per-role token sums an update reports: {role: {key: sum over tokens}}
TALLY_KEYS = ("tokens", "entropy", "clip_fraction", "approx_kl", "kl")
Tally = dict[str, dict[str, float]]


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

    `dist` (a data-parallel run, train/distributed.py): `turns` are this process's share; counts, gradients,
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


def merge_tallies(into: Tally, tally: Tally) -> Tally:
    """Add per-role token sums ({role: {key: sum}}) into `into`."""
    for role, row in tally.items():
        dst = into.setdefault(role, dict.fromkeys(TALLY_KEYS, 0.0))
        for k, v in row.items():
            dst[k] += v
    return into


def tally_means(row: dict[str, float]) -> dict[str, float]:
    """Per-token means of a tally row (and its token count)."""
    n = row.get("tokens", 0.0)
    out = {"tokens": n}
    out.update({k: (row.get(k, 0.0) / n if n else float("nan")) for k in TALLY_KEYS if k != "tokens"})
    return out


@dataclass
class _MiniBatch:
    """One optimizer step's rows, and what its micro-batches add up."""

    turns: list[Turn]
    norms: dict[str, int]  # the whole mini-batch's token and sequence counts: every micro-batch's normalisers
    scale: float = 1.0  # train.minibatch_scale nominal: its rows / train.mini_batch_size
    loss_sum: float = 0.0
    tally: Tally = field(default_factory=dict)


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
        self.pid, self.cfg, self.tc = pid, cfg, cfg.train
        self.policies, self.optimizer, self.pad_id = policies, optimizer, pad_id
        self.check_logprobs = check_logprobs  # the sampler/trainer log-prob check, on the first micro-batch
        self.monitor, self.interventions, self.dist = monitor, interventions, dist
        self.params = policies.parameters(pid)
        self.temperature = cfg.rollout.temperature
        self.rescale = interventions is not None and interventions.rescales
        self.instance_counts: dict[str, int] = {}  # a role's parallel instances on this policy (multiplicity_norm)
        self.result = PolicyUpdate({"optimizer_steps": 0.0, "skipped_nan": 0.0, "loss": 0.0}, {})
        self.grad_norms: list[float] = []
        # train.old_logprobs trainer: the ratio's denominator is the trainer's log-prob before this update, computed
        # up front (verl's compute_log_prob) unless the update is one mini-batch in one pass, where verl takes the
        # forward's own, detached; gap: |sampler - trainer| summed over tokens, and the tokens
        self.recomputed: dict[int, torch.Tensor] | None = None
        self.on_policy = False
        self.gap = [0.0, 0.0]

    def run(self, turns: list[Turn], rng: random.Random, instance_counts: dict[str, int]) -> PolicyUpdate:
        self.instance_counts = instance_counts
        if not self.dist.total(len(turns))[0]:
            if self.monitor is not None:
                self.monitor.finish_policy(self.pid, turns, self.params)
            return self.result
        self.old_logprobs(turns)
        for epoch in range(self.tc.epochs):
            if self.tc.update_schedule == "per_step":
                minibatches = [turns]
            else:  # one shuffle of the global batch, so several processes take the same mini-batches as one
                minibatches = self.dist.minibatches(turns, rng, self.tc.mini_batch_size)
            for mb in minibatches:
                self.minibatch(mb, epoch)
        self.finish(turns)
        return self.result

    # --- 1. old log-probs ---

    def old_logprobs(self, turns: list[Turn]) -> None:
        """train.old_logprobs trainer: decide whether the forward's own log-probs serve (on-policy), else compute
        the trainer's before the update."""
        tc = self.tc
        if tc.old_logprobs != "trainer":
            return
        n_all = int(self.dist.total(len(turns))[0])
        self.on_policy = tc.epochs == 1 and (tc.update_schedule == "per_step" or n_all <= tc.mini_batch_size)
        if self.on_policy:
            return
        with self.policies.training(self.pid) as model:
            recomputed = trainer_logprobs(
                model, turns, self.pad_id, self.policies.device, self.temperature, tc.micro_batch_tokens
            )
        for t in turns:
            self.gap[0] += float((torch.tensor(t.logprobs) - recomputed[id(t)]).abs().sum())
            self.gap[1] += len(t.completion_ids)
        self.recomputed = recomputed

    def _old_logp(self, logp: torch.Tensor, old: torch.Tensor, mask: torch.Tensor, micro: list[Turn]) -> torch.Tensor:
        """The ratio's denominator for a micro-batch: the sampler's (`old`), the forward's own or the trainer's."""
        if self.on_policy:
            self.gap[0] += float(((logp.detach() - old).abs() * mask).sum())
            self.gap[1] += float(mask.sum())
            return logp.detach()
        if self.recomputed is not None:
            return padded_rows([self.recomputed[id(t)] for t in micro], old.shape[1]).to(old.device)
        return old

    # --- 2. forward and backward ---

    def minibatch(self, turns: list[Turn], epoch: int) -> None:
        """One optimizer step on a mini-batch's rows (skipped when its loss or gradient is not finite)."""
        tc, dist = self.tc, self.dist
        self.optimizer.zero_grad(set_to_none=True)
        # the whole mini-batch's counts normalise every micro-batch, so accumulation equals one big batch
        tokens, seqs = dist.total(sum(len(t.completion_ids) for t in turns), sum(1 for t in turns if t.completion_ids))
        mb = _MiniBatch(turns, {"total_tokens": int(tokens), "total_seqs": int(seqs)})
        if tc.minibatch_scale == "nominal":  # a short (last) mini-batch takes a proportionally smaller step
            mb.scale = dist.total(len(turns))[0] / tc.mini_batch_size
        diagnose = self.monitor is not None and epoch == 0
        grads = self.instance_gradients(diagnose)
        finite = dist.all_true(self.backward(mb, grads))  # every process skips a non-finite step, or none does
        grad_norm = self.reduce_and_clip(grads, diagnose) if finite else None
        if grad_norm is None or not torch.isfinite(grad_norm):
            self.skip()
            return
        self.step(mb, grad_norm)

    def instance_gradients(self, diagnose: bool) -> InstanceGradients | None:
        """Per-instance gradients, when diagnostics run on this pass or an intervention rescales roles."""
        if not (diagnose or self.rescale):
            return None
        sketch = self.monitor.sketch if diagnose and self.monitor is not None else None
        return InstanceGradients(self.params, sketch=sketch, keep_roles=self.rescale)

    def backward(self, mb: _MiniBatch, grads: InstanceGradients | None) -> bool:
        """Accumulate the mini-batch's gradient; False at the first micro-batch whose loss is not finite."""
        # per-instance gradients: each agent instance's rows form their own micro-batches (train/role_batches.py)
        segments = instance_segments(mb.turns) if grads is not None else [mb.turns]
        with self.policies.training(self.pid) as model:
            # the loss is normalised over the whole mini-batch, so any split into micro-batches is exact
            for segment in segments:
                for micro in plan_micro_batches(segment, self.tc.micro_batch_tokens):
                    if not self.micro_step(model, micro, mb):
                        return False
                if grads is not None:
                    grads.capture(segment[0].role, segment[0].instance)
        return True

    def micro_step(self, model: torch.nn.Module, micro: list[Turn], mb: _MiniBatch) -> bool:
        """Forward and backward of one micro-batch; False (and no backward) when its loss is not finite."""
        tc = self.tc
        batch = to_device(collate(micro, self.pad_id), self.policies.device)
        logp, entropy = completion_logprobs(model, batch, self.temperature)
        mask, adv = batch["mask"], batch["advantages"]
        old = self._old_logp(logp, batch["old_logp"], mask, micro)
        roles = [t.role for t in micro]
        kl_coef, ref_logp = self._reference(batch, roles, logp.device)
        self._check_logprobs(logp, old, mask)
        weights = (
            self.interventions.row_weights(roles, self.instance_counts) if self.interventions is not None else None
        )
        loss, _ = clipped_surrogate(
            logp,
            old,
            adv,
            mask,
            tc.clip_low,
            tc.clip_high,
            tc.loss_agg,
            ref_logp=ref_logp,
            kl_coef=kl_coef,
            max_len=to_device(generation_caps(self.cfg, micro), logp.device),
            row_weights=to_device(weights, logp.device),
            dual_clip=tc.dual_clip,
            **mb.norms,
        )
        if tc.minibatch_scale == "nominal":  # verl: each micro-batch x its rows / mini-batch size
            loss = loss * mb.scale
        if not torch.isfinite(loss):
            return False
        loss.backward()
        mb.loss_sum += float(loss.detach())
        self._tally(mb.tally, micro, logp, entropy, old, adv, mask, ref_logp)
        return True

    def _reference(
        self, batch: dict[str, torch.Tensor], roles: list[str], device: torch.device
    ) -> tuple[float | torch.Tensor, torch.Tensor | None]:
        """The KL coefficient (per row with interventions.kl_coef_by_role) and the starting model's log-probs,
        when any row has a KL term."""
        kl_coef: float | torch.Tensor = self.tc.kl_coef
        row_kl = self.interventions.kl_coefs(roles) if self.interventions is not None else None
        if row_kl is not None:
            kl_coef = row_kl.to(device)
        ref_logp = None
        if self.tc.kl_coef > 0 or (row_kl is not None and bool((row_kl > 0).any())):
            with torch.no_grad(), self.policies.reference_model() as ref:
                ref_logp, _ = completion_logprobs(ref, batch, self.temperature)
        return kl_coef, ref_logp

    def _check_logprobs(self, logp: torch.Tensor, old: torch.Tensor, mask: torch.Tensor) -> None:
        """On a run's first step, once: the trainer's log-probs must match the sampler's (train.old_logprobs
        sampler; with trainer the gap is logged instead)."""
        if not self.check_logprobs or self.tc.old_logprobs != "sampler":
            return
        gap_ = float(((logp.detach() - old).abs() * mask).sum() / mask.sum().clamp(min=1))
        if gap_ > self.tc.logprob_check_tol:
            raise RuntimeError(
                f"policy {self.pid!r}: trainer log-probs differ from the sampler's by {gap_:.4f} per "
                f"token (tolerance {self.tc.logprob_check_tol}); generation and training do not "
                f"compute the same distribution (temperature, padding/position ids, dropout or "
                f"dtype mismatch)"
            )
        self.check_logprobs = False

    def _tally(
        self,
        tally: Tally,
        micro: list[Turn],
        logp: torch.Tensor,
        entropy: torch.Tensor,
        old: torch.Tensor,
        adv: torch.Tensor,
        mask: torch.Tensor,
        ref_logp: torch.Tensor | None,
    ) -> None:
        """Add the micro-batch's per-sequence sums to the tally, each under its turn's role."""
        tc = self.tc
        with torch.no_grad():
            lp = logp.detach()
            per_seq = {
                "tokens": mask.sum(-1),
                "entropy": (entropy * mask).sum(-1),
                "clip_fraction": (clipped_tokens(lp, old, adv, tc.clip_low, tc.clip_high) * mask).sum(-1),
                "approx_kl": ((old - lp) * mask).sum(-1),
                "kl": (
                    (k3_kl(lp, ref_logp) * mask).sum(-1)
                    if ref_logp is not None
                    else torch.zeros(len(micro), device=lp.device)
                ),
            }
        seq_values = {k: v.tolist() for k, v in per_seq.items()}  # one device sync, not one per row
        for i, t in enumerate(micro):
            row = tally.setdefault(t.role, dict.fromkeys(TALLY_KEYS, 0.0))
            for k in TALLY_KEYS:
                row[k] += seq_values[k][i]

    # --- 3. the gradient ---

    def reduce_and_clip(self, grads: InstanceGradients | None, diagnose: bool) -> torch.Tensor:
        """Sum the gradient over processes (per instance when captured: reported to the monitor, each role's
        rescaled by the interventions), put it in `.grad` and clip it; returns the norm before clipping."""
        if grads is not None:
            grads.all_reduce(self.dist)  # per-instance gradients of the global batch
            if diagnose and self.monitor is not None:
                self.monitor.add_gradients(self.pid, grads.vectors, grads.role_of)  # raw, before any intervention
            coefs = (
                self.interventions.role_coefficients(self.pid, grads.role_vectors())
                if self.rescale and self.interventions
                else None
            )
            grads.write_back(coefs)
        else:
            self.dist.sum_gradients(self.params)
        return torch.nn.utils.clip_grad_norm_(self.params, self.tc.max_grad_norm)

    def skip(self) -> None:
        """Never train on a NaN/inf step: drop its gradients, count it, say so."""
        self.optimizer.zero_grad(set_to_none=True)
        self.result.stats["skipped_nan"] += 1
        self.result.skipped_in_a_row += 1
        log.warning("policy %s: non-finite loss or gradient; optimizer step skipped", self.pid)

    # --- 4. the optimizer step and the stats ---

    def step(self, mb: _MiniBatch, grad_norm: torch.Tensor) -> None:
        stats = self.result.stats
        before = flat_params(self.params) if self.monitor is not None else None
        try:
            self.optimizer.step()
        except RuntimeError as e:  # AdamW raises when lr x update overflows float32 (e.g. lr 1e38)
            if "overflow" not in str(e):
                raise
            raise NonFiniteUpdate(f"policy {self.pid!r}: the optimizer step overflowed ({e})") from None
        self.result.skipped_in_a_row = 0.0
        if self.monitor is not None and before is not None:
            roles = self.dist.concat(sorted({t.role for t in mb.turns}))
            self.monitor.add_update(self.pid, norm64(flat_params(self.params) - before), roles)
        stats["optimizer_steps"] += 1
        stats["loss"] += self.dist.total(mb.loss_sum)[0]
        self.grad_norms.append(float(grad_norm))
        merge_tallies(self.result.tally, self.dist.merge_tallies(mb.tally))

    def finish(self, turns: list[Turn]) -> None:
        stats, tally = self.result.stats, self.result.tally
        stats["loss"] /= max(stats["optimizer_steps"], 1)
        if self.tc.old_logprobs == "trainer":  # mean |sampler - trainer| log-prob per token, before this update
            gap_sum, gap_tokens = self.dist.total(*self.gap)
            stats["logprob_gap"] = gap_sum / gap_tokens if gap_tokens else float("nan")
        grad_norms = self.grad_norms
        stats["grad_norm"] = sum(grad_norms) / len(grad_norms) if grad_norms else float("nan")
        stats.update(tally_means({k: sum(row[k] for row in tally.values()) for k in TALLY_KEYS}))
        if self.monitor is not None:
            self.monitor.finish_policy(self.pid, self.dist.concat(turns), self.params)
