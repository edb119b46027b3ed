"""The gradient capture of a policy's update: how it batches its rows by agent instance when per-role gradients are
needed (gradient diagnostics, or an intervention that rescales roles), and what it reports to the diagnostics.

A policy's loss is a sum over its rows with mini-batch-wide normalisers, so it splits exactly into one part per
agent instance. `instance_segments` groups a mini-batch's rows by (role, instance); the update micro-batches each
segment on its own and, after the segment's backwards, `InstanceGradients.capture` moves the accumulated `.grad`
into that instance's flat vector. `write_back` puts their (optionally rescaled) sum back into `.grad` for clipping
and the optimizer. Grouping rows by instance changes the summation order of the accumulated gradient (equal to
float tolerance, not bit for bit), so without a monitor and without a rescaling intervention the update batches
its rows as they come. The statistics of the vectors are diagnostics/gradients.py's; `GradientCapture` is what the
update calls.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from rolecast.core.episode import Turn
from rolecast.diagnostics.gradients import (
    CountSketch,
    GradientMonitor,
    Vector,
    flat_dtype,
    flat_grad,
    flat_params,
    norm64,
)
from rolecast.training.distributed import Dist


class InstanceGradients:
    """One mini-batch's gradient split by agent instance.

    The trainer runs an instance's rows as their own micro-batches, then calls `capture(role, instance)`:
    the gradient accumulated since the last capture becomes that instance's vector and `.grad` is cleared.
    `write_back(coefs)` puts sum_i coef[role_i] * g_i into `.grad` (only for parameters that received a
    gradient, so the optimizer skips the others exactly as it would have).

    Exact mode keeps one flat vector per instance. With a `sketch`, it keeps the instance's sketch plus the
    running sum (and one exact vector per role only when `keep_roles`, for interventions that rescale roles)."""

    def __init__(
        self, params: Sequence[torch.nn.Parameter], sketch: CountSketch | None = None, keep_roles: bool = False
    ):
        self.params = list(params)
        self.sketch, self.keep_roles = sketch, keep_roles
        self.vectors: dict[str, Vector] = {}  # instance -> exact gradient (or its sketch)
        self.role_of: dict[str, str] = {}
        self._has_grad = [False] * len(self.params)
        self._total: Vector | None = None
        self._roles: dict[str, Vector] = {}

    def capture(self, role: str, instance: str) -> None:
        g = flat_grad(self.params)
        for i, p in enumerate(self.params):
            if p.grad is not None:
                self._has_grad[i] = True
                p.grad = None
        self.role_of[instance] = role
        if self.sketch is None:
            self.vectors[instance] = self.vectors[instance] + g if instance in self.vectors else g
            return
        s = self.sketch(g)
        self.vectors[instance] = self.vectors[instance] + s if instance in self.vectors else s
        self._total = g.clone() if self._total is None else self._total.add_(g)
        if self.keep_roles:
            self._roles[role] = self._roles[role] + g if role in self._roles else g

    def role_vectors(self) -> dict[str, Vector]:
        """Exact per-role gradients (exact mode, or sketch mode with `keep_roles`)."""
        if self.sketch is not None:
            if not self.keep_roles:
                raise RuntimeError("exact role gradients were not kept (sketch mode without keep_roles)")
            return dict(self._roles)
        out: dict[str, Vector] = {}
        for inst, v in self.vectors.items():
            r = self.role_of[inst]
            out[r] = out[r] + v if r in out else v
        return out

    def all_reduce(self, dist: Dist) -> None:
        """Sum every instance's vector over the processes of a data-parallel run , so
        role norms, cosines and any rescaling see the GLOBAL gradient of each instance. An instance a process
        did not see contributes zeros there; sketches are linear, so summed sketches are the sketch of the sum."""
        if not dist.active:
            return
        role_of: dict[str, str] = {}
        for part in dist.gather(self.role_of):
            role_of.update(part)
        dim = self.sketch.dim if self.sketch is not None else sum(p.numel() for p in self.params)
        dtype, device = flat_dtype(self.params), self.params[0].device if self.params else torch.device("cpu")
        full = sum(p.numel() for p in self.params)

        def summed(table: dict[str, Vector], keys: list[str], n: int) -> dict[str, Vector]:
            for k in keys:
                table[k] = dist.sum_(table[k] if k in table else torch.zeros(n, dtype=dtype, device=device))
            return table

        self.role_of = role_of
        self.vectors = summed(self.vectors, sorted(role_of), dim)
        if self.sketch is not None:
            self._total = summed({} if self._total is None else {"": self._total}, [""], full)[""]
            if self.keep_roles:
                self._roles = summed(self._roles, sorted(set(role_of.values())), full)
        flags = dist.sum_(torch.tensor([float(h) for h in self._has_grad], dtype=torch.float64))
        self._has_grad = [bool(f > 0) for f in flags.tolist()]

    def write_back(self, coefs: dict[str, float] | None = None) -> None:
        if coefs is None or all(c == 1.0 for c in coefs.values()):
            total = self._total if self.sketch is not None else _sum(self.vectors.values())
        else:
            total = _sum(coefs.get(r, 1.0) * v for r, v in self.role_vectors().items())
        if total is None:
            return
        offset = 0
        for p, has in zip(self.params, self._has_grad, strict=True):
            n = p.numel()
            if has:
                p.grad = total[offset : offset + n].view_as(p).to(p.dtype)  # a view of a buffer no one else holds
            offset += n


def _sum(vectors: Iterable[Vector]) -> Vector | None:
    total: Vector | None = None
    for v in vectors:
        total = v.clone() if total is None else total.add_(v)
    return total


def instance_segments(turns: Sequence[Turn]) -> list[list[Turn]]:
    """The turns grouped by (role, instance), in sorted order, each group in its original order."""
    groups: dict[tuple[str, str], list[Turn]] = {}
    for t in turns:
        groups.setdefault((t.role, t.instance), []).append(t)
    return [groups[k] for k in sorted(groups)]


class GradientCapture:
    """When one policy's update takes per-instance gradients, and what it tells the gradient diagnostics.

    A pass over the data needs them when the diagnostics run on it (`monitor`, given on diagnosed steps; the first
    pass) or on every pass when an intervention rescales roles (`rescale`): then `start` gives the
    `InstanceGradients` that the mini-batch's instances are captured into, else None and the rows are batched as
    they come. The monitor gets the raw per-instance gradients of the global batch before any intervention
    (`report`), the size of every optimizer step (`weights_before_step`, `after_step`) and the policy's turns at
    the end (`finish`)."""

    def __init__(
        self, pid: str, params: Sequence[torch.nn.Parameter], monitor: GradientMonitor | None, rescale: bool, dist: Dist
    ):
        self.pid, self.params, self.monitor, self.rescale, self.dist = pid, list(params), monitor, rescale, dist

    def start(self, diagnose: bool) -> InstanceGradients | None:
        """Per-instance gradients for a mini-batch, when diagnostics run on this pass or an intervention rescales
        roles; None for a plain accumulation."""
        if not (diagnose or self.rescale):
            return None
        sketch = self.monitor.sketch if diagnose and self.monitor is not None else None
        return InstanceGradients(self.params, sketch=sketch, keep_roles=self.rescale)

    def report(self, grads: InstanceGradients, diagnose: bool) -> None:
        """The mini-batch's per-instance gradients (summed over processes), to the diagnostics on a diagnosed pass."""
        if diagnose and self.monitor is not None:
            self.monitor.add_gradients(self.pid, grads.vectors, grads.role_of)

    def weights_before_step(self) -> Vector | None:
        """A flat copy of the weights before an optimizer step, when the diagnostics measure its size."""
        return flat_params(self.params) if self.monitor is not None else None

    def after_step(self, before: Vector | None, turns: Sequence[Turn]) -> None:
        """The optimizer step's size, with the roles (over every process) whose rows were in its mini-batch."""
        if self.monitor is not None and before is not None:
            roles = self.dist.concat(sorted({t.role for t in turns}))
            self.monitor.add_update(self.pid, norm64(flat_params(self.params) - before), roles)

    def finish(self, turns: Sequence[Turn], gather: bool = True) -> None:
        """The end of the policy's update: the diagnostics compute its metrics, with every process's turns
        (`gather`; not needed when no process had any)."""
        if self.monitor is not None:
            self.monitor.finish_policy(self.pid, self.dist.concat(turns) if gather else turns, self.params)
