"""The numba kernels behind `rollout.cpu_kernels` (imported through `cpu_kernels.load()`, which falls back to
torch ops when numba is missing). See cpu_kernels.py for why and how exact."""

from __future__ import annotations

import numba  # noqa: TID253  (the optional module itself: only cpu_kernels.load() imports it, by name)
import numpy as np

_jit = numba.njit(cache=True, nogil=True)
_ONE = np.float32(1.0)


@_jit
def rms_norm(x, weight, eps, out):
    """out[b] = weight * (x[b] / sqrt(mean(x[b]^2) + eps)), rows of x [B, D]."""
    B, D = x.shape
    for b in range(B):
        ss = np.float32(0.0)
        for i in range(D):
            ss += x[b, i] * x[b, i]
        r = _ONE / np.sqrt(ss / np.float32(D) + np.float32(eps))
        for i in range(D):
            out[b, i] = weight[i] * (x[b, i] * r)


@_jit
def add_rms_norm(x, delta, weight, eps, out):
    """x += delta (the residual stream, in place), then out = rms_norm(x) * weight."""
    B, D = x.shape
    for b in range(B):
        ss = np.float32(0.0)
        for i in range(D):
            v = x[b, i] + delta[b, i]
            x[b, i] = v
            ss += v * v
        r = _ONE / np.sqrt(ss / np.float32(D) + np.float32(eps))
        for i in range(D):
            out[b, i] = weight[i] * (x[b, i] * r)


@_jit
def qk_norm_rope_store(qkv, qk_weight, cos, sin, eps, q_out, K, V, n):
    """One layer's attention inputs for one new token per row.

    qkv [B, H + 2 Hk, d]: the fused projection's output, heads [q | k | v]. qk_weight [H + Hk, d]: the per-head
    q/k RMSNorm weight (Qwen3), or shape [0, d] for none (Qwen2, Llama). cos/sin [B, 1, d], sin pre-signed so
    that RoPE is x * cos + swap_halves(x) * sin. Writes the rotated queries to q_out [B, H, d], and the rotated
    key and the value to index n of the caches K/V [B, Hk, capacity, d]."""
    B, heads, d = qkv.shape
    Hk = K.shape[1]
    H = heads - 2 * Hk
    half = d // 2
    normed = qk_weight.shape[0] > 0
    x = np.empty(d, np.float32)
    for b in range(B):
        for h in range(H + Hk):
            if normed:
                ss = np.float32(0.0)
                for i in range(d):
                    ss += qkv[b, h, i] * qkv[b, h, i]
                r = _ONE / np.sqrt(ss / np.float32(d) + np.float32(eps))
                for i in range(d):
                    x[i] = qk_weight[h, i] * (qkv[b, h, i] * r)
            else:
                for i in range(d):
                    x[i] = qkv[b, h, i]
            dst = q_out[b, h] if h < H else K[b, h - H, n]
            for i in range(half):
                dst[i] = x[i] * cos[b, 0, i] + x[i + half] * sin[b, 0, i]
                dst[i + half] = x[i + half] * cos[b, 0, i + half] + x[i] * sin[b, 0, i + half]
        for j in range(Hk):
            for i in range(d):
                V[b, j, n, i] = qkv[b, H + Hk + j, i]


@_jit
def inverse_cdf(weights, u, tokens, totals):
    """Per row of non-negative weights [B, V]: the float64 running sum (sequential, as torch.cumsum sums), the
    first index whose sum exceeds min(u * total, the double just below total) -> tokens [B], total -> totals [B].
    sampler._inverse_cdf's function, without materialising the [B, V] float64 copy per step."""
    B, V = weights.shape
    cdf = np.empty(V, np.float64)
    for b in range(B):
        acc = 0.0
        for i in range(V):
            acc += np.float64(weights[b, i])
            cdf[i] = acc
        target = min(u[b, 0] * acc, np.nextafter(acc, 0.0))
        tokens[b] = np.searchsorted(cdf, target, side="right")
        totals[b] = acc
