"""Loss functions against hand-computed values, and micro-batch == full-batch accumulation."""

from __future__ import annotations

import math

import pytest
import torch

from rolecast.objectives import head_logprobs
from rolecast.objectives.head_logprobs import entropy_from_logits, linear_logprobs, token_logprobs
from rolecast.objectives.losses import aggregate, clipped_surrogate, k3_kl, normalisers

D = torch.float64

# Hand example, clip range [1 - 0.2, 1 + 0.28] = [0.8, 1.28]; loss = max(-A*r, -A*clip(r)):
#   r=1.5, A=+1: -1.5 vs -1.28 -> -1.28 (clipped active)     r=1.5, A=-1: 1.5 vs 1.28 -> 1.5  (unclipped)
#   r=0.5, A=+1: -0.5 vs -0.8  -> -0.5  (unclipped)          r=0.5, A=-1: 0.5 vs 0.8  -> 0.8  (clipped active)
#   r=1.1, A=+2: inside range  -> -2.2                       r=1.2, A=-.5: inside     -> 0.6
# plus one masked token (r=3, A=1) and one pad. token-mean = (-1.28+1.5-0.5+0.8-2.2+0.6)/6 = -1.08/6 = -0.18
RATIOS = torch.tensor([[1.5, 1.5, 0.5, 3.0], [0.5, 1.1, 1.2, 1.0]], dtype=D)
ADV = torch.tensor([[1.0, -1.0, 1.0, 1.0], [-1.0, 2.0, -0.5, 0.0]], dtype=D)
MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 0]], dtype=D)


def test_clipped_surrogate_hand_example() -> None:
    logp = RATIOS.log().requires_grad_()
    loss, stats = clipped_surrogate(logp, torch.zeros_like(logp), ADV, MASK, clip_low=0.2, clip_high=0.28)
    assert loss.item() == pytest.approx(-0.18, abs=1e-12)
    assert stats["clip_fraction"] == pytest.approx(2 / 6)
    assert stats["ratio_mean"] == pytest.approx((1.5 + 1.5 + 0.5 + 0.5 + 1.1 + 1.2) / 6)
    k1 = -(2 * math.log(1.5) + 2 * math.log(0.5) + math.log(1.1) + math.log(1.2)) / 6
    assert stats["approx_kl"] == pytest.approx(k1)
    # d loss / d logp = -A * r / 6 on unclipped tokens, 0 where the clipped branch is active or masked
    loss.backward()
    want = torch.tensor([[0.0, 1.5, -0.5, 0.0], [0.0, -2.2, 0.6, 0.0]], dtype=D) / 6
    torch.testing.assert_close(logp.grad, want)


def test_symmetric_clip_changes_which_tokens_clip() -> None:
    # With clip_high=0.2 the r=1.5/A=+1 token clips at 1.2 instead of 1.28: -1.2 instead of -1.28.
    loss, _ = clipped_surrogate(RATIOS.log(), torch.zeros(2, 4, dtype=D), ADV, MASK, clip_low=0.2, clip_high=0.2)
    assert loss.item() == pytest.approx((-1.2 + 1.5 - 0.5 + 0.8 - 2.2 + 0.6) / 6)


def test_sequence_level_advantages_broadcast() -> None:
    ratios = torch.tensor([[1.5, 0.5], [1.5, 0.5]], dtype=D)
    adv = torch.tensor([1.0, -1.0], dtype=D)  # row 0: -1.28, -0.5; row 1: 1.5, 0.8
    loss, stats = clipped_surrogate(ratios.log(), torch.zeros(2, 2, dtype=D), adv, torch.ones(2, 2, dtype=D))
    assert loss.item() == pytest.approx((-1.28 - 0.5 + 1.5 + 0.8) / 4)
    assert stats["clip_fraction"] == pytest.approx(0.5)


def test_k3_hand_values() -> None:
    logp = torch.tensor([0.0, 0.0, math.log(2), -1.0], dtype=D)
    ref = torch.tensor([0.0, math.log(2), 0.0, -1.0], dtype=D)
    want = [0.0, 2 - math.log(2) - 1, 0.5 + math.log(2) - 1, 0.0]  # exp(d) - d - 1, d = ref - logp
    torch.testing.assert_close(k3_kl(logp, ref), torch.tensor(want, dtype=D))


