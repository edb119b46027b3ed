"""Early warning: at each step, which failure signatures or gradient signals crossed their thresholds.

Use from the training loop (once per step, after the step's metrics are computed):

    warn = EarlyWarning()                          # or EarlyWarning(WarningConfig(capture_index=0.9), extract=task.extract_answer)
    warn.load_state_dict(state["early_warning"])   # on resume, if saved
    ...
    alerts = warn.check(step, metrics, episodes)   # metrics: this step's dict; episodes: Episode objects or dicts
    metrics.update(metric_entries(alerts))         # "warn/<name>": 1.0 for each signal that fired
    state["early_warning"] = warn.state_dict()     # JSON-able; checkpoint it with the rest

`check` is pure apart from the detector state it keeps (baselines, recent windows, spike histories), which
`state_dict` returns as plain JSON, so a resumed run warns exactly as an uninterrupted one. `rolecast analyze`
replays a finished run's metrics.jsonl and episodes through the same class.

Signals (thresholds are the fields of `WarningConfig`; docs/analysis.md explains each):
- every failure signature of `signatures.py` (episode detectors when episodes are given; series detectors);
- `amplification`: the alignment `grad/{pid}/{role}/alignment` = |sum g_i|^2 / sum |g_i|^2 of a role with
  N = `grad/{pid}/{role}/instances` >= 2 parallel instances at least 1 + amplification_coherence * (N - 1),
  i.e. that far from orthogonal instances (1) towards identical ones (N); with equal norms, a mean pairwise
  cosine of at least amplification_coherence. amplification_abs when N is not logged. (Runs logged before the
  alignment measure existed have only the norm ratio `.../amplification`, which is N whenever one instance
  holds all the gradient; it is no longer judged.);
- `capture`: `grad/{pid}/capture_index` >= capture_index on a policy that serves >= 2 roles (counted from its
  `grad/{pid}/{role}/share` keys); the subject names `grad/{pid}/capture_role`;
- `persistence`: the mean of the last `window` values of `grad/{pid}/{role}/persistence` >= persistence;
- `grad_spike` / `update_spike`: `grad/{pid}/norm` (else `policy/{pid}/grad_norm`), `grad/{pid}/{role}/norm` (grad)
  or `update/{pid}/size` (update) above spike_ratio times the median of its previous values (at least
  spike_min_history of them, at most spike_history kept).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from rolecast.core.metric_keys import (
    GRAD,
    POLICY,
    UPDATE,
    PolicyKey,
    PolicyRoleKey,
    grad_key,
    grad_role_key,
    parse_policy_key,
    parse_policy_role_key,
    warn_key,
)
from rolecast.core.text import last_boxed
from rolecast.diagnostics.signatures import (
    GRADIENT,
    Alert,
    AnswerExtractor,
    SeriesSignatures,
    SignatureThresholds,
    episode_findings,
)

# Every name an Alert can carry: the failure signatures of signatures.py, then the gradient signals above
# (config `interventions.rollback.signals` is checked against it; the gradient ones need gradient diagnostics).
SIGNATURE_SIGNALS = (
    "planner_solves",
    "parallel_echo",
    "evaluator_rewrites",
    "aggregator_answers",
    "position_bias",
    "blind_majority",
    "format_failure",
    "length_collapse",
    "length_blowup",
    "entropy_collapse",
    "truncation_surge",
    "rubber_stamping",
)
# One line each, for one-screen legends (the thresholds are in docs/analysis.md)
SIGNATURE_MEANINGS = {
    "planner_solves": "the planner answers the problem instead of proposing strategies",
    "parallel_echo": "parallel instances of a role write near-identical texts",
    "evaluator_rewrites": "the evaluator writes a solution instead of a verdict",
    "aggregator_answers": "the aggregator boxes an answer instead of a candidate's index",
    "position_bias": "contested picks go to one candidate position",
    "blind_majority": "the aggregator follows a wrong majority over a right minority",
    "format_failure": "a role's claims have no parseable answer or decision",
    "length_collapse": "a role's completions shrink to half their early length",
    "length_blowup": "a role's completions double in length",
    "entropy_collapse": "a role's token entropy falls below 0.3x its early level",
    "truncation_surge": "a role's completions hit max_new_tokens far more often",
    "rubber_stamping": "the evaluator accepts nearly everything while its precision drops",
}
GRADIENT_SIGNALS = ("amplification", "capture", "persistence", "grad_spike", "update_spike")
SIGNALS = SIGNATURE_SIGNALS + GRADIENT_SIGNALS


@dataclass
class WarningConfig:
    signatures: SignatureThresholds = field(default_factory=SignatureThresholds)
    amplification_coherence: float = 0.75
    amplification_abs: float = 2.5  # alignment threshold when the instance count is not logged
    capture_index: float = 0.8
    persistence: float = 0.8
    spike_ratio: float = 5.0
    spike_min_history: int = 5
    spike_history: int = 50


def metric_entries(alerts: Iterable[Alert]) -> dict[str, float]:
    """The metrics to log for a step's alerts: "warn/<name>" = 1.0 for each signal that fired (absent otherwise)."""
    return {warn_key(a.name): 1.0 for a in alerts}


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def _roles_by_policy(metrics: dict[str, Any]) -> dict[str, set[str]]:
    """pid -> the roles with a gradient share on it (grad/<pid>/<role>/share): the roles that share the policy."""
    out: dict[str, set[str]] = {}
    for k in metrics:
        rk = parse_policy_role_key(k)
        if rk is not None and rk.family == GRAD and rk.stat == "share":
            out.setdefault(rk.pid, set()).add(rk.role)
    return out


