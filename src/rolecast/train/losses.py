"""Policy-gradient losses as pure tensor functions.

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

from typing import Callable, Iterable

import torch

# ---------------------------------------------------------------------------------------------------------
# Log-probs and entropy


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, chunk_tokens: int = 2048) -> torch.Tensor:
    """log softmax(logits)[target] per position, float32, `[B, T]`.

    Uses logsumexp + gather on chunks of rows instead of a full `log_softmax`, so the only `[*, V]`
    tensor created is a float32 copy of one chunk (none at all when logits are already float32).
    """
    B, T, V = logits.shape
    flat = logits.reshape(B * T, V)
    idx = targets.reshape(B * T, 1).long()
    out = []
    for s in range(0, B * T, chunk_tokens):
        x = flat[s : s + chunk_tokens].float()
        out.append(x.gather(-1, idx[s : s + chunk_tokens]).squeeze(-1) - torch.logsumexp(x, dim=-1))
    return (torch.cat(out) if out else flat.new_zeros(0, dtype=torch.float32)).reshape(B, T)


def token_entropy(logits: torch.Tensor, chunk_tokens: int = 2048) -> torch.Tensor:
    """Entropy (nats) of softmax(logits) at every position, float32 `[B, T]`."""
    B, T, V = logits.shape
    flat = logits.reshape(B * T, V)
    out = []
    for s in range(0, B * T, chunk_tokens):
        logp = torch.log_softmax(flat[s : s + chunk_tokens].float(), dim=-1)
        p = logp.exp()
        # -inf logits have p = 0; zero their logp first so 0 * -inf cannot turn into NaN (value or grad)
        out.append(-(p * logp.masked_fill(p == 0, 0.0)).sum(-1))
    return (torch.cat(out) if out else flat.new_zeros(0, dtype=torch.float32)).reshape(B, T)


def entropy_from_logits(logits: torch.Tensor, mask: torch.Tensor, chunk_tokens: int = 2048) -> torch.Tensor:
    """Mean entropy (nats) of softmax(logits) over masked positions; 0-dim float32 tensor."""
    m = mask.float()
    return (token_entropy(logits, chunk_tokens) * m).sum() / m.sum().clamp(min=1)


# ---------------------------------------------------------------------------------------------------------
# Aggregation

AggregationFn = Callable[..., torch.Tensor]
AGGREGATIONS: dict[str, AggregationFn] = {}


def register_aggregation(name: str) -> Callable[[AggregationFn], AggregationFn]:
    def deco(fn: AggregationFn) -> AggregationFn:
        AGGREGATIONS[name] = fn
        return fn

    return deco


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
def _seq_mean_token_sum(
    loss: Tensor, mask: Tensor, *, total_seqs: int | None = None, max_len: int | None = None, **_: object
) -> Tensor:
    """Dr. GRPO: per-sequence token sums divided by a constant `max_len`, then averaged over sequences.

    `max_len` is required (e.g. the generation budget `max_new_tokens`): defaulting to the padded width
    would differ between micro-batches and silently break gradient accumulation.
    """
    if max_len is None:
        raise ValueError("seq-mean-token-sum needs max_len (a constant, e.g. max_new_tokens)")
    return (loss * mask).sum() / max_len / _seq_count(mask, total_seqs)


def aggregate(
    per_token_loss: torch.Tensor,
    mask: torch.Tensor,
    mode: str = "token-mean",
    *,
    total_tokens: int | None = None,
    total_seqs: int | None = None,
    max_len: int | None = None,
) -> torch.Tensor:
    """Reduce a `[B, T]` per-token loss to a scalar; pass the whole batch's normalisers when micro-batching."""
    if mode not in AGGREGATIONS:
        raise ValueError(f"unknown loss aggregation {mode!r}; known: {sorted(AGGREGATIONS)}")
    m = mask.to(per_token_loss.dtype)
    return AGGREGATIONS[mode](per_token_loss, m, total_tokens=total_tokens, total_seqs=total_seqs, max_len=max_len)


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


def clipped_tokens(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, clip_low: float = 0.2,
                   clip_high: float = 0.28) -> torch.Tensor:
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
    kl_coef: float = 0.0,
    total_tokens: int | None = None,
    total_seqs: int | None = None,
    max_len: int | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO clipped surrogate with asymmetric clip (DAPO "clip-higher"), optionally plus `kl_coef * k3`.

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
    stats = {
        "clip_fraction": _masked_mean(clipped_tokens(logp, old_logp, advantages, clip_low, clip_high).to(m.dtype), m),
        "ratio_mean": _masked_mean(ratio.detach(), m),
        "approx_kl": _masked_mean(-log_ratio.detach(), m),
    }
    if ref_logp is not None:
        kl = k3_kl(logp, ref_logp)
        stats["kl"] = _masked_mean(kl.detach(), m)
        if kl_coef:
            per_token = per_token + kl_coef * kl
    loss = aggregate(per_token, m, agg, total_tokens=total_tokens, total_seqs=total_seqs, max_len=max_len)
    return loss, stats
