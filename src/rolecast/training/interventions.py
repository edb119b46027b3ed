"""Interventions on a policy's update aimed at role-level gradient dynamics (config section `interventions`).

Each is off by default, and with all of them off `Interventions.from_config` returns None and the update runs
its plain path, bit for bit. Two act on the loss, per row:
- `kl_coef_by_role`: a per-role coefficient on the k3 KL to the starting model (roles not named keep
  `train.kl_coef`);
- `multiplicity_norm`: a role with N instances on a policy (3 voters, 3 workers) has each row's loss divided
  by N, so parallel copies of one role weigh like one.
Two act on the gradient between the backward passes and clipping, and so need each role's gradient of the
mini-batch exactly; the update gets them with the per-instance accumulation of training/role_batches.py:
- `coherence_damping` (lambda): g_r <- (1 - lambda * max(0, cos(g_r, EMA(g_r)))) g_r, the EMA (decay
  `coherence_ema`) of the role's own undamped mini-batch gradients, updated after each use; a role's first
  gradient (no EMA yet) is left as it is;
- `balance_shares`: the roles of a policy are reweighted so their projection shares s_r = c_r g_r . g / |g|^2
  (g = sum_r c_r g_r) equal the targets (equal, or the configured {role: share} renormalised over the roles
  present), and the combination is rescaled to the norm it had before balancing.
When both run, damping comes first and balancing sees the damped gradients (so damping then only changes the
total norm of a balanced policy).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from rolecast.config.schema import InterventionSettings
from rolecast.core.metric_keys import intervention_key
from rolecast.diagnostics.gradients import RoleEMAs, Vector, gram


def damping_factor(cos: float, lam: float) -> float:
    """1 - lambda * max(0, cos); 1 when the cosine is undefined (no history yet, or a zero gradient)."""
    return 1.0 - lam * max(0.0, cos) if math.isfinite(cos) else 1.0


def projection_shares(gram_matrix: torch.Tensor, coefs: torch.Tensor) -> torch.Tensor:
    """s_r = c_r g_r . g / |g|^2 with g = sum_r c_r g_r, from the Gram matrix of the g_r."""
    gc = gram_matrix @ coefs
    return coefs * gc / (coefs @ gc)


def balance_coefficients(
    gram_matrix: torch.Tensor,
    targets: torch.Tensor,
    *,
    iters: int = 200,
    tol: float = 1e-10,
    bounds: tuple[float, float] = (1e-3, 1e3),
) -> torch.Tensor:
    """Coefficients c (float64) with projection_shares(G, c) ~= targets and |sum_r c_r g_r| = |sum_r g_r|.

    Fixed-point iteration c_r <- c_r sqrt(t_r / s_r): for mutually orthogonal gradients one iteration is exact
    (s_r is proportional to c_r^2 |g_r|^2). A role whose gradient opposes the rest (s_r <= 0) cannot reach a
    positive target; its coefficient stops at the bounds (relative to the others). Roles with a zero gradient
    keep coefficient 1 and the targets are renormalised over the other roles."""
    G = gram_matrix.to(torch.float64)
    n = G.shape[0]
    c = torch.ones(n, dtype=torch.float64)
    active = G.diagonal() > 0
    if int(active.sum()) < 2:
        return c
    Ga = G[active][:, active]
    t = targets.to(torch.float64)[active]
    t = t / t.sum()
    ca = torch.ones(int(active.sum()), dtype=torch.float64)
    for _ in range(iters):
        s = projection_shares(Ga, ca)
        if float((s - t).abs().max()) < tol:
            break
        ca = ca * (t / s.clamp(min=1e-12)).sqrt()
        ca = (ca / ca.log().mean().exp()).clamp(*bounds)  # shares ignore the overall scale: pin it
    before = float(Ga.sum())
    after = float(ca @ Ga @ ca)
    if before > 0 and after > 0:
        ca = ca * math.sqrt(before / after)
    c[active] = ca
    return c


class Interventions:
    """The run's interventions and the state they keep across steps (damping's EMA per policy and role)."""

    def __init__(self, settings: InterventionSettings, kl_coef: float = 0.0):
        self.kl_by_role: dict[str, float] = dict(settings.kl_coef_by_role)
        self.global_kl = kl_coef
        self.damping = float(settings.coherence_damping)
        self.damping_decay = float(settings.coherence_ema)
        self.multiplicity = bool(settings.multiplicity_norm)
        self.balance: bool | dict[str, float] = settings.balance_shares
        self.ema = RoleEMAs(self.damping_decay)
        self._scales: dict[str, list[float]] = {}

    @classmethod
    def from_config(cls, settings: InterventionSettings, kl_coef: float) -> Interventions | None:
        """The interventions `settings` switch on, None when all are off; `kl_coef`: train.kl_coef (the KL
        coefficient of roles `kl_coef_by_role` does not name)."""
        iv = settings
        if not (iv.kl_coef_by_role or iv.coherence_damping > 0 or iv.multiplicity_norm or iv.balance_shares):
            return None
        return cls(iv, kl_coef)

    @property
    def rescales(self) -> bool:
        """Whether the update must capture per-role gradients to rescale them."""
        return self.damping > 0 or bool(self.balance)

    # --- loss side ---

    def kl_coefs(self, roles: Sequence[str]) -> torch.Tensor | None:
        """Per-row KL coefficients `[B]`, or None when no per-role coefficient is configured."""
        if not self.kl_by_role:
            return None
        return torch.tensor([self.kl_by_role.get(r, self.global_kl) for r in roles], dtype=torch.float32)

    def row_weights(self, roles: Sequence[str], instance_counts: dict[str, int]) -> torch.Tensor | None:
        """Per-row loss weights `[B]` (1 / the role's instance count), or None when multiplicity_norm is off."""
        if not self.multiplicity:
            return None
        return torch.tensor([1.0 / max(instance_counts.get(r, 1), 1) for r in roles], dtype=torch.float32)

    # --- gradient side ---

    def role_coefficients(self, pid: str, role_vectors: dict[str, Vector]) -> dict[str, float]:
        """The factor each role's gradient of this mini-batch is multiplied by (damping, then balancing)."""
        roles = sorted(role_vectors)
        coefs = dict.fromkeys(roles, 1.0)
        if self.damping > 0:
            for r in roles:
                ema = self.ema.get(pid, r)
                coefs[r] = damping_factor(ema.observe(role_vectors[r]), self.damping)
                self._scales.setdefault(intervention_key(pid, r, "damping"), []).append(coefs[r])
        if self.balance and len(roles) >= 2:
            targets = self._targets(pid, roles)
            b = balance_coefficients(gram([coefs[r] * role_vectors[r] for r in roles]), targets)
            for i, r in enumerate(roles):
                coefs[r] *= float(b[i])
                self._scales.setdefault(intervention_key(pid, r, "balance"), []).append(float(b[i]))
        return coefs

    def _targets(self, pid: str, roles: list[str]) -> torch.Tensor:
        if not isinstance(self.balance, dict):
            return torch.ones(len(roles), dtype=torch.float64)
        missing = [r for r in roles if r not in self.balance]
        if missing:
            raise ValueError(
                f"interventions.balance_shares: policy {pid!r} trains roles {roles} but no share is "
                f"configured for {missing}"
            )
        return torch.tensor([float(self.balance[r]) for r in roles], dtype=torch.float64)

    def pop_metrics(self) -> dict[str, float]:
        """Mean factor applied per (policy, role) since the last call, `intervention/{pid}/{role}/{kind}`."""
        out = {k: sum(v) / len(v) for k, v in self._scales.items() if v}
        self._scales = {}
        return out

    # --- checkpoints ---

    def state_dict(self) -> dict[str, torch.Tensor]:
        return self.ema.state_dict()

    def load_state_dict(self, state: dict[str, torch.Tensor] | None) -> None:
        self.ema.load_state_dict(state)
