"""Where a run's tensors live and in which precision: `model.device` and `model.dtype` resolved once.

`auto` device: the process's GPU when torch sees one (cuda:LOCAL_RANK under torchrun), else the CPU. `auto`
dtype: float32 on a CPU (the fast CPU decode path and its kernels are fp32; bf16 matmuls on most CPUs are
slower, not faster) and bfloat16 on a GPU. Nothing here imports the rest of rolecast, so config validation
can call it before any model loads.
"""

from __future__ import annotations

import os
import re

import torch

from rolecast.core.errors import DeviceError

_CUDA = re.compile(r"^cuda(?::(\d+))?$")


def _local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0") or 0)


def check_device(device: str) -> None:
    """Raise DeviceError unless `device` is cpu, auto, cuda or cuda:N, and a cuda device exists here."""
    if device in ("cpu", "auto"):
        return
    m = _CUDA.match(device)
    if m is None:
        raise DeviceError(f"{device!r} is not a device; use cpu, cuda, cuda:N or auto")
    if not torch.cuda.is_available():
        raise DeviceError(
            f"{device!r} asked for, but this machine has no CUDA GPU torch can use "
            f"(torch {torch.__version__}, CUDA build: {torch.version.cuda or 'no'}); use cpu or auto"
        )
    index = int(m.group(1)) if m.group(1) is not None else 0
    if index >= torch.cuda.device_count():
        raise DeviceError(f"{device!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")


def resolve_device(device: str) -> torch.device:
    """The torch device for a (checked) setting; a bare `cuda` or `auto` under torchrun is this process's GPU."""
    check_device(device)
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        device = f"cuda:{_local_rank() % max(torch.cuda.device_count(), 1)}"
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device | str) -> torch.dtype:
    """`auto` -> float32 on a CPU, bfloat16 on a GPU; a named dtype as named."""
    if dtype == "auto":
        return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32
    return getattr(torch, dtype)


def resolve_mixed_adapters(setting: bool | str, device: torch.device | str) -> bool:
    """`rollout.mixed_adapters: auto` -> the faster per device: on a CPU one fast-path pass per adapter (about
    2x faster with 4 adapters, docs/benchmarks.md), on a GPU one mixed batch (bigger batches are nearly free)."""
    if setting == "auto":
        return torch.device(device).type != "cpu"
    return bool(setting)