def _spike_signal(metrics: dict[str, Any], pk: PolicyKey | None, rk: PolicyRoleKey | None) -> tuple[str, str] | None:
    """(signal, subject) when the metric is one judged for spikes: grad/<pid>/norm, policy/<pid>/grad_norm (unless
    grad/<pid>/norm is logged too: the same norm, judged once), grad/<pid>/<role>/norm, update/<pid>/size."""
    if pk is not None:
        if pk.family == GRAD and pk.stat == "norm":
            return "grad_spike", pk.pid
        if pk.family == POLICY and pk.stat == "grad_norm" and grad_key(pk.pid, "norm") not in metrics:
            return "grad_spike", pk.pid
        if pk.family == UPDATE and pk.stat == "size":
            return "update_spike", pk.pid
    if rk is not None and rk.family == GRAD and rk.stat == "norm":
        return "grad_spike", rk.subject
    return None


class EarlyWarning:
    """Per-step early warning over metrics and episodes; see the module docstring for use and rules."""

    def __init__(self, cfg: WarningConfig | None = None, extract: AnswerExtractor = last_boxed):
        self.cfg = cfg or WarningConfig()
        self.extract = extract
        self.series = SeriesSignatures(self.cfg.signatures)
        self.history: dict[str, list[float]] = {}  # spike keys -> previous values
        self.persist: dict[str, list[float]] = {}  # persistence keys -> last `window` values

    def check(self, step: int, metrics: dict[str, Any], episodes: Iterable[Any] = ()) -> list[Alert]:
        episodes = list(episodes)
        alerts: list[Alert] = []
        if episodes:
            alerts += episode_findings(step, episodes, self.cfg.signatures, self.extract)
        alerts += self.series.update(step, metrics, episodes)
        alerts += self._gradient_alerts(step, metrics)
        return alerts

    def _gradient_alerts(self, step: int, metrics: dict[str, Any]) -> list[Alert]:
        roles_of = _roles_by_policy(metrics)
        out: list[Alert | None] = []
        for k in sorted(metrics):
            x = _num(metrics[k])
            if x is None:
                continue
            pk, rk = parse_policy_key(k), parse_policy_role_key(k)
            if rk is not None and rk.family == GRAD and rk.stat == "alignment":
                out.append(self._amplification(step, rk, x, metrics))
            elif rk is not None and rk.family == GRAD and rk.stat == "persistence":
                out.append(self._persistence(step, k, rk, x))
            if pk is not None and pk.family == GRAD and pk.stat == "capture_index":
                out.append(self._capture(step, pk.pid, x, metrics, roles_of.get(pk.pid, set())))
            signal = _spike_signal(metrics, pk, rk)
            if signal is not None:
                out.append(self._spike(step, k, x, *signal))
        return [a for a in out if a is not None]

    def _amplification(self, step: int, rk: PolicyRoleKey, x: float, metrics: dict[str, Any]) -> Alert | None:
        c = self.cfg
        n = _num(metrics.get(grad_role_key(rk.pid, rk.role, "instances")))
        if n is not None and n < 2:
            return None
        thr = 1 + c.amplification_coherence * (n - 1) if n is not None else c.amplification_abs
        if x < thr:
            return None
        return Alert(
            "amplification",
            GRADIENT,
            step,
            rk.subject,
            x,
            thr,
            f"{rk.role} on {rk.pid}: instance alignment {x:.2f} with "
            f"{int(n) if n is not None else '?'} instances (>= {thr:.2f})",
        )

    def _persistence(self, step: int, key: str, rk: PolicyRoleKey, x: float) -> Alert | None:
        c = self.cfg
        window = self.persist.setdefault(key, [])
        window.append(x)
        del window[: -c.signatures.window]
        mean = sum(window) / len(window)
        if len(window) != c.signatures.window or mean < c.persistence:
            return None
        return Alert(
            "persistence",
            GRADIENT,
            step,
            rk.subject,
            mean,
            c.persistence,
            f"{rk.role} on {rk.pid}: gradient direction persistence {mean:.2f} over {len(window)} diagnosed steps",
        )

    def _capture(self, step: int, pid: str, x: float, metrics: dict[str, Any], roles: set[str]) -> Alert | None:
        if len(roles) < 2 or x < self.cfg.capture_index:
            return None
        holder = metrics.get(grad_key(pid, "capture_role"))
        return Alert(
            "capture",
            GRADIENT,
            step,
            f"{pid}/{holder}",
            x,
            self.cfg.capture_index,
            f"{holder} holds {x:.2f} of {pid}'s gradient ({len(roles)} roles share it)",
        )

    def _spike(self, step: int, key: str, x: float, signal: str, subject: str) -> Alert | None:
        """Judge `x` against the running median of the key's previous values, then add it to them."""
        c = self.cfg
        hist = self.history.setdefault(key, [])
        alert = None
        if len(hist) >= c.spike_min_history:
            med = statistics.median(hist)
            if med > 0 and x > c.spike_ratio * med:
                alert = Alert(
                    signal,
                    GRADIENT,
                    step,
                    subject,
                    x / med,
                    c.spike_ratio,
                    f"{key} = {x:.4g}, {x / med:.1f}x its running median {med:.4g}",
                )
        hist.append(x)
        del hist[: -c.spike_history]
        return alert

    def state_dict(self) -> dict[str, Any]:
        return {
            "series": self.series.state_dict(),
            "history": {k: list(v) for k, v in self.history.items()},
            "persist": {k: list(v) for k, v in self.persist.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.series.load_state_dict(state.get("series", {}))
        self.history = {k: list(v) for k, v in state.get("history", {}).items()}
        self.persist = {k: list(v) for k, v in state.get("persist", {}).items()}
