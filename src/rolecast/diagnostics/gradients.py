"""Role-level gradient dynamics of one policy's update, exact and cheap.

A policy's loss is a sum over its rows (every aggregation divides by mini-batch-wide normalisers), so it
splits exactly into one part per agent instance (`generator/0`, `generator/1`, ..., `aggregator`). On a step
where diagnostics run, the trainer groups a mini-batch's rows by instance, micro-batches each instance on its
own (rows of one prompt still share its forward) and, after the instance's backwards, moves the accumulated
`.grad` into a flat vector (`InstanceGradients.capture`, training/role_batches.py). Each vector is therefore
exactly the gradient of that instance's part of the loss as the update computes it (same normalisers, before
clipping), at the cost of one flat copy per instance, not one extra backward per role. The sum goes back into
`.grad` for clipping and the optimizer. This module holds the statistics of those vectors.

From those vectors (or their count-sketches, `CountSketch`) everything is a function of their Gram matrix
(`gradient_statistics`): per-role norms, projection shares s_r = g_r . g / |g|^2 (they sum to 1), pairwise
role cosines, and for a role with N parallel instances their alignment |sum_i g_i|^2 / sum_i |g_i|^2 (1 for
orthogonal instances or a single active one, N for identical ones: 1 + (N - 1) x their mean pairwise cosine
when their norms are equal), the sum-to-mean norm ratio |sum_i g_i| / mean_i |g_i| (what earlier versions
logged as "amplification": it is N whenever one instance holds all the gradient, so it does not measure
alignment) and their mean pairwise cosine, and the capture index (largest share) of a policy serving several
roles. A role (or instance) whose gradient is at float noise relative to its policy's (`NOISE_REL`: e.g. an
orchestrator whose plans are identical within every group, so its advantages cancel) gets null shares and
cosines: the direction of rounding noise means nothing. Norms and inner products accumulate in float64.
`GradientMonitor` holds what lasts across steps (the schedule, each role's EMA for direction persistence,
the starting weights for drift) and turns a step's measurements into `grad/...` and `update/...` metrics.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from rolecast.core.episode import Turn
from rolecast.core.metric_keys import grad_cos_key, grad_key, grad_role_key, update_key, update_role_key

if TYPE_CHECKING:  # config/validate.py imports the diagnostics (signal names): no runtime import back
    from rolecast.config.schema import GradientDiagnosticsSettings

Vector = torch.Tensor


# ---------------------------------------------------------------------------------------------------------
# Flat views of parameters and gradients


def flat_grad(params: Sequence[torch.nn.Parameter]) -> Vector:
    """All gradients as one float32 (float64 for float64 parameters) vector; a missing grad counts as zeros."""
    dtype = flat_dtype(params)
    return (
        torch.cat(
            [(p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1).to(dtype) for p in params]
        )
        if params
        else torch.zeros(0)
    )


def flat_params(params: Sequence[torch.nn.Parameter]) -> Vector:
    dtype = flat_dtype(params)
    return torch.cat([p.detach().reshape(-1).to(dtype) for p in params]) if params else torch.zeros(0)


def flat_dtype(params: Sequence[torch.nn.Parameter]) -> torch.dtype:
    return torch.float64 if any(p.dtype == torch.float64 for p in params) else torch.float32


class CountSketch:
    """A fixed linear map R^P -> R^d: coordinate j goes to bucket h(j) with sign s(j) (hash and sign drawn once
    from `seed`, regenerated chunk by chunk on each call, so no P x d matrix and no P-sized table is kept).

    For fixed x, y: E[<Sx, Sy>] = <x, y> and Var[<Sx, Sy>] = (|x|^2 |y|^2 + <x, y>^2 - 2 sum_j x_j^2 y_j^2) / d
    <= 2 |x|^2 |y|^2 / d, so by Chebyshev |<Sx, Sy> - <x, y>| <= eps |x| |y| with probability at least
    1 - 2 / (d eps^2) for each inner product (norms are the case x = y). Cosines and shares are ratios of
    such products: each is off by about 3 eps at most when all three products are within eps."""

    CHUNK = 1 << 20

    def __init__(self, dim: int, seed: int = 0):
        if dim <= 0:
            raise ValueError(f"sketch dimension must be positive, got {dim}")
        self.dim, self.seed = dim, seed

    def __call__(self, x: Vector) -> Vector:
        x = x.reshape(-1)
        out = torch.zeros(self.dim, dtype=x.dtype, device=x.device)
        for start in range(0, x.numel(), self.CHUNK):
            part = x[start : start + self.CHUNK]
            gen = torch.Generator().manual_seed(self.seed * 1_000_003 + start // self.CHUNK)
            buckets = torch.randint(self.dim, (part.numel(),), generator=gen)
            signs = torch.randint(2, (part.numel(),), generator=gen).to(x.dtype).mul_(2).sub_(1)
            out.index_add_(0, buckets.to(x.device), part * signs.to(x.device))
        return out


# ---------------------------------------------------------------------------------------------------------
# Statistics (pure functions of the vectors)


def norm64(x: Vector) -> float:
    """|x| accumulated in float64 (a float32 reduction over 10M elements is off by ~1e-3 relative)."""
    return float(torch.linalg.vector_norm(x, dtype=torch.float64))


def dot64(a: Vector, b: Vector) -> float:
    return float(torch.dot(a.reshape(-1).double(), b.reshape(-1).double()))


def cosine(a: Vector, b: Vector) -> float:
    na, nb = norm64(a), norm64(b)
    return dot64(a, b) / (na * nb) if na > 0 and nb > 0 else float("nan")


# A gradient below this fraction of its policy's norm is float noise (float32 accumulation leaves ~1e-7 of
# the summed terms; cancelled advantages leave ~1e-10): its direction, share and cosines are reported null.
NOISE_REL = 1e-5


def gram(vectors: Sequence[Vector]) -> torch.Tensor:
    """Pairwise inner products in float64, `[N, N]` (computed pair by pair: no stacked [N, P] copy)."""
    n = len(vectors)
    out = torch.zeros(n, n, dtype=torch.float64)
    for i in range(n):
        for j in range(i, n):
            out[i, j] = out[j, i] = dot64(vectors[i], vectors[j])
    return out


@dataclass
class GradientStats:
    policy_norm: float
    norm: dict[str, float] = field(default_factory=dict)
    share: dict[str, float] = field(default_factory=dict)
    cos: dict[tuple[str, str], float] = field(default_factory=dict)  # (role a, role b), a < b
    instances: dict[str, int] = field(default_factory=dict)
    alignment: dict[str, float] = field(default_factory=dict)  # roles with >= 2 instances
    norm_ratio: dict[str, float] = field(default_factory=dict)  # roles with >= 2 instances
    noise: set[str] = field(default_factory=set)  # roles whose gradient is at float noise (null directions)
    instance_cos: dict[str, float] = field(default_factory=dict)  # roles with >= 2 instances
    capture_index: float = float("nan")
    capture_role: str | None = None


def gradient_statistics(instance_vectors: dict[str, Vector], role_of: dict[str, str]) -> GradientStats:
    """Every statistic of the issue from the per-instance gradients (or their sketches) of one policy."""
    names = sorted(instance_vectors)
    if not names:
        return GradientStats(policy_norm=float("nan"))
    g_inst = gram([instance_vectors[n] for n in names])
    roles = sorted({role_of[n] for n in names})
    member = torch.zeros(len(names), len(roles), dtype=torch.float64)
    for i, n in enumerate(names):
        member[i, roles.index(role_of[n])] = 1.0
    g_role = member.T @ g_inst @ member  # role r's gradient is the sum of its instances'
    total_sq = float(g_role.sum())
    norms = g_role.diagonal().clamp(min=0).sqrt()
    st = GradientStats(policy_norm=math.sqrt(max(total_sq, 0.0)))
    # the scale below which a gradient is rounding noise: relative to the largest of the policy's gradient and
    # its roles' (roles can cancel each other, so the policy's own norm alone could be noise-level too)
    floor = NOISE_REL * max(st.policy_norm, float(norms.max()) if len(roles) else 0.0)
    real = [float(norms[a]) > floor for a in range(len(roles))]
    st.noise = {r for r, ok in zip(roles, real, strict=True) if not ok}
    for a, ra in enumerate(roles):
        st.norm[ra] = float(norms[a])
        st.share[ra] = float(g_role[a].sum()) / total_sq if total_sq > floor**2 and real[a] else float("nan")
        for b in range(a + 1, len(roles)):
            den = float(norms[a] * norms[b])
            st.cos[(ra, roles[b])] = float(g_role[a, b]) / den if real[a] and real[b] else float("nan")
        idx = [i for i, n in enumerate(names) if role_of[n] == ra]
        st.instances[ra] = len(idx)
        if len(idx) >= 2:
            sub = g_inst[idx][:, idx]
            inst_norms = sub.diagonal().clamp(min=0).sqrt()
            sum_sq = float(sub.diagonal().sum())
            mean_norm = float(inst_norms.mean())
            st.alignment[ra] = float(norms[a]) ** 2 / sum_sq if real[a] else float("nan")
            st.norm_ratio[ra] = float(norms[a]) / mean_norm if real[a] else float("nan")
            live = [float(n) > floor for n in inst_norms]
            cosines = [
                float(sub[i, j] / (inst_norms[i] * inst_norms[j]))
                for i in range(len(idx))
                for j in range(i + 1, len(idx))
                if live[i] and live[j]
            ]
            st.instance_cos[ra] = sum(cosines) / len(cosines) if cosines else float("nan")
    finite = {r: s for r, s in st.share.items() if math.isfinite(s)}
    if finite:
        st.capture_role = max(finite, key=lambda r: (finite[r], r))
        st.capture_index = finite[st.capture_role]
    return st


def gradient_mass(turns: Iterable[Turn]) -> dict[str, dict[str, float]]:
    """Per role: trained tokens, sequences, and sum over tokens of |advantage| (each token carries its turn's)."""
    out: dict[str, dict[str, float]] = {}
    for t in turns:
        row = out.setdefault(t.role, {"tokens": 0.0, "seqs": 0.0, "abs_adv": 0.0})
        row["tokens"] += len(t.completion_ids)
        row["seqs"] += 1
        row["abs_adv"] += abs(t.advantage) * len(t.completion_ids)
    return out


class DirectionEMA:
    """An exponential moving average of one vector stream: `observe(g)` returns cos(g, EMA before g), NaN on
    the first call, then updates EMA <- decay * EMA + (1 - decay) * g."""

    def __init__(self, decay: float, state: Vector | None = None):
        self.decay, self.state = decay, state

    def observe(self, g: Vector) -> float:
        if self.state is None or self.state.shape != g.shape:
            self.state = g.detach().clone()
            return float("nan")
        if self.state.device != g.device:  # restored from a checkpoint (loaded on the CPU) into a GPU run
            self.state = self.state.to(g.device)
        c = cosine(g, self.state)
        self.state.mul_(self.decay).add_(g.detach(), alpha=1 - self.decay)
        return c


class RoleEMAs:
    """One `DirectionEMA` per (policy, role), kept in checkpoints as `ema/{pid}/{role}` tensors."""

    def __init__(self, decay: float, by_policy: dict[str, dict[str, DirectionEMA]] | None = None):
        self.decay = decay
        self.by_policy: dict[str, dict[str, DirectionEMA]] = by_policy or {}

    def get(self, pid: str, role: str) -> DirectionEMA:
        return self.by_policy.setdefault(pid, {}).setdefault(role, DirectionEMA(self.decay))

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {
            f"ema/{pid}/{role}": e.state
            for pid, roles in self.by_policy.items()
            for role, e in roles.items()
            if e.state is not None
        }

    def load_state_dict(self, state: dict[str, torch.Tensor] | None) -> None:
        self.by_policy = {}
        for key, v in (state or {}).items():
            kind, pid, role = key.split("/", 2)
            if kind == "ema":
                self.by_policy.setdefault(pid, {})[role] = DirectionEMA(self.decay, v.clone())


# ---------------------------------------------------------------------------------------------------------
# Across steps: schedule, persistence, optimizer effect, metrics


@dataclass
class _PolicyStep:
    vectors: dict[str, Vector] = field(default_factory=dict)
    role_of: dict[str, str] = field(default_factory=dict)
    update_sizes: list[float] = field(default_factory=list)
    role_steps: dict[str, int] = field(default_factory=dict)


class GradientMonitor:
    """Run-level gradient diagnostics (`diagnostics.gradients`). The trainer passes it to `update_policy` only
    on steps where `due(step)`; the update reports into it and `pop_metrics()` returns the step's metrics.

    Kept across steps: each (policy, role)'s EMA of its gradient (persistence; saved in checkpoints by
    `state_dict`), and each policy's starting weights (drift). The starting weights are copied when the
    monitor is built, before a checkpoint is loaded: policy initialisation is a function of the run seed, so a
    resumed run measures drift from the same point without storing them."""

    def __init__(
        self,
        every: int,
        policy_params: Mapping[str, Sequence[torch.nn.Parameter]],
        *,
        sketch_dim: int = 0,
        ema_decay: float = 0.9,
        seed: int = 0,
    ):
        self.every = every
        self.sketch = CountSketch(sketch_dim, seed) if sketch_dim else None
        self.ema_decay = ema_decay
        self.theta0 = {pid: flat_params(ps).clone() for pid, ps in policy_params.items()}
        self.ema = RoleEMAs(self.ema_decay)
        self._steps: dict[str, _PolicyStep] = {}
        self._metrics: dict[str, Any] = {}

    @classmethod
    def from_config(
        cls,
        settings: GradientDiagnosticsSettings,
        policy_params: Mapping[str, Sequence[torch.nn.Parameter]],
        seed: int,
    ) -> GradientMonitor | None:
        """The monitor `diagnostics.gradients` asks for (None when off), over each policy's trainable parameters;
        `seed` (the run's) draws the sketch."""
        if not settings.every:
            return None
        return cls(
            settings.every,
            dict(policy_params),
            sketch_dim=settings.sketch_dim,
            ema_decay=settings.ema_decay,
            seed=seed,
        )

    def due(self, step: int) -> bool:
        """`step` is 0-based; diagnostics run on 1-based steps every, 2 * every, ..."""
        return self.every > 0 and (step + 1) % self.every == 0

    # --- reported by update_policy ---

    def add_gradients(self, pid: str, vectors: Mapping[str, Vector], role_of: Mapping[str, str]) -> None:
        """One mini-batch's per-instance vectors (of the step's first pass over its data) and each instance's
        role."""
        rec = self._steps.setdefault(pid, _PolicyStep())
        for inst, v in vectors.items():
            rec.vectors[inst] = rec.vectors[inst] + v if inst in rec.vectors else v
            rec.role_of[inst] = role_of[inst]

    def add_update(self, pid: str, size: float, roles: Iterable[str]) -> None:
        rec = self._steps.setdefault(pid, _PolicyStep())
        rec.update_sizes.append(size)
        for r in set(roles):
            rec.role_steps[r] = rec.role_steps.get(r, 0) + 1

    def finish_policy(self, pid: str, turns: Sequence[Turn], params: Sequence[torch.nn.Parameter]) -> None:
        rec = self._steps.pop(pid, _PolicyStep())
        m: dict[str, Any] = {}
        st = gradient_statistics(rec.vectors, rec.role_of)
        mass = gradient_mass(turns)
        role_vectors: dict[str, Vector] = {}
        for inst, v in rec.vectors.items():
            r = rec.role_of[inst]
            role_vectors[r] = role_vectors[r] + v if r in role_vectors else v
        if rec.vectors:
            m[grad_key(pid, "norm")] = st.policy_norm
        for role in sorted(set(mass) | set(st.norm)):
            for k, value in mass.get(role, {}).items():
                m[grad_role_key(pid, role, k)] = value
            if role in st.norm:
                m[grad_role_key(pid, role, "norm")] = st.norm[role]
                m[grad_role_key(pid, role, "share")] = st.share[role]
                m[grad_role_key(pid, role, "instances")] = st.instances[role]
                if role in st.alignment:
                    m[grad_role_key(pid, role, "alignment")] = st.alignment[role]
                    m[grad_role_key(pid, role, "norm_ratio")] = st.norm_ratio[role]
                    m[grad_role_key(pid, role, "instance_cos")] = st.instance_cos[role]
                ema = self.ema.get(pid, role)
                # a noise-level gradient still feeds the EMA (it is what the update used) but has no direction
                persistence = ema.observe(role_vectors[role])
                m[grad_role_key(pid, role, "persistence")] = None if role in st.noise else persistence
        for (a, b), c in st.cos.items():
            m[grad_cos_key(pid, a, b)] = c
        if len(st.norm) >= 2:  # capture is a property of a policy that several roles share
            m[grad_key(pid, "capture_index")] = st.capture_index
            m[grad_key(pid, "capture_role")] = st.capture_role
        m[update_key(pid, "optimizer_steps")] = float(len(rec.update_sizes))
        if rec.update_sizes:
            m[update_key(pid, "size")] = sum(rec.update_sizes) / len(rec.update_sizes)
            m[update_key(pid, "size_last")] = rec.update_sizes[-1]
        for role in sorted(set(mass) | set(rec.role_steps)):
            m[update_role_key(pid, role, "optimizer_steps")] = float(rec.role_steps.get(role, 0))
        if pid in self.theta0:
            m[update_key(pid, "drift")] = norm64(flat_params(params) - self.theta0[pid])
        self._metrics.update(m)

    def pop_metrics(self) -> dict[str, Any]:
        out, self._metrics = self._metrics, {}
        return out

    # --- checkpoints ---

    def state_dict(self) -> dict[str, torch.Tensor]:
        return self.ema.state_dict()

    def load_state_dict(self, state: dict[str, torch.Tensor] | None) -> None:
        self.ema.load_state_dict(state)
