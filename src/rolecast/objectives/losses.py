"""Policy-gradient losses as pure tensor functions: the clipped surrogate, the k3 KL and the loss aggregations. The
log-probs they take come from the output head's kernel beside this module (objectives/head_logprobs.py).

Shapes: `B` sequences, `T` (completion) positions, `V` vocabulary. `mask [B, T]` marks real completion
tokens (1) versus padding / prompt (0); everything masked out contributes nothing to losses, gradients or
statistics.

Micro-batching: the trainer splits one policy's batch into micro-batches and accumulates gradients. For
the accumulated gradient to equal the full-batch gradient, each micro-batch's loss must be normalised by
the *whole batch's* token / sequence counts, not its own. So every aggregation takes optional global
normalisers: compute them once with `normalisers(full_mask)` (or `normalisers(*micro_masks)`) and pass
them to every micro-batch call; then `sum(micro losses) == full-batch loss`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from rolecast.core.registry import Registry

# ---------------------------------------------------------------------------------------------------------
# Aggregation

AggregationFn = Callable[..., torch.Tensor]
AGGREGATIONS: Registry[AggregationFn] = Registry("loss aggregation")
register_aggregation = AGGREGATIONS.register


def normalisers(*masks: torch.Tensor) -> dict[str, int]:
    """Token and (non-empty) sequence counts over one or more masks: the global normalisers of a batch."""
    return {
        "total_tokens": int(sum(int(m.sum()) for m in masks)),
        "total_seqs": int(sum(int((m.sum(-1) > 0).sum()) for m in masks)),
    }


def _at_least_one(n: int | torch.Tensor) -> int | torch.Tensor:
    return max(n, 1) if isinstance(n, int) else n.clamp(min=1)  # an empty batch gives loss 0, not NaN


def _seq_count(mask: torch.Tensor, total_seqs: int | None) -> int | torch.Tensor:
    # Sequences with no completion token carry no loss and must not dilute the mean.
    return _at_least_one(total_seqs if total_seqs is not None else (mask.sum(-1) > 0).sum())


Tensor = torch.Tensor


# The four names are verl's `loss_agg_mode`s (verl/trainer/ppo/core_algos.py `agg_loss`) with verl's meaning:
#   token-mean               sum of masked token losses / number of masked tokens
#   seq-mean-token-mean      mean over sequences of each sequence's token mean (original GRPO)
#   seq-mean-token-sum       mean over sequences of each sequence's token SUM (no length normalisation)
#   seq-mean-token-sum-norm  the same, each sum divided by a constant length first (Dr. GRPO); verl's default
#                            constant is the padded width, ours must be given (`max_len`, the trainer passes
#                            rollout.max_new_tokens) because a padded width differs between micro-batches.
# One deliberate difference: a sequence with no masked token does not count in the sequence mean (verl divides
# by the number of rows), so padding rows never dilute the loss; the trainer drops empty completions anyway.


@register_aggregation("token-mean")
def _token_mean(loss: Tensor, mask: Tensor, *, total_tokens: int | None = None, **_: object) -> Tensor:
    """Every token weighs the same: sum over masked tokens / number of masked tokens (in the whole batch)."""
    return (loss * mask).sum() / _at_least_one(total_tokens if total_tokens is not None else mask.sum())


@register_aggregation("seq-mean-token-mean")
def _seq_mean_token_mean(loss: Tensor, mask: Tensor, *, total_seqs: int | None = None, **_: object) -> Tensor:
    """Every sequence weighs the same (original GRPO): mean over sequences of per-sequence token means."""
    per_seq = (loss * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    return per_seq.sum() / _seq_count(mask, total_seqs)


@register_aggregation("seq-mean-token-sum")
def _seq_mean_token_sum(loss: Tensor, mask: Tensor, *, total_seqs: int | None = None, **_: object) -> Tensor:
    """Every token of a sequence adds up and every sequence weighs the same: mean over sequences of per-sequence
    token sums (a longer completion carries proportionally more loss)."""
    return (loss * mask).sum() / _seq_count(mask, total_seqs)


@register_aggregation("seq-mean-token-sum-norm")
def _seq_mean_token_sum_norm(
    loss: Tensor, mask: Tensor, *, total_seqs: int | None = None, max_len: int | Tensor | None = None, **_: object
) -> Tensor:
    """Dr. GRPO: per-sequence token sums divided by a constant `max_len`, then averaged over sequences.

    `max_len` is required (e.g. the generation budget `max_new_tokens`): defaulting to the padded width
    would differ between micro-batches and silently break gradient accumulation. With per-role generation
    caps it is a tensor [B]: each row divided by its own role's cap.
    """
    if max_len is None:
        raise ValueError("seq-mean-token-sum-norm needs max_len (a constant, e.g. max_new_tokens)")
    if isinstance(max_len, Tensor):
        return ((loss * mask).sum(-1) / max_len.to(loss.dtype)).sum() / _seq_count(mask, total_seqs)
    return (loss * mask).sum() / max_len / _seq_count(mask, total_seqs)


def aggregate(
    per_token_loss: torch.Tensor,
    mask: torch.Tensor,
    mode: str = "token-mean",
    *,
    total_tokens: int | None = None,
    total_seqs: int | None = None,
    max_len: int | torch.Tensor | None = None,
) -> torch.Tensor:
    """Reduce a `[B, T]` per-token loss to a scalar; pass the whole batch's normalisers when micro-batching."""
    fn = AGGREGATIONS.resolve(mode, "train.loss_agg")
    m = mask.to(per_token_loss.dtype)
    return fn(per_token_loss, m, total_tokens=total_tokens, total_seqs=total_seqs, max_len=max_len)