def test_kl_term_added_to_loss() -> None:
    ref = torch.zeros(2, 4, dtype=D)  # d = -log r; k3 = 1/r + log r - 1
    logp = RATIOS.log()
    loss, stats = clipped_surrogate(logp, torch.zeros_like(logp), ADV, MASK, ref_logp=ref, kl_coef=0.1)
    k3 = [1 / r + math.log(r) - 1 for r in (1.5, 1.5, 0.5, 0.5, 1.1, 1.2)]
    assert stats["kl"] == pytest.approx(sum(k3) / 6)
    assert loss.item() == pytest.approx(-0.18 + 0.1 * sum(k3) / 6)
    loss0, stats0 = clipped_surrogate(logp, torch.zeros_like(logp), ADV, MASK, ref_logp=ref, kl_coef=0.0)
    assert loss0.item() == pytest.approx(-0.18) and stats0["kl"] == pytest.approx(sum(k3) / 6)


# per-token losses with junk (100) under the mask; a third, empty sequence
LOSS = torch.tensor([[1.0, 2.0, 3.0, 100.0], [4.0, 5.0, 100.0, 100.0], [100.0] * 4], dtype=D)
LMASK = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]], dtype=D)


def test_aggregation_hand_values() -> None:
    # verl's meanings (core_algos.agg_loss); sequence sums are 6 and 9 over 3 and 2 tokens, the third row is empty
    assert aggregate(LOSS, LMASK, "token-mean").item() == pytest.approx(15 / 5)
    assert aggregate(LOSS, LMASK, "seq-mean-token-mean").item() == pytest.approx((6 / 3 + 9 / 2) / 2)
    assert aggregate(LOSS, LMASK, "seq-mean-token-sum").item() == pytest.approx((6 + 9) / 2)
    assert aggregate(LOSS, LMASK, "seq-mean-token-sum", max_len=10).item() == pytest.approx((6 + 9) / 2)  # unused
    assert aggregate(LOSS, LMASK, "seq-mean-token-sum-norm", max_len=10).item() == pytest.approx((6 / 10 + 9 / 10) / 2)
    assert aggregate(LOSS, LMASK, "seq-mean-token-sum", total_seqs=3).item() == pytest.approx(15 / 3)
    # explicit global normalisers override the local counts
    assert aggregate(LOSS, LMASK, "token-mean", total_tokens=10).item() == pytest.approx(1.5)
    assert aggregate(LOSS, LMASK, "seq-mean-token-mean", total_seqs=4).item() == pytest.approx(6.5 / 4)
    assert normalisers(LMASK) == {"total_tokens": 5, "total_seqs": 2}
    with pytest.raises(ValueError, match="max_len"):
        aggregate(LOSS, LMASK, "seq-mean-token-sum-norm")
    with pytest.raises(ValueError, match="unknown"):
        aggregate(LOSS, LMASK, "token-sum")
    assert aggregate(LOSS, torch.zeros_like(LMASK), "token-mean").item() == 0.0  # empty batch: 0, not NaN


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"])
def test_micro_batches_accumulate_to_full_batch(mode: str) -> None:
    torch.manual_seed(0)
    B, T, Dim, V = 7, 9, 5, 11
    lengths = [9, 3, 1, 6, 0, 4, 8]  # includes an empty sequence
    feats = torch.randn(B, T, Dim, dtype=D)
    targets = torch.randint(0, V, (B, T))
    mask = (torch.arange(T)[None] < torch.tensor(lengths)[:, None]).to(D)
    adv = torch.randn(B, dtype=D)
    model = torch.nn.Linear(Dim, V).double()
    with torch.no_grad():
        old = token_logprobs(model(feats), targets) + 0.3 * torch.randn(B, T, dtype=D)
        ref = old + 0.2 * torch.randn(B, T, dtype=D)

    def loss_on(rows: slice, norm: dict[str, int]) -> torch.Tensor:
        width = max(max(lengths[rows]), 1)  # micro-batches are re-padded to their own longest sequence
        f, tg, m = feats[rows, :width], targets[rows, :width], mask[rows, :width]
        logp = token_logprobs(model(f), tg)
        loss, _ = clipped_surrogate(
            logp, old[rows, :width], adv[rows], m, agg=mode, ref_logp=ref[rows, :width], kl_coef=0.05, max_len=T, **norm
        )
        return loss

    full = loss_on(slice(0, B), {})
    full_grads = torch.autograd.grad(full, list(model.parameters()))
    norm = normalisers(mask)
    micro = [loss_on(s, norm) for s in (slice(0, 2), slice(2, 5), slice(5, 7))]
    total = sum(micro)
    micro_grads = torch.autograd.grad(total, list(model.parameters()))
    assert abs(total.item() - full.item()) < 1e-6
    for g_full, g_micro in zip(full_grads, micro_grads, strict=True):
        torch.testing.assert_close(g_micro, g_full, atol=1e-6, rtol=0)
    # the local-normaliser version is NOT equal (guards against the test passing vacuously)
    local = sum(loss_on(s, {}) for s in (slice(0, 2), slice(2, 5), slice(5, 7)))
    assert abs(local.item() - full.item()) > 1e-3


