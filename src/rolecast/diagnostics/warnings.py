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

import dataclasses
import math
import re
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from rolecast.diagnostics.signatures import (
    AnswerExtractor,
    Example,
    Finding,
    SeriesSignatures,
    SignatureThresholds,
    episode_findings,
)

from ..workflows.parsing import last_boxed

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


@dataclass
class Alert:
    name: str  # signature or signal name, e.g. "rubber_stamping", "amplification"
    kind: str  # "signature" | "gradient"
    step: int
    subject: str  # role, "pid/role" or policy id
    value: float
    threshold: float
    message: str
    examples: list[Example] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def metric_entries(alerts: Iterable[Alert]) -> dict[str, float]:
    """The metrics to log for a step's alerts: "warn/<name>" = 1.0 for each signal that fired (absent otherwise)."""
    return {f"warn/{a.name}": 1.0 for a in alerts}


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


_ROLE_STAT = re.compile(r"^grad/(?P<pid>[^/]+)/(?P<role>[^/]+)/(?P<stat>alignment|persistence|norm|share)$")
_SPIKES = (
    (re.compile(r"^grad/(?P<subject>[^/]+)/norm$"), "grad_spike"),
    (re.compile(r"^policy/(?P<subject>[^/]+)/grad_norm$"), "grad_spike"),
    (re.compile(r"^grad/(?P<subject>[^/]+/[^/]+)/norm$"), "grad_spike"),
    (re.compile(r"^update/(?P<subject>[^/]+)/size$"), "update_spike"),
)


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
        findings: list[Finding] = []
        if episodes:
            findings += episode_findings(step, episodes, self.cfg.signatures, self.extract)
        findings += self.series.update(step, metrics, episodes)
        alerts = [
            Alert(f.name, "signature", f.step, f.subject, f.value, f.threshold, f.message, f.examples) for f in findings
        ]
        alerts += self._gradient_alerts(step, metrics)
        return alerts

    def _gradient_alerts(self, step: int, metrics: dict[str, Any]) -> list[Alert]:
        c = self.cfg
        out: list[Alert] = []
        roles_of: dict[str, set[str]] = {}
        for k in metrics:
            m = _ROLE_STAT.match(k)
            if m and m.group("stat") == "share":
                roles_of.setdefault(m.group("pid"), set()).add(m.group("role"))
        for k in sorted(metrics):
            x = _num(metrics[k])
            if x is None:
                continue
            m = _ROLE_STAT.match(k)
            if m and m.group("stat") == "alignment":
                pid, role = m.group("pid"), m.group("role")
                n = _num(metrics.get(f"grad/{pid}/{role}/instances"))
                if n is not None and n < 2:
                    continue
                thr = 1 + c.amplification_coherence * (n - 1) if n is not None else c.amplification_abs
                if x >= thr:
                    out.append(
                        Alert(
                            "amplification",
                            "gradient",
                            step,
                            f"{pid}/{role}",
                            x,
                            thr,
                            f"{role} on {pid}: instance alignment {x:.2f} with "
                            f"{int(n) if n is not None else '?'} instances (>= {thr:.2f})",
                        )
                    )
            elif m and m.group("stat") == "persistence":
                window = self.persist.setdefault(k, [])
                window.append(x)
                del window[: -c.signatures.window]
                mean = sum(window) / len(window)
                if len(window) == c.signatures.window and mean >= c.persistence:
                    out.append(
                        Alert(
                            "persistence",
                            "gradient",
                            step,
                            f"{m.group('pid')}/{m.group('role')}",
                            mean,
                            c.persistence,
                            f"{m.group('role')} on {m.group('pid')}: gradient direction "
                            f"persistence {mean:.2f} over {len(window)} diagnosed steps",
                        )
                    )
            cap = re.fullmatch(r"grad/(?P<pid>[^/]+)/capture_index", k)
            if cap and len(roles_of.get(cap.group("pid"), ())) >= 2 and x >= c.capture_index:
                pid = cap.group("pid")
                holder = metrics.get(f"grad/{pid}/capture_role")
                out.append(
                    Alert(
                        "capture",
                        "gradient",
                        step,
                        f"{pid}/{holder}",
                        x,
                        c.capture_index,
                        f"{holder} holds {x:.2f} of {pid}'s gradient ({len(roles_of[pid])} roles share it)",
                    )
                )
            for pattern, name in _SPIKES:
                sm = pattern.match(k)
                if not sm:
                    continue
                if k.startswith("policy/") and f"grad/{sm.group('subject')}/norm" in metrics:
                    break  # the same norm, logged twice once gradient diagnostics run: judge it once
                hist = self.history.setdefault(k, [])
                if len(hist) >= c.spike_min_history:
                    med = statistics.median(hist)
                    if med > 0 and x > c.spike_ratio * med:
                        out.append(
                            Alert(
                                name,
                                "gradient",
                                step,
                                sm.group("subject"),
                                x / med,
                                c.spike_ratio,
                                f"{k} = {x:.4g}, {x / med:.1f}x its running median {med:.4g}",
                            )
                        )
                hist.append(x)
                del hist[: -c.spike_history]
                break
        return out

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