# ---------------------------------------------------------------------------------------------------------
# Surrogate and KL


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimator of KL(pi || ref): exp(ref - logp) - (ref - logp) - 1 >= 0 (Schulman).

    The log-ratio is clamped to [-20, 20] only so exp cannot overflow on garbage tokens.
    """
    d = (ref_logp - logp).clamp(-20.0, 20.0)
    return d.exp() - d - 1


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    return float((x * mask).sum() / mask.sum().clamp(min=1))


def clipped_tokens(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, clip_low: float = 0.2, clip_high: float = 0.28
) -> torch.Tensor:
    """`[B, T]` bool: tokens where the clipped branch is active (and so carries no gradient)."""
    adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
    ratio = (logp - old_logp).clamp(-20.0, 20.0).exp()
    return (-adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)) > (-adv * ratio)


def clipped_surrogate(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    agg: str = "token-mean",
    *,
    ref_logp: torch.Tensor | None = None,
    kl_coef: float | torch.Tensor = 0.0,
    total_tokens: int | None = None,
    total_seqs: int | None = None,
    max_len: int | torch.Tensor | None = None,
    row_weights: torch.Tensor | None = None,
    dual_clip: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO clipped surrogate with asymmetric clip (DAPO "clip-higher"), optionally plus `kl_coef * k3`.

    `dual_clip` (c > 1, dual-clip PPO, Ye et al. 2020, arXiv 1912.09729; verl's `clip_ratio_c`, on in the
    reference study with c = 3): where the advantage is negative, the per-token loss is also capped at `-A * c`,
    so a token whose ratio has grown past c contributes a constant (no gradient) instead of an unbounded one.
    The cap applies to the policy-gradient term only, before any KL term, as in verl.

    `kl_coef` is one number or one per row `[B]` (interventions.kl_coef_by_role); `row_weights [B]` multiply
    each row's per-token loss before aggregation (interventions.multiplicity_norm); the normalisers are not
    reweighted, so a weight of 1/N divides that row's part of the loss by N.

    ratio = exp(logp - old_logp); per-token loss = max(-A * ratio, -A * clip(ratio, 1 - clip_low, 1 + clip_high)).
    `advantages` is `[B]` (one per sequence) or `[B, T]`. Stats are masked means over *this* call:
    `clip_fraction` (tokens where the clipped branch is the active, gradient-free one), `ratio_mean`,
    `approx_kl` (k1: mean of old_logp - logp, the drift since sampling) and, with `ref_logp`, `kl` (k3 mean).
    """
    m = mask.to(logp.dtype)
    adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
    log_ratio = (logp - old_logp).clamp(-20.0, 20.0)  # overflow guard only; real ratios are near 1
    ratio = log_ratio.exp()
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    per_token = torch.maximum(unclipped, clipped)
    if dual_clip is not None:
        if not dual_clip > 1.0:
            raise ValueError(f"dual_clip must be > 1 (verl's clip_ratio_c), got {dual_clip}")
        per_token = torch.where(adv < 0, torch.minimum(-adv * dual_clip, per_token), per_token)
    stats = {
        "clip_fraction": _masked_mean(clipped_tokens(logp, old_logp, advantages, clip_low, clip_high).to(m.dtype), m),
        "ratio_mean": _masked_mean(ratio.detach(), m),
        "approx_kl": _masked_mean(-log_ratio.detach(), m),
    }
    if dual_clip is not None:  # verl's pg_clipfrac_lower: tokens held at the dual-clip bound -A * c
        lower = (adv < 0) & (torch.maximum(unclipped, clipped) > -adv * dual_clip)
        stats["dual_clip_fraction"] = _masked_mean(lower.detach().to(m.dtype), m)
    if ref_logp is not None:
        kl = k3_kl(logp, ref_logp)
        stats["kl"] = _masked_mean(kl.detach(), m)
        if isinstance(kl_coef, torch.Tensor):
            per_token = per_token + kl_coef.to(per_token.dtype).unsqueeze(-1) * kl
        elif kl_coef:
            per_token = per_token + kl_coef * kl
    if row_weights is not None:
        per_token = per_token * row_weights.to(per_token.dtype).unsqueeze(-1)
    loss = aggregate(per_token, m, agg, total_tokens=total_tokens, total_seqs=total_seqs, max_len=max_len)
    return loss, stats
