"""Metric names: the interface between the trainer (which writes metrics.jsonl), the diagnostics and the report
(which read it). Every name is built and parsed here, so a family's shape is written down once.

The families (docs/training.md lists what each stat means):

    step, reward, accuracy, episodes, turns_per_episode   one per step, plain names
    role/<role>/<stat>                    per role: turns, reward, adv_mean, length, truncated, entropy, ...
    policy/<pid>/<stat>                   per policy: the same from episodes, and the update's loss, grad_norm, lr, ...
    grad/<pid>/<stat>                     gradient diagnostics of a policy: norm, capture_index, capture_role
    grad/<pid>/<role>/<stat>              of one role on it: norm, share, alignment, instances, persistence, ...
    grad/<pid>/cos/<role_a>|<role_b>      cosine between two roles' gradients on one policy
    update/<pid>/<stat>                   the update: optimizer_steps, size, size_last, drift
    update/<pid>/<role>/<stat>            per role: optimizer_steps
    intervention/<pid>/<role>/<kind>      gradient interventions: damping, balance
    wf/<name>, time/<phase>, rollout/<stat>, warn/<signal>, rollback/<field>     one name after the family
    precursor/<name>, precursor/<pid>/<name>, precursor/<pid>/<role>/<name>
                                          early-warning precursors of a run, a policy, a role on a policy
                                          (diagnostics/precursors.py)
    eval/pass@1, eval/<set>/pass@1        periodic evaluation (and eval/<tag>/pass@1, eval/<set>/<tag>/pass@1,
                                          sent to TensorBoard / W&B only)

Policy ids, roles and stats are single path segments (no "/"). A parser returns a small frozen record, or None
when the name is not of its family; the segment count decides the shape, so `grad/p/norm` is policy p's norm and
`grad/p/norm/share` is the share of a role named "norm". Each record's `key` builds its name back.

This module imports nothing of rolecast (core layer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# ---------------------------------------------------------------------------------------------------------
# Families and plain names

STEP = "step"
REWARD = "reward"
ACCURACY = "accuracy"

ROLE = "role"
POLICY = "policy"
GRAD = "grad"
UPDATE = "update"
INTERVENTION = "intervention"
WF = "wf"
TIME = "time"
ROLLOUT = "rollout"
WARN = "warn"
ROLLBACK = "rollback"
EVAL = "eval"
PRECURSOR = "precursor"

PolicyFamily = Literal["policy", "grad", "update"]
PolicyRoleFamily = Literal["grad", "update", "intervention"]
NamedFamily = Literal["wf", "time", "rollout", "warn", "rollback"]

_POLICY_FAMILIES: tuple[PolicyFamily, ...] = ("policy", "grad", "update")
_POLICY_ROLE_FAMILIES: tuple[PolicyRoleFamily, ...] = ("grad", "update", "intervention")
_NAMED_FAMILIES: tuple[NamedFamily, ...] = ("wf", "time", "rollout", "warn", "rollback")

COS = "cos"  # grad/<pid>/cos/<a>|<b>
PAIR_SEP = "|"
PASS_AT_1 = "pass@1"


# ---------------------------------------------------------------------------------------------------------
# Builders


def role_key(role: str, stat: str) -> str:
    """role/<role>/<stat>"""
    return f"{ROLE}/{role}/{stat}"


def policy_key(pid: str, stat: str) -> str:
    """policy/<pid>/<stat>"""
    return f"{POLICY}/{pid}/{stat}"


def grad_key(pid: str, stat: str) -> str:
    """grad/<pid>/<stat>: a policy's gradient diagnostics (norm, capture_index, capture_role)."""
    return f"{GRAD}/{pid}/{stat}"


def grad_role_key(pid: str, role: str, stat: str) -> str:
    """grad/<pid>/<role>/<stat>"""
    return f"{GRAD}/{pid}/{role}/{stat}"


def grad_cos_key(pid: str, role_a: str, role_b: str) -> str:
    """grad/<pid>/cos/<role_a>|<role_b>"""
    return f"{GRAD}/{pid}/{COS}/{role_a}{PAIR_SEP}{role_b}"


def update_key(pid: str, stat: str) -> str:
    """update/<pid>/<stat>"""
    return f"{UPDATE}/{pid}/{stat}"


