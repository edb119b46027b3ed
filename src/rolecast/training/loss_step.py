"""The loss step of one policy's update: one micro-batch's forward, loss and backward, and what it adds to the
update's per-role token tallies.

The loss of a micro-batch is normalised by its whole mini-batch's token and sequence counts (`MiniBatch.of`, summed
over the processes of a data-parallel run), so the micro-batches' gradients add up to the mini-batch's exactly,
however the rows are split. Per row it is the clipped surrogate of objectives/losses.py against the old log-probs
(training/old_logprobs.py), plus the k3 KL to the starting model where a KL coefficient is set (train.kl_coef, or per
role with interventions.kl_coef_by_role), each row weighted by interventions.multiplicity_norm.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from rolecast.config.schema import RunConfig
from rolecast.core.episode import Turn
from rolecast.objectives.losses import clipped_surrogate, clipped_tokens, k3_kl
from rolecast.policies.models import PolicySet
from rolecast.training.batching import collate, generation_caps, to_device
from rolecast.training.distributed import Dist
from rolecast.training.interventions import Interventions
from rolecast.training.logprobs import completion_logprobs
from rolecast.training.old_logprobs import OldLogprobs

# per-role token sums an update reports: {role: {key: sum over tokens}}
TALLY_KEYS = ("tokens", "entropy", "clip_fraction", "approx_kl", "kl")
Tally = dict[str, dict[str, float]]


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
class MiniBatch:
    """One optimizer step's rows, and what its micro-batches add up."""

    turns: list[Turn]
    norms: dict[str, int]  # the whole mini-batch's token and sequence counts: every micro-batch's normalisers
    scale: float = 1.0  # train.minibatch_scale nominal: its rows / train.mini_batch_size
    loss_sum: float = 0.0
    tally: Tally = field(default_factory=dict)

    @classmethod
    def of(cls, turns: list[Turn], cfg: RunConfig, dist: Dist) -> MiniBatch:
        """The mini-batch of `turns` (this process's share), its normalisers counted over every process."""
        tokens, seqs = dist.total(sum(len(t.completion_ids) for t in turns), sum(1 for t in turns if t.completion_ids))
        mb = cls(turns, {"total_tokens": int(tokens), "total_seqs": int(seqs)})
        if cfg.train.minibatch_scale == "nominal":  # a short (last) mini-batch takes a proportionally smaller step
            mb.scale = dist.total(len(turns))[0] / cfg.train.mini_batch_size
        return mb


class LossStep:
    """Forward, loss and backward of one micro-batch of policy `pid` (module docstring); `__call__` returns False,
    with no backward, when the loss is not finite."""

    def __init__(
        self,
        pid: str,
        cfg: RunConfig,
        policies: PolicySet,
        pad_id: int,
        old: OldLogprobs,
        interventions: Interventions | None,
        instance_counts: dict[str, int],
    ):
        self.pid, self.cfg, self.train = pid, cfg, cfg.train
        self.policies, self.pad_id, self.old = policies, pad_id, old
        self.temperature = cfg.rollout.temperature
        self.interventions = interventions
        self.instance_counts = instance_counts  # a role's parallel instances on this policy (multiplicity_norm)

    def __call__(self, model: torch.nn.Module, micro: list[Turn], mb: MiniBatch) -> bool:
        train = self.train
        batch = to_device(collate(micro, self.pad_id), self.policies.device)
        logp, entropy = completion_logprobs(model, batch, self.temperature)
        mask, adv = batch["mask"], batch["advantages"]
        old = self.old.for_micro(logp, batch["old_logp"], mask, micro)
        roles = [t.role for t in micro]
        kl_coef, ref_logp = self._reference(batch, roles, logp.device)
        self.old.check_sampler(logp, old, mask)
        weights = (
            self.interventions.row_weights(roles, self.instance_counts) if self.interventions is not None else None
        )
        loss, _ = clipped_surrogate(
            logp,
            old,
            adv,
            mask,
            train.clip_low,
            train.clip_high,
            train.loss_agg,
            ref_logp=ref_logp,
            kl_coef=kl_coef,
            max_len=to_device(generation_caps(self.cfg, micro), logp.device),
            row_weights=to_device(weights, logp.device),
            dual_clip=train.dual_clip,
            **mb.norms,
        )
        if train.minibatch_scale == "nominal":  # verl: each micro-batch x its rows / mini-batch size
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
        kl_coef: float | torch.Tensor = self.train.kl_coef
        row_kl = self.interventions.kl_coefs(roles) if self.interventions is not None else None
        if row_kl is not None:
            kl_coef = row_kl.to(device)
        ref_logp = None
        if self.train.kl_coef > 0 or (row_kl is not None and bool((row_kl > 0).any())):
            with torch.no_grad(), self.policies.reference_model() as ref:
                ref_logp, _ = completion_logprobs(ref, batch, self.temperature)
        return kl_coef, ref_logp

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
        train = self.train
        with torch.no_grad():
            lp = logp.detach()
            per_seq = {
                "tokens": mask.sum(-1),
                "entropy": (entropy * mask).sum(-1),
                "clip_fraction": (clipped_tokens(lp, old, adv, train.clip_low, train.clip_high) * mask).sum(-1),
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
