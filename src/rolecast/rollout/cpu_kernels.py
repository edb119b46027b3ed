"""Fused CPU kernels for the small per-token ops of a decode step (numba, optional: `pip install 'rolecast[cpu]'`).

Why: in a decode step of a small model on CPU most time is not in the matmuls but in the many tiny ops
around them. Each RMSNorm alone is seven tensor ops (cast, square, mean, add, rsqrt, multiply, weight), and
every op pays ~5-15 us of dispatch and allocation for a few thousand floats. `fast_qwen3.FastDecoder` calls
these kernels instead: one pass per residual add + RMSNorm, and one pass for the q/k RMSNorm, RoPE and the
K/V cache write of a layer. Measured on the 2-core dev CPU (docs/benchmarks.md): a 16 x 192-token decode of
the testbed-shaped model 1.08 -> 0.82 s.

Exactness: the same fp32 arithmetic as modeling_qwen3.py in a different summation order (the squares of an
RMSNorm are summed sequentially; torch sums them in vectorised blocks), so outputs differ by ~1e-7
relative; RoPE's products and sums are rounded as torch rounds them (no fast-math, no fused multiply-add).
Arrays are numpy views of the caller's contiguous fp32 CPU tensors (no copies); bf16 or GPU tensors stay on
the torch ops.

Compiled on first use (~2 s) and cached on disk by numba (`cache=True`). The kernels run single-threaded: the
rows of a decode batch are a few thousand floats, less than a parallel region costs.
"""

from __future__ import annotations

import numba
import numpy as np

# Imported only through fast_qwen3.cpu_kernels(), which falls back to torch ops when numba is missing.
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