def test_token_logprobs_matches_log_softmax_and_chunks() -> None:
    torch.manual_seed(1)
    logits = torch.randn(3, 5, 17) * 4
    targets = torch.randint(0, 17, (3, 5))
    want = torch.log_softmax(logits, -1).gather(-1, targets[..., None]).squeeze(-1)
    for chunk in (1, 4, 2048):
        torch.testing.assert_close(token_logprobs(logits, targets, chunk_tokens=chunk), want)
    # bf16 logits are upcast before the logsumexp; result is float32
    assert token_logprobs(logits.bfloat16(), targets).dtype == torch.float32
    # hand value: logits [0, ln 3] -> p = [1/4, 3/4]
    lp = token_logprobs(torch.tensor([[[0.0, math.log(3)]]]), torch.tensor([[1]]))
    assert lp.item() == pytest.approx(math.log(0.75), abs=1e-6)


def test_entropy_hand_values() -> None:
    # row 0: uniform over 4 -> ln 4; row 1: p = [.25, .5, .25, 0] -> 1.5 ln 2; row 2: one-hot -> 0; row 3 masked
    logits = torch.tensor(
        [
            [
                [0.0, 0.0, 0.0, 0.0],
                [0.0, math.log(2), 0.0, -math.inf],
                [5.0, -math.inf, -math.inf, -math.inf],
                [9.0, 0.0, 0.0, 0.0],
            ]
        ],
        requires_grad=True,
    )
    mask = torch.tensor([[1, 1, 1, 0]])
    h = entropy_from_logits(logits, mask, chunk_tokens=3)
    assert h.item() == pytest.approx((math.log(4) + 1.5 * math.log(2) + 0.0) / 3, abs=1e-6)
    h.backward()
    assert torch.isfinite(logits.grad).all()


@pytest.mark.parametrize(
    "scale, chunk, bias, tile, block_rows",
    [
        (1.0, 5, False, None, 4096),
        (1 / 0.7, 3, True, None, 4096),
        (2.0, 1000, False, None, 4096),
        # the vocabulary in tiles (7 + 7 + 7 + 2 ids; 4 x 5 + 3): the forward's online softmax over row blocks of
        # `block_rows` (4 + 4 + 3; 2 x 5 + 1), the backward's row blocks (at least the forward's chunk: 5 + 5 + 1 rows;
        # 3 + 3 + 3 + 2)
        (1.0, 5, False, 7, 4),
        (1 / 0.7, 3, True, 4, 2),
    ],
)
def test_linear_logprobs_equal_autograd_through_log_softmax(scale, chunk, bias, tile, block_rows, monkeypatch) -> None:
    """The fused projection + log-prob + entropy (chunked or tiled, logits recomputed in backward) against plain
    autograd over log_softmax(scale * (h W^T + b)), in float64: values and gradients for h, W and b."""
    monkeypatch.setattr(head_logprobs, "BACKWARD_ROWS", block_rows)
    monkeypatch.setattr(head_logprobs, "FORWARD_ROWS", block_rows)
    g = torch.Generator().manual_seed(0)
    N, H, V = 11, 6, 23
    h = torch.randn(N, H, dtype=D, generator=g, requires_grad=True)
    w = torch.randn(V, H, dtype=D, generator=g, requires_grad=True)
    b = torch.randn(V, dtype=D, generator=g, requires_grad=True) if bias else None
    t = torch.randint(0, V, (N,), generator=g)
    coeff = torch.randn(N, dtype=D, generator=g)  # an arbitrary upstream gradient

    z = torch.nn.functional.linear(h, w, b) * scale
    logp_all = torch.log_softmax(z, -1)
    want_lp = logp_all.gather(-1, t[:, None]).squeeze(-1)
    want_ent = -(logp_all.exp() * logp_all).sum(-1)
    want_grads = torch.autograd.grad((want_lp * coeff).sum(), [h, w] + ([b] if bias else []))

    lp, ent = linear_logprobs(h, w, b, t, scale=scale, chunk_rows=chunk, vocab_tile=tile)
    assert not ent.requires_grad and lp.dtype == D
    torch.testing.assert_close(lp, want_lp, rtol=0, atol=1e-10)
    torch.testing.assert_close(ent, want_ent.detach(), rtol=0, atol=1e-10)
    got_grads = torch.autograd.grad((lp * coeff).sum(), [h, w] + ([b] if bias else []))
    for got, want in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-10)
    # float32 inputs give float32 outputs, close to the float64 reference
    lp32, _ = linear_logprobs(h.float(), w.float(), b.float() if bias else None, t, scale=scale, chunk_rows=chunk)
    assert lp32.dtype == torch.float32
    torch.testing.assert_close(lp32.double(), want_lp.detach(), rtol=1e-5, atol=1e-5)


