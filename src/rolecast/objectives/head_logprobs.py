"""Log-probs and entropies of the output head: log softmax(scale * (h W^T + b))[target] per position, as pure tensor
functions. The loss (objectives/losses.py) takes these log-probs; the trainer computes them through
training/logprobs.py, which calls `linear_logprobs` for a plain linear head.

- `linear_logprobs`: a custom autograd kernel. The vocabulary projection, the log-normaliser, the target's log-prob
  and the entropy come from one pass over each chunk of rows (or, on the CPU above FORWARD_MIN_VOCAB ids, over
  [rows x vocabulary] tiles with an online softmax), and backward recomputes the logits block by block from the
  saved inputs and one log-normaliser per row, so no `[N, V]` tensor is ever kept. Tested equal to autograd through
  `log_softmax(head(h))` (values and gradients) in tests/test_losses.py.
- `token_logprobs`, `token_entropy`, `entropy_from_logits`: the same quantities from logits already computed
  (heads that are not a plain linear layer), chunked over rows.
"""

from __future__ import annotations

import math

import torch


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


# Backward's blocks: up to BACKWARD_ROWS rows at a time (at least the forward's chunk), the vocabulary in tiles of
# about CHUNK_ELEMENTS / rows ids, so the weight gradient of a tile is one matmul over all the block's rows and is
# written once per block (per chunk of ~110 rows at Qwen3's 151,669 ids, accumulating a 116 MB gradient 30 times
# was most of the head's backward). Where one tile holds the whole vocabulary and one block all rows (the testbed's
# 2,048 ids) the backward is the row-chunked one, op for op.
CHUNK_ELEMENTS = 1 << 24
BACKWARD_ROWS = 4096
MIN_TILE = 256
# Forward over a vocabulary of more than FORWARD_MIN_VOCAB ids: rows in blocks of FORWARD_ROWS, the vocabulary in tiles
# of FORWARD_TILE ids, the softmax's max, sum of exponentials and exp-weighted logit sum kept per row as each tile
# comes (the online softmax). A [1,024 x 1,024] tile (4 MB) is still in the cores' caches for the passes that follow
# its matmul; a chunk of ~110 full rows at Qwen3's 151,669 ids (67 MB) is not, and its four passes (max, exp, sum,
# dot) took twice the matmul's time (docs/benchmarks.md: head forward at 3,072 x 151,669, 2 threads, 1.84 -> 1.31 s).
# Smaller vocabularies (the testbed's 2,048 ids) keep the row-chunked forward, op for op: there the tiles would
# save ~4 of 23 ms per 3,072 positions, not worth moving every testbed result by float32 rounding. So do GPUs.
FORWARD_MIN_VOCAB = 16384
FORWARD_ROWS = 1024
FORWARD_TILE = 1024


