"""core/allocator.py: malloc keeps freed memory, so a CPU training step stops faulting fresh pages in.

What the setting promises is checked through glibc's own accounting (`mallinfo2`), which is exact on any machine:
a 24 MB block comes from the heap instead of a fresh `mmap`, and the heap keeps it once it is freed. How many page
faults that saves depends on the machine (transparent huge pages, the kernel) and is measured by
bench/allocator.py, not asserted here: an earlier version of this test compared fault counts and failed on a
machine whose default faulted 7,524 times where this one faults ~30,000.

Each case runs in its own process: the settings are process-wide and cannot be undone."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

BLOCK = 24 << 20  # below the 32 MB threshold set, far above glibc's default 128 KB

HEAP = """
import ctypes, sys
from rolecast.core.allocator import keep_freed_memory
applied = keep_freed_memory() if sys.argv[1] == "on" else None
class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
        ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
size = int(sys.argv[2])
before = libc.mallinfo2()
block = libc.malloc(size)
ctypes.memset(block, 1, size)
held = libc.mallinfo2()
libc.free(block)
freed = libc.mallinfo2()
# bytes in mmapped blocks while held; heap growth while held; heap growth still there after the free
print(applied, held.hblkhd - before.hblkhd, held.arena - before.arena, freed.arena - before.arena)
"""

GRADIENT = """
import sys
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM
from rolecast.core.allocator import keep_freed_memory
torch.set_num_threads(1)
keep_freed_memory() if sys.argv[1] == "on" else None
torch.manual_seed(0)
model = Qwen3ForCausalLM(Qwen3Config(vocab_size=2048, hidden_size=192, num_hidden_layers=4, num_attention_heads=6,
    num_key_value_heads=2, head_dim=32, intermediate_size=768))
ids = torch.randint(3, 2000, (16, 40))
for _ in range(2):
    model(input_ids=ids).logits.logsumexp(-1).mean().backward()
print(repr(float(next(model.parameters()).grad.abs().sum())))
"""


def _python(code: str, *args: str, **env: str) -> list[str]:
    # malloc's own environment knobs would change the default being compared against
    clean = {k: v for k, v in os.environ.items() if k != "ROLECAST_MALLOC" and k != "GLIBC_TUNABLES"}
    clean = {k: v for k, v in clean.items() if not k.startswith("MALLOC_")}
    out = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300, env={**clean, **env}
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.split()


glibc = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt and mallinfo2")


@glibc
def test_a_large_block_comes_from_the_heap_and_stays_there_after_free():
    applied, mmapped, grown, kept = _python(HEAP, "on", str(BLOCK))
    assert applied == "True"
    assert int(mmapped) == 0  # no fresh mmap for the block ...
    assert int(grown) >= BLOCK  # ... the heap grew by it ...
    assert int(kept) >= BLOCK  # ... and still holds it after the free: the next tensor reuses those pages


@glibc
def test_by_default_the_same_block_is_a_fresh_mmap_given_back_on_free():
    applied, mmapped, grown, kept = _python(HEAP, "off", str(BLOCK))
    assert applied == "None"
    assert int(mmapped) >= BLOCK  # glibc's default: a fresh mapping, faulted in page by page ...
    assert int(grown) == 0 and int(kept) == 0  # ... and unmapped on free


@glibc
def test_opt_out_leaves_malloc_alone():
    applied, mmapped, _, kept = _python(HEAP, "on", str(BLOCK), ROLECAST_MALLOC="default")
    assert applied == "False"
    assert int(mmapped) >= BLOCK and int(kept) == 0


@glibc
def test_where_the_memory_comes_from_changes_no_number():
    assert _python(GRADIENT, "on") == _python(GRADIENT, "off")
