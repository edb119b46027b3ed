"""Per-step metrics computed from episodes alone: outcome, per-role stats, workflow-specific signals."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence

from rolecast.core.episode import Episode, PickClaim, Turn, VerdictClaim
from rolecast.core.metric_keys import policy_key, role_key, wf_key


def _mean(xs: Iterable[float]) -> float:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else float("nan")


def _std(xs: Sequence[float]) -> float:
    return statistics.pstdev(xs) if len(xs) > 1 else 0.0


def episode_metrics(episodes: Sequence[Episode]) -> dict[str, float]:
    m: dict[str, float] = {
        "reward": _mean(ep.reward for ep in episodes),
        "accuracy": _mean(float(ep.reward >= 1.0) for ep in episodes),
        "episodes": float(len(episodes)),
        "turns_per_episode": _mean(len(ep.turns) for ep in episodes),
    }
    by_role: dict[str, list[Turn]] = defaultdict(list)
    by_policy: dict[str, list[Turn]] = defaultdict(list)
    for ep in episodes:
        for t in ep.turns:
            by_role[t.role].append(t)
            by_policy[t.policy_id].append(t)
    for key, table in ((role_key, by_role), (policy_key, by_policy)):
        for name, turns in sorted(table.items()):
            m[key(name, "turns")] = float(len(turns))
            m[key(name, "reward")] = _mean(t.reward for t in turns)
            m[key(name, "adv_mean")] = _mean(t.advantage for t in turns)
            m[key(name, "adv_std")] = _std([t.advantage for t in turns])
            m[key(name, "length")] = _mean(len(t.completion_ids) for t in turns)
            m[key(name, "truncated")] = _mean(float(t.finish_reason == "length") for t in turns)
            own = [t.claim.correct for t in turns if t.claim is not None and t.claim.correct is not None]
            if own:
                m[key(name, "accuracy")] = _mean(float(x) for x in own)
    m.update(_claim_metrics(episodes))
    wf: dict[str, list[float]] = defaultdict(list)
    for ep in episodes:
        for k, v in ep.metrics.items():
            wf[k].append(v)
    m.update({wf_key(k): _mean(v) for k, v in sorted(wf.items())})
    return m


def _claim_metrics(episodes: Sequence[Episode]) -> dict[str, float]:
    """Evaluator precision/recall against ground truth and aggregator agreement with a correct candidate."""
    out: dict[str, float] = {}
    verdicts = [
        c
        for ep in episodes
        for t in ep.turns
        if isinstance(c := t.claim, VerdictClaim) and c.reviewed_correct is not None
    ]
    if verdicts:
        accepted = [v for v in verdicts if v.accept]
        truly = [v for v in verdicts if v.reviewed_correct]
        out[wf_key("evaluator_accept_rate")] = len(accepted) / len(verdicts)
        out[wf_key("evaluator_precision")] = _mean(float(bool(v.reviewed_correct)) for v in accepted)
        out[wf_key("evaluator_recall")] = _mean(float(v.accept) for v in truly)
        out[wf_key("evaluator_accuracy")] = _mean(float(bool(v.correct)) for v in verdicts)
    picks = [
        c
        for ep in episodes
        for t in ep.turns
        if isinstance(c := t.claim, PickClaim) and c.candidates_correct is not None
    ]
    if picks:
        solvable = [p for p in picks if any(p.candidates_correct or ())]
        out[wf_key("aggregator_solvable")] = len(solvable) / len(picks)
        out[wf_key("aggregator_picks_correct")] = _mean(float((p.candidates_correct or [])[p.picked]) for p in solvable)
    return out
