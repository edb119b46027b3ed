"""Fused CPU kernels for the small per-token ops of decoding (numba, optional: `pip install 'rolecast[cpu]'`).

Why: in a decode step of a small model on CPU most time is not in the matmuls but in the many tiny ops
around them. Each RMSNorm alone is seven tensor ops (cast, square, mean, add, rsqrt, multiply, weight), and
every op pays ~5-15 us of dispatch and allocation for a few thousand floats. `fast_qwen3.FastDecoder` calls
kernels instead: one pass per residual add + RMSNorm, and one pass for the q/k RMSNorm, RoPE and the K/V cache
write of a layer; the sampler's float64 running sum and search are one pass per row. Measured on the 2-core
dev CPU (docs/benchmarks.md): `HFBackend` decoding 16 x 192 tokens of the testbed-shaped model took
0.93-1.02 s with the kernels, 1.07-1.20 s without.

Exactness: RMSNorm is the same fp32 arithmetic as modeling_qwen3.py in a different summation order (squares
summed sequentially; torch sums them in vectorised blocks), so outputs differ by ~1e-7 relative; RoPE's
products and sums are rounded as torch rounds them (no fast-math, no fused multiply-add), and the sampler's
running sum is torch.cumsum's (sequential, float64), so it draws the same tokens from the same uniforms.
Arrays are numpy views of the caller's contiguous fp32 CPU tensors (no copies); bf16 or GPU tensors stay on
torch ops. The kernels are compiled on first use (~2 s), cached on disk by numba, and run single-threaded: a
decode batch's rows are a few thousand floats, less than a parallel region costs.
"""

from __future__ import annotations

import functools
import importlib
import logging

log = logging.getLogger(__name__)


def load(enabled: bool = True):
    """The kernels (module `_numba_kernels`), or None when not `enabled` (callers pass their own switch, e.g.
    `HFBackend(cpu_kernels=False)`, to keep every op a torch op) or numba is not installed."""
    return _import() if enabled else None


@functools.cache
def _import():
    # imported by name, when first wanted: the module imports numba, an optional extra (`rolecast[cpu]`)
    try:
        return importlib.import_module("rolecast.rollout._numba_kernels")
    except ImportError:
        return None
    except Exception as e:  # e.g. numba installed but unusable here (no writable cache directory)
        log.warning("numba kernels unavailable (%s: %s); decode steps use torch ops", type(e).__name__, e)
        return None