class _LinearLogprobs(torch.autograd.Function):
    """See `linear_logprobs`. Saves only the inputs and one log-normaliser per row; backward recomputes the
    logits block by block: d logp_t / d z = onehot(t) - softmax(z), times the scale, where softmax(z) =
    exp(z - lse) needs only the saved normaliser, so the vocabulary can be tiled."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, scale: float, chunk: int, tile: int | None):
        n, dtype = hidden.shape[0], _compute_dtype(hidden)
        logp, entropy, lse = (hidden.new_empty(n, dtype=dtype) for _ in range(3))
        ctx.scale, ctx.chunk, ctx.tile = scale, chunk, tile
        ctx.mark_non_differentiable(entropy)
        # tiles are a CPU cache layout: on an accelerator the row chunks stay (a tile's dozen small kernel launches
        # would cost more there than the passes they keep in cache)
        large_cpu = weight.shape[0] > FORWARD_MIN_VOCAB and hidden.device.type == "cpu"
        forward_tile = tile if tile is not None else FORWARD_TILE if large_cpu else None
        if forward_tile is not None and forward_tile < weight.shape[0]:
            _tiled_forward(hidden, weight, bias, targets, scale, forward_tile, logp, entropy, lse)
        else:
            _chunked_forward(hidden, weight, bias, targets, scale, chunk, logp, entropy, lse)
        ctx.save_for_backward(hidden, weight, bias, targets, lse)
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp, _grad_entropy):
        hidden, weight, bias, targets, lse = ctx.saved_tensors
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        n, V = hidden.shape[0], weight.shape[0]
        grad_h = torch.zeros_like(hidden) if need_h else None
        grad_w = torch.zeros_like(weight, dtype=lse.dtype) if need_w else None
        grad_b = torch.zeros_like(bias, dtype=lse.dtype) if need_b and bias is not None else None
        block = max(ctx.chunk, min(n, BACKWARD_ROWS))
        tile = min(V, ctx.tile or max(MIN_TILE, CHUNK_ELEMENTS // min(block, max(n, 1))))
        z_buf = _chunk_buffers(hidden[:block], weight[:tile], block)
        for s in range(0, n, block):
            h, t = hidden[s : s + block], targets[s : s + block]
            h_c = h.to(lse.dtype)  # the block's rows in the compute dtype, for every tile's weight gradient
            g, lse_b = grad_logp[s : s + block].to(lse.dtype), lse[s : s + block, None]
            rows = torch.arange(h.shape[0], device=h.device)
            hits = _rows_by_tile(t, V, tile) if tile < V else None
            for k, v in enumerate(range(0, V, tile)):
                w_t = weight[v : v + tile]
                # d loss / d z = g * (onehot(t) - p), then times the scale of z = scale * (h W^T + b)
                dz = _scaled_logits(h, w_t, None if bias is None else bias[v : v + tile], ctx.scale, z_buf)
                dz = dz.sub_(lse_b).exp_().mul_(-g[:, None])
                if hits is None:
                    dz[rows, t] += g
                elif (hit := hits[k]) is not None:  # the rows whose target falls in this tile
                    dz[hit, t[hit] - v] += g[hit]
                if ctx.scale != 1.0:
                    dz.mul_(ctx.scale)
                if grad_w is not None:  # accumulated in the compute dtype, before dz is cast to the model's
                    grad_w[v : v + tile].addmm_(dz.t(), h_c)
                if grad_b is not None:
                    grad_b[v : v + tile] += dz.sum(0)
                if grad_h is not None:
                    part = dz.to(hidden.dtype) @ w_t
                    if v == 0:
                        grad_h[s : s + block] = part
                    else:
                        grad_h[s : s + block] += part
        return (
            grad_h,
            grad_w.to(weight.dtype) if grad_w is not None else None,
            grad_b.to(bias.dtype) if grad_b is not None else None,
            None,
            None,
            None,
            None,
        )


def _chunked_forward(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    scale: float,
    chunk: int,
    logp: torch.Tensor,
    entropy: torch.Tensor,
    lse: torch.Tensor,
) -> None:
    """`_LinearLogprobs.forward` over chunks of `chunk` whole rows, written into logp, entropy and lse."""
    z_buf, e_buf = _chunk_buffers(hidden, weight, chunk), _chunk_buffers(hidden, weight, chunk)
    for s in range(0, hidden.shape[0], chunk):
        z = _scaled_logits(hidden[s : s + chunk], weight, bias, scale, z_buf)
        m = z.amax(-1, keepdim=True)
        e = (torch.sub(z, m, out=e_buf[: z.shape[0]]) if e_buf is not None else z - m).exp_()
        total = e.sum(-1, keepdim=True)
        lse_c = (m + total.log()).squeeze(-1)
        rows = torch.arange(z.shape[0], device=z.device)
        lse[s : s + chunk] = lse_c
        logp[s : s + chunk] = z[rows, targets[s : s + chunk]] - lse_c
        # H = lse - sum_v p_v z_v, with p = e / total; a batched dot avoids another [rows, V] temporary
        entropy[s : s + chunk] = lse_c - (e.unsqueeze(1) @ z.unsqueeze(2)).view(-1) / total.squeeze(-1)


def _tiled_forward(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    scale: float,
    tile: int,
    logp: torch.Tensor,
    entropy: torch.Tensor,
    lse: torch.Tensor,
) -> None:
    """`_LinearLogprobs.forward` in [FORWARD_ROWS x tile] blocks, written into logp, entropy and lse. Per row, over
    the tiles: m, the running max; total = sum exp(z - m); dot = sum exp(z - m) z; both rescaled by exp(m_old - m)
    when the max grows. Then lse = m + log(total) and entropy = lse - dot / total (H = lse - sum_v p_v z_v), as the
    row-chunked forward computes them from whole rows. The target's logit is read from the tile that holds it."""
    n, V = hidden.shape[0], weight.shape[0]
    rows = min(FORWARD_ROWS, max(n, 1))
    z_buf = _chunk_buffers(hidden[:rows], weight[:tile], rows)
    e_buf = _chunk_buffers(hidden[:rows], weight[:tile], rows)
    for s in range(0, n, rows):
        h, t = hidden[s : s + rows], targets[s : s + rows]
        hits = _rows_by_tile(t, V, tile)
        z_t = logp.new_empty(h.shape[0])
        # before the first tile: max -inf, so its rescale factor exp(-inf - max) is 0 and the sums start at its own
        m = h.new_full((h.shape[0], 1), float("-inf"), dtype=logp.dtype)
        total, dot = logp.new_zeros(h.shape[0], 1), logp.new_zeros(h.shape[0], 1)
        for k, v in enumerate(range(0, V, tile)):
            z = _scaled_logits(h, weight[v : v + tile], None if bias is None else bias[v : v + tile], scale, z_buf)
            m_new = torch.maximum(m, z.amax(-1, keepdim=True))
            alpha = (m - m_new).exp_()  # rescales the sums so far to the new max (1 where it did not grow)
            e = (torch.sub(z, m_new, out=_view(e_buf, z.shape)) if e_buf is not None else z - m_new).exp_()
            total.mul_(alpha).add_(e.sum(-1, keepdim=True))
            dot.mul_(alpha).add_((e.unsqueeze(1) @ z.unsqueeze(2)).view(-1, 1))
            m = m_new
            if (hit := hits[k]) is not None:
                z_t[hit] = z[hit, t[hit] - v]
        lse_b = (m + total.log()).squeeze(-1)
        lse[s : s + rows] = lse_b
        logp[s : s + rows] = z_t - lse_b
        entropy[s : s + rows] = lse_b - (dot / total).squeeze(-1)