def update_role_key(pid: str, role: str, stat: str) -> str:
    """update/<pid>/<role>/<stat>"""
    return f"{UPDATE}/{pid}/{role}/{stat}"


def intervention_key(pid: str, role: str, kind: str) -> str:
    """intervention/<pid>/<role>/<kind>"""
    return f"{INTERVENTION}/{pid}/{role}/{kind}"


def wf_key(name: str) -> str:
    """wf/<name>: a workflow's own per-episode metric (its mean over the step)."""
    return f"{WF}/{name}"


def time_key(phase: str) -> str:
    """time/<phase>: seconds spent in rollout, reward, update, step."""
    return f"{TIME}/{phase}"


def rollout_key(stat: str) -> str:
    """rollout/<stat>"""
    return f"{ROLLOUT}/{stat}"


def grader_errors_key() -> str:
    """rollout/grader_errors: the step's episodes with a text scored 0 because scoring it raised (reason
    "grader_error", rolecast.scoring)."""
    return rollout_key("grader_errors")


def warn_key(signal: str) -> str:
    """warn/<signal>: 1.0 at a step where the early-warning signal fired."""
    return f"{WARN}/{signal}"


def rollback_key(field: str) -> str:
    """rollback/<field>: a rollback on early warning (to_step, count, lr_scale, signals, accuracy)."""
    return f"{ROLLBACK}/{field}"


def precursor_key(name: str, pid: str | None = None, role: str | None = None) -> str:
    """precursor/<name> (of the run), precursor/<pid>/<name> (a policy), precursor/<pid>/<role>/<name> (a role
    on a policy)."""
    if role is not None and pid is None:
        raise ValueError("precursor_key: a role's precursor needs its policy id")
    return "/".join([PRECURSOR, *(x for x in (pid, role) if x is not None), name])


def eval_pass_key(set_name: str | None = None, tag: str | None = None) -> str:
    """eval/pass@1 (the main eval set), eval/<set>/pass@1 (an extra set); with a tag, eval/<tag>/pass@1 and
    eval/<set>/<tag>/pass@1."""
    parts = [EVAL, *(p for p in (set_name, tag) if p is not None), PASS_AT_1]
    return "/".join(parts)


# ---------------------------------------------------------------------------------------------------------
# Parsed records


@dataclass(frozen=True)
class RoleKey:
    """role/<role>/<stat>"""

    role: str
    stat: str

    @property
    def key(self) -> str:
        return role_key(self.role, self.stat)


@dataclass(frozen=True)
class PolicyKey:
    """policy/<pid>/<stat>, grad/<pid>/<stat> or update/<pid>/<stat>"""

    family: PolicyFamily
    pid: str
    stat: str

    @property
    def key(self) -> str:
        return f"{self.family}/{self.pid}/{self.stat}"


@dataclass(frozen=True)
class PolicyRoleKey:
    """grad/<pid>/<role>/<stat>, update/<pid>/<role>/<stat> or intervention/<pid>/<role>/<kind>"""

    family: PolicyRoleFamily
    pid: str
    role: str
    stat: str

    @property
    def subject(self) -> str:
        """ "<pid>/<role>", how alerts and plots name a role on a policy."""
        return f"{self.pid}/{self.role}"

    @property
    def key(self) -> str:
        return f"{self.family}/{self.pid}/{self.role}/{self.stat}"


@dataclass(frozen=True)
class RolePairKey:
    """grad/<pid>/cos/<role_a>|<role_b>"""

    pid: str
    role_a: str
    role_b: str

    @property
    def key(self) -> str:
        return grad_cos_key(self.pid, self.role_a, self.role_b)


@dataclass(frozen=True)
class PrecursorKey:
    """precursor/<name>, precursor/<pid>/<name>, precursor/<pid>/<role>/<name>"""

    name: str
    pid: str | None = None
    role: str | None = None

    @property
    def subject(self) -> str:
        """ "run", "<pid>" or "<pid>/<role>": what the value is of."""
        return "/".join(x for x in (self.pid, self.role) if x is not None) or "run"

    @property
    def key(self) -> str:
        return precursor_key(self.name, self.pid, self.role)