def test_linear_logprobs_tiles_rescale_when_a_later_tile_holds_the_max(monkeypatch) -> None:
    """The tiled forward's running max: a row whose first tile's logits are ~300 below a later tile's (exp of the
    difference overflows float32 unless the sums are rescaled to the new max) and a row whose max is in its first
    tile; a vocabulary above FORWARD_MIN_VOCAB takes the tiled path without being asked. float32 against float64."""
    monkeypatch.setattr(head_logprobs, "FORWARD_MIN_VOCAB", 8)
    monkeypatch.setattr(head_logprobs, "FORWARD_TILE", 5)
    g = torch.Generator().manual_seed(1)
    V = 17  # tiles of 5 + 5 + 5 + 2 ids
    h = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=D)
    w = torch.randn(V, 2, dtype=D, generator=g)
    w[:5, 0] -= 150.0  # row 0: its first tile ~150 below the rest
    w[10:15, 0] += 150.0  # ... and its third tile ~150 above
    w[:5, 1] += 100.0  # row 1: the max in the first tile
    t = torch.tensor([12, 3])
    want = torch.log_softmax(h @ w.t(), -1)
    want_lp, want_ent = want[torch.arange(2), t], -(want.exp() * want).sum(-1)
    lp, ent = linear_logprobs(h.float(), w.float(), None, t)
    assert torch.isfinite(lp).all() and torch.isfinite(ent).all()
    torch.testing.assert_close(lp.double(), want_lp, rtol=0, atol=1e-4)
    torch.testing.assert_close(ent.double(), want_ent, rtol=0, atol=1e-4)
    lp64, ent64 = linear_logprobs(h, w, None, t)
    torch.testing.assert_close(lp64, want_lp, rtol=0, atol=1e-10)
    torch.testing.assert_close(ent64, want_ent, rtol=0, atol=1e-10)


def test_linear_logprobs_hand_values_and_frozen_head() -> None:
    # h = [1], W = [[0], [ln 3]]: logits [0, ln 3] -> p = [1/4, 3/4]; entropy = -(1/4 ln 1/4 + 3/4 ln 3/4)
    h = torch.tensor([[1.0]], requires_grad=True)
    w = torch.tensor([[0.0], [math.log(3)]])  # frozen (LoRA keeps the head frozen): no weight gradient
    lp, ent = linear_logprobs(h, w, None, torch.tensor([1]))
    assert lp.item() == pytest.approx(math.log(0.75), abs=1e-6)
    assert ent.item() == pytest.approx(-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)), abs=1e-6)
    lp.sum().backward()
    # d logp_1 / d h = W_1 - sum_v p_v W_v = ln 3 - 3/4 ln 3 = ln 3 / 4
    assert h.grad.item() == pytest.approx(math.log(3) / 4, abs=1e-6)
    assert w.grad is None


def test_linear_logprobs_tiled_forward_rejects_a_target_outside_the_vocabulary() -> None:
    h, w = torch.randn(3, 2), torch.randn(9, 2)
    with pytest.raises(IndexError, match=r"\[0, 9\)"):
        linear_logprobs(h, w, None, torch.tensor([0, 9, 2]), vocab_tile=4)