def _rows_by_tile(targets: torch.Tensor, V: int, tile: int) -> list[torch.Tensor | None]:
    """Per vocabulary tile `[k * tile, (k + 1) * tile)`: the indices of the rows whose target it holds, or None for
    none; from one sort of the targets. Raises IndexError for a target outside [0, V), as a gather would."""
    order = torch.argsort(targets)
    starts = torch.arange(0, V + tile, tile, device=targets.device).clamp_(max=V)
    bounds = torch.searchsorted(targets[order], starts).tolist()
    if bounds[0] != 0 or bounds[-1] != targets.shape[0]:
        raise IndexError(f"target ids must lie in [0, {V}): got {int(targets.min())}..{int(targets.max())}")
    return [order[lo:hi] if hi > lo else None for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]


def _view(buf: torch.Tensor, shape: tuple[int, ...] | torch.Size) -> torch.Tensor:
    """A contiguous view of `buf`'s first elements in `shape` (a block's rows, or a narrower last tile)."""
    return buf.view(-1)[: math.prod(shape)].view(shape)


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.promote_types(x.dtype, torch.float32)  # at least float32 (bf16 / fp16 models upcast)


def _chunk_buffers(hidden: torch.Tensor, weight: torch.Tensor, chunk: int) -> torch.Tensor | None:
    """One `[chunk, V]` buffer that every chunk's logits are written into (issue 25): a fresh ~64 MB tensor per
    chunk costs the kernel's page faults and zeroing on every allocation, ~15% of the head at Qwen3's vocabulary.
    Only where the projection's output is already in the compute dtype (float32 / float64 models); else None."""
    if hidden.dtype != _compute_dtype(hidden) or weight.dtype != hidden.dtype:
        return None
    return hidden.new_empty(min(chunk, hidden.shape[0]), weight.shape[0])


def _scaled_logits(
    h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, scale: float, out: torch.Tensor | None = None
) -> torch.Tensor:
    if out is not None:  # F.linear's own kernels (mm, or addmm with a bias), written into the buffer
        buf = _view(out, (h.shape[0], weight.shape[0]))  # a chunk's rows, or a narrower last vocabulary tile
        z = torch.addmm(bias, h, weight.t(), out=buf) if bias is not None else torch.mm(h, weight.t(), out=buf)
    else:
        z = torch.nn.functional.linear(h, weight, bias).to(_compute_dtype(h))
    return z.mul_(scale) if scale != 1.0 else z


def linear_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    scale: float = 1.0,
    chunk_rows: int | None = None,
    vocab_tile: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """log softmax(scale * (hidden W^T + b))[target] and the entropy of that softmax, per row of
    `hidden [N, H]`: `(logp [N], differentiable; entropy [N], not)`, in float32 (float64 for float64 inputs).

    The vocabulary projection, the log-normaliser, the target's log-prob and the entropy come from one pass over
    each chunk of rows, and backward recomputes the chunk's logits from the saved inputs, so no `[N, V]` tensor
    is ever kept: a chunk is ~64 MB of float32 logits at most (~100 rows of Qwen3's 151,669 ids); on the CPU,
    above FORWARD_MIN_VOCAB ids, the forward goes through [1,024 x 1,024] tiles with an online softmax instead.
    Compared with autograd over `log_softmax(head(h))` plus a separate entropy pass, this does one projection fewer per
    chunk and a few full-vocabulary passes instead of a dozen. `vocab_tile`: the vocabulary tile of the backward and,
    where smaller than the vocabulary, of the forward (None: sized to the block, see BACKWARD_ROWS and
    FORWARD_TILE; tests set it small)."""
    if chunk_rows is None:
        chunk_rows = max(1, CHUNK_ELEMENTS // max(weight.shape[0], 1))
    return _LinearLogprobs.apply(hidden, weight, bias, targets.long(), float(scale), int(chunk_rows), vocab_tile)


def entropy_from_logits(logits: torch.Tensor, mask: torch.Tensor, chunk_tokens: int = 2048) -> torch.Tensor:
    """Mean entropy (nats) of softmax(logits) over masked positions; 0-dim float32 tensor."""
    m = mask.float()
    return (token_entropy(logits, chunk_tokens) * m).sum() / m.sum().clamp(min=1)
