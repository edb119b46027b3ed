"""glibc's malloc told to keep freed memory, so the CPU path stops paying page faults for every large tensor.

Why: a CPU step allocates and frees many tensors of a few MB (a micro-batch's MLP activations, their gradients, a
prefill's hidden states). glibc serves large blocks with fresh `mmap`s below an adaptive threshold and hands the
heap's free top back to the kernel, so the pages of such a tensor are faulted in and zeroed again and again: the
testbed model's forward + backward on 64 x 40 tokens took ~23,000 minor page faults a step, ~5,500 with the
settings here, on the machine where this was written (how many depends on the machine: bench/allocator.py measures
it where you are). In `make run`'s cells that was ~5% of the update and ~3% of an evaluation, with the same numbers
(docs/benchmarks.md). PyTorch's own advice for CPU training is an allocator that caches (jemalloc or tcmalloc through
LD_PRELOAD); `mallopt` gets most of that from inside the process.

The cost: the process keeps the memory it freed (its heap stays at its peak), as PyTorch's GPU caching allocator
keeps GPU memory. `ROLECAST_MALLOC=default` leaves malloc as it is.
"""

from __future__ import annotations

import ctypes
import os
import sys

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # blocks up to 32 MB come from the heap (glibc's ceiling for this setting on 64-bit)
TRIM_THRESHOLD = (1 << 31) - 1  # the heap's free top goes back to the kernel only above 2 GB

_applied = False


def keep_freed_memory() -> bool:
    """Set glibc's mmap and trim thresholds for this process (once; on Linux with glibc, else nothing). True when
    they are set, False where the C library has no `mallopt`, refuses the values, or ROLECAST_MALLOC=default."""
    global _applied
    if _applied:
        return True
    if os.environ.get("ROLECAST_MALLOC", "") == "default" or not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library this process runs on
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _applied = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    return _applied