@dataclass(frozen=True)
class EvalPassKey:
    """eval/pass@1, eval/<set>/pass@1, eval/<set>/<tag>/pass@1 (and eval/<tag>/pass@1, see `parse_eval_key`)."""

    set_name: str | None = None
    tag: str | None = None

    @property
    def key(self) -> str:
        return eval_pass_key(self.set_name, self.tag)


# ---------------------------------------------------------------------------------------------------------
# Parsers


def key_family(key: str) -> str | None:
    """The family of a metric name (its first segment: "grad" for grad/p/norm), None for a plain name (reward)."""
    family, sep, rest = key.partition("/")
    return family if sep and family and rest else None


def _segments(key: str, n: int) -> list[str] | None:
    """`key` split at "/" when it has exactly `n` non-empty segments, else None."""
    parts = key.split("/")
    return parts if len(parts) == n and all(parts) else None


def parse_role_key(key: str) -> RoleKey | None:
    """role/<role>/<stat> -> RoleKey; anything else -> None."""
    parts = _segments(key, 3)
    if parts is None or parts[0] != ROLE:
        return None
    return RoleKey(parts[1], parts[2])


def parse_policy_key(key: str) -> PolicyKey | None:
    """policy/<pid>/<stat>, grad/<pid>/<stat>, update/<pid>/<stat> -> PolicyKey; anything else -> None."""
    parts = _segments(key, 3)
    if parts is None:
        return None
    for family in _POLICY_FAMILIES:
        if parts[0] == family:
            return PolicyKey(family, parts[1], parts[2])
    return None


def parse_policy_role_key(key: str) -> PolicyRoleKey | None:
    """grad/<pid>/<role>/<stat>, update/<pid>/<role>/<stat>, intervention/<pid>/<role>/<kind> -> PolicyRoleKey;
    anything else (a role-pair cosine grad/<pid>/cos/<a>|<b> included) -> None."""
    parts = _segments(key, 4)
    if parts is None or PAIR_SEP in parts[3]:
        return None
    for family in _POLICY_ROLE_FAMILIES:
        if parts[0] == family:
            return PolicyRoleKey(family, parts[1], parts[2], parts[3])
    return None


def parse_role_pair_key(key: str) -> RolePairKey | None:
    """grad/<pid>/cos/<role_a>|<role_b> -> RolePairKey; anything else -> None."""
    parts = _segments(key, 4)
    if parts is None or parts[0] != GRAD or parts[2] != COS:
        return None
    a, sep, b = parts[3].partition(PAIR_SEP)
    if not sep or not a or not b or PAIR_SEP in b:
        return None
    return RolePairKey(parts[1], a, b)


def parse_named_key(key: str, family: NamedFamily) -> str | None:
    """The name after `family/` for the one-name families (wf/<name>, time/<phase>, rollout/<stat>,
    warn/<signal>, rollback/<field>); None when `key` is not of that family or the name is empty."""
    name = key.removeprefix(family + "/")
    return name if name != key and name else None


def parse_precursor_key(key: str) -> PrecursorKey | None:
    """precursor/<name>, precursor/<pid>/<name>, precursor/<pid>/<role>/<name> -> PrecursorKey; else None."""
    parts = key.split("/")
    if not 2 <= len(parts) <= 4 or not all(parts) or parts[0] != PRECURSOR:
        return None
    if len(parts) == 2:
        return PrecursorKey(parts[1])
    if len(parts) == 3:
        return PrecursorKey(parts[2], parts[1])
    return PrecursorKey(parts[3], parts[1], parts[2])


def parse_eval_key(key: str, tags: tuple[str, ...] = ("base", "periodic", "final")) -> EvalPassKey | None:
    """eval/pass@1, eval/<x>/pass@1, eval/<set>/<tag>/pass@1 -> EvalPassKey; anything else -> None. A middle
    segment among `tags` is read as a tag (eval/<tag>/pass@1), any other as an extra eval set's name."""
    parts = key.split("/")
    if len(parts) < 2 or len(parts) > 4 or not all(parts) or parts[0] != EVAL or parts[-1] != PASS_AT_1:
        return None
    if len(parts) == 2:
        return EvalPassKey()
    if len(parts) == 3:
        return EvalPassKey(tag=parts[1]) if parts[1] in tags else EvalPassKey(set_name=parts[1])
    return EvalPassKey(set_name=parts[1], tag=parts[2])
