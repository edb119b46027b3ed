"""Data-parallel training over several processes (torch.distributed), in one place the loop calls.

Launched by torchrun (`python -m torch.distributed.run --nproc_per_node N -m rolecast.cli train ...`), every
process holds every policy's weights and optimizer. One training step:
  - every process draws the same problems (a pure function of (seed, step)) and rolls out its own contiguous
    share of them, `shard`: a problem's G samples never leave their process, so every (problem, role) group
    is whole and its advantages are exactly those of a one-process run;
  - each process accumulates gradients over its own turns, with the loss normalised by the GLOBAL token and
    sequence counts (`total`), then the gradients are summed over processes (`sum_gradients`, or
    `InstanceGradients.all_reduce` when per-role gradients are kept): the update equals the one-process update
    on the same global batch, up to float summation order. Not torch's DistributedDataParallel wrapper: each
    policy (adapter) updates on its own, and processes run different numbers of micro-batches, so the
    reduction happens once per optimizer step, after accumulation;
  - clipping, the optimizer step and every decision (skip a non-finite step, stop a diverged run) see the
    same global numbers on every process, so the weights stay identical without broadcasts;
  - metrics are computed from every process's episodes (`gather`), and only rank 0 writes the run directory
    (metrics, episodes, checkpoints, evaluation).
A checkpoint holds no per-process state (sampling is seeded per step), so a run resumes on any number of
processes. With one process (`Dist()`), every hook returns its input unchanged and communicates nothing.

For rollouts that are identical whatever the number of processes, set `rollout.seed_per_prompt` (each prompt
samples from its own seed); otherwise each process's share is sampled from the step's seed plus its rank.
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as td

T = TypeVar("T")


@dataclass
class Dist:
    """This process's place in the run: `rank` of `world` processes; `device` carries the collectives' tensors
    (the CPU for gloo, this process's GPU for nccl)."""

    rank: int = 0
    world: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def active(self) -> bool:
        return self.world > 1

    @property
    def is_main(self) -> bool:
        """The process that writes the run directory and evaluates."""
        return self.rank == 0

    # --- splitting work -------------------------------------------------------------------------------

    def shard(self, items: Sequence[T]) -> list[T]:
        """This process's contiguous share of `items` (sizes differ by at most one, earlier ranks larger), so
        the shares concatenated in rank order are `items`."""
        n, k = len(items), self.world
        start = self.rank * (n // k) + min(self.rank, n % k)
        return list(items[start : start + n // k + (1 if self.rank < n % k else 0)])

    def minibatches(self, items: Sequence[T], rng: random.Random, size: int) -> list[list[T]]:
        """The global list (every process's `items` in rank order) shuffled with `rng` and cut into mini-batches
        of `size`; each process gets its own items of every mini-batch. Every process holds the same `rng`
        state and the same global length, so all draw the same permutation and run the same number of
        mini-batches (a share may be empty); with one process this is exactly `rng.shuffle` of `items`."""
        counts = self.gather(len(items))
        offset, n = sum(counts[: self.rank]), sum(counts)
        order = list(range(n))
        rng.shuffle(order)
        return [
            [items[g - offset] for g in order[i : i + size] if offset <= g < offset + len(items)]
            for i in range(0, n, size)
        ]

    # --- reductions (no-ops for one process) ---------------------------------------------------------------

    def total(self, *values: float) -> list[float]:
        """Each value summed over processes (in float64)."""
        if not self.active:
            return list(values)
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        td.all_reduce(t)
        return t.tolist()

    def all_true(self, flag: bool) -> bool:
        """True when `flag` holds on every process (e.g. every loss was finite)."""
        return flag if not self.active else self.total(0.0 if flag else 1.0)[0] == 0

    def gather(self, obj: T) -> list[T]:
        """Every process's `obj`, in rank order (picklable objects)."""
        if not self.active:
            return [obj]
        out: list[Any] = [None] * self.world
        td.all_gather_object(out, obj)
        return out

    def concat(self, items: Sequence[T]) -> list[T]:
        """Every process's `items` concatenated in rank order."""
        return list(items) if not self.active else [x for part in self.gather(list(items)) for x in part]

    def sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        """`tensor` summed over processes, in place (moved to the collective's device and back if needed)."""
        if not self.active:
            return tensor
        buf = tensor if tensor.device == self.device else tensor.to(self.device)
        td.all_reduce(buf)
        if buf is not tensor:
            tensor.copy_(buf)
        return tensor

    def sum_gradients(self, params: Sequence[torch.nn.Parameter]) -> None:
        """Every parameter's `.grad` summed over processes (a missing grad counts as zeros; a parameter no
        process gave a gradient keeps none, so the optimizer skips it as one process would). One flat buffer:
        one collective per optimizer step."""
        if not self.active or not params:
            return
        dtype = torch.float64 if any(p.dtype == torch.float64 for p in params) else torch.float32
        has = torch.tensor([float(p.grad is not None) for p in params], dtype=dtype)
        flat = torch.cat(
            [(p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1).to(dtype) for p in params]
            + [has.to(params[0].device)]
        )
        self.sum_(flat)
        offset, n_params = 0, len(params)
        flags = flat[-n_params:].tolist()
        for p, anyone in zip(params, flags, strict=True):
            n = p.numel()
            p.grad = flat[offset : offset + n].view_as(p).to(p.dtype) if anyone else None
            offset += n

    def merge_tallies(self, tally: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
        """Per-role token sums ({role: {key: sum}}) added up over processes."""
        if not self.active:
            return tally
        out: dict[str, dict[str, float]] = {}
        for part in self.gather(tally):
            for role, row in part.items():
                dst = out.setdefault(role, dict.fromkeys(row, 0.0))
                for k, v in row.items():
                    dst[k] = dst.get(k, 0.0) + v
        return out

    def barrier(self) -> None:
        if self.active:
            td.barrier()

    def close(self) -> None:
        """Leave the process group this module created (torchrun's processes end after `train` returns)."""
        if self.active and td.is_initialized():
            td.destroy_process_group()


def from_env(device: torch.device, timeout_s: float = 1800.0) -> Dist:
    """The process group torchrun describes in the environment (WORLD_SIZE, RANK, MASTER_ADDR/PORT), joined on
    first call; one process (`Dist()`) when WORLD_SIZE is unset or 1. gloo for CPU runs, nccl for GPUs."""
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if world <= 1:
        return Dist(device=device)
    if not td.is_available():
        raise RuntimeError("WORLD_SIZE > 1 but this torch build has no torch.distributed")
    if not td.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        if device.type == "cuda":
            torch.cuda.set_device(device)
        td.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
    return Dist(rank=td.get_rank(), world=td.get_world_size(), device=device)
