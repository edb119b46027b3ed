"""The machine a number was computed on: the CPU, the vector code torch dispatches to on it, threads and versions.

Float results here (a testbed build's weights, a run's curve) are deterministic on one machine, but another CPU
can take other kernels (torch dispatches to AVX2 or AVX512 code; oneDNN and MKL choose blockings by the CPU) and
round differently: the shipped testbed builds did not rebuild to their bytes on a later machine (docs/testbed.md,
"Building it"). The fingerprint is written beside such results (build_info.json, a sweep's registration.jsonl)
so that a reader can tell "another machine" from "a bug" before reading any number.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

import torch

CPUINFO = Path("/proc/cpuinfo")
# the instruction sets that change which kernels run (and so the rounding of a reduction), not every flag
VECTOR_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile")


def parse_cpuinfo(text: str) -> tuple[str | None, list[str]]:
    """(the first processor's model name, the VECTOR_FLAGS among its flags) of a /proc/cpuinfo text."""
    model, flags = None, set[str]()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and model is None:
            model = value.strip()
        elif key == "flags" and not flags:
            flags = set(value.split())
    return model, [f for f in VECTOR_FLAGS if f in flags]


def machine_fingerprint() -> dict[str, Any]:
    """This machine as JSON: CPU model and vector flags (from /proc/cpuinfo where there is one), torch's CPU
    capability (the vector code its kernels dispatch to), cores, torch threads, and the torch and Python versions."""
    try:
        model, flags = parse_cpuinfo(CPUINFO.read_text())
    except OSError:  # not Linux: the platform's own name, no flags
        model, flags = None, []
    return {
        "cpu": model or platform.processor() or "unknown",
        "vector_flags": flags,
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "system": f"{platform.system()} {platform.machine()}",
    }
