"""Precursors of a cliff: cheap per-step measurements that might move before accuracy falls, and the rule that
scores one honestly against labelled runs (a threshold fitted on some seeds, recall, lead time and false alarms
measured on the others, with exact intervals).

Two halves, both pure:

1. **Measurements**, functions of tensors a training step has or can get with one extra forward pass
   (docs/analysis.md, "Precursors", says which tensors and when the trainer computes each):
   `probe_log_likelihood` (mean log-likelihood per token of a fixed probe set of known-correct outputs, per
   policy and role) and `change_from_base`; `update_ratio` (|dW| / |W| of one tensor, e.g. the output head);
   `update_to_weight_ratio` (the same over a policy's trainable tensors); `mean_token_entropy` and `slope` (a
   trend over a window); `kl_exact` and `kl_estimate` (KL to the base policy, from logits or from per-token
   log-probs); `canary_accuracy`.
2. **Series and scoring**, functions of metric rows (metrics.jsonl) and run labels. A `Precursor` in the
   `PRECURSORS` registry turns a run's metric rows into one series per subject (policy or role); users add
   their own with `@register_precursor`. `fit_threshold` picks a threshold on fitting runs by a documented
   rule, `score_precursor` / `score_combined` measure it on held-out runs.

Metric names: precursor/<name> (the run), precursor/<pid>/<name> (a policy), precursor/<pid>/<role>/<name> (a
role on a policy); built and parsed in core/metric_keys.py.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from rolecast.core.episode import Episode, Turn
from rolecast.core.metric_keys import parse_precursor_key, parse_role_key
from rolecast.core.registry import Registry, is_reference, load_callable
from rolecast.diagnostics.intervals import Proportion, Rate, proportion, rate_interval

Direction = Literal["above", "below"]  # which side of its threshold a precursor warns on
Series = Sequence[tuple[int, float]]  # (step, value), in step order
MetricRow = Mapping[str, Any]
SeriesFn = Callable[[Sequence[MetricRow]], dict[str, list[tuple[int, float]]]]

# ---------------------------------------------------------------------------------------------------------
# 1. Measurements (tensors -> numbers)


def _masked(values: torch.Tensor, mask: torch.Tensor, what: str) -> tuple[torch.Tensor, torch.Tensor]:
    if values.shape != mask.shape:
        raise ValueError(f"{what}: values {tuple(values.shape)} and mask {tuple(mask.shape)} differ in shape")
    m = mask.to(torch.float64)
    if float(m.sum()) <= 0:
        raise ValueError(f"{what}: the mask selects no token")
    return values.to(torch.float64) * m, m


def probe_log_likelihood(token_logprobs: torch.Tensor, mask: torch.Tensor) -> float:
    """The mean log-probability per token of a probe set of known-correct outputs, over all its output tokens
    (token-weighted). `token_logprobs[b, t]` = log pi(y_t | prompt_b, y_<t) of probe output b's t-th token under
    the policy; `mask[b, t]` = 1 on output tokens, 0 on padding. A fall means the policy finds outputs it once
    produced correctly less likely ("lazy likelihood displacement")."""
    weighted, m = _masked(token_logprobs, mask, "probe_log_likelihood")
    return float(weighted.sum() / m.sum())


def change_from_base(value: float, base: float) -> float:
    """value - base: a precursor's change from its value on the untrained policy (measured before step 1)."""
    return value - base


def _squared_norms(before: torch.Tensor, after: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """|after - before|^2 and |before|^2, summed in float64. The difference is taken in the tensors' own dtype
    (exact where the update is smaller than the weight, by Sterbenz's lemma; a float64 copy of every tensor would
    cost the trainer, which calls this every step, 2.5x the time), or in float64 when their dtypes differ."""
    b, a = before.detach(), after.detach()
    delta = a - b if a.dtype == b.dtype else a.to(torch.float64) - b.to(torch.float64)
    return (
        torch.linalg.vector_norm(delta, dtype=torch.float64) ** 2,
        torch.linalg.vector_norm(b, dtype=torch.float64) ** 2,
    )


def _ratio(delta_sq: float, norm_sq: float) -> float:
    if norm_sq == 0.0:
        return math.inf if delta_sq > 0 else 0.0
    return math.sqrt(delta_sq / norm_sq)


def update_ratio(before: torch.Tensor, after: torch.Tensor) -> float:
    """|after - before| / |before| (Frobenius norms, accumulated in float64) of one tensor, e.g. the output head's
    weight before and after a step's update. inf when `before` is zero and the tensor moved, 0 when neither."""
    if before.shape != after.shape:
        raise ValueError(f"update_ratio: shapes differ, {tuple(before.shape)} and {tuple(after.shape)}")
    delta_sq, norm_sq = torch.stack(_squared_norms(before, after)).tolist()
    return _ratio(delta_sq, norm_sq)


def update_to_weight_ratio(before: Mapping[str, torch.Tensor], after: Mapping[str, torch.Tensor]) -> float:
    """sqrt(sum |dW_i|^2) / sqrt(sum |W_i|^2) over a policy's trainable tensors (the same names before and
    after one step): the update's size relative to the weights, one number per policy. The sums stay on the
    tensors' device until the end (one transfer, not one per tensor: the trainer calls it every step)."""
    if set(before) != set(after):
        missing = sorted(set(before) ^ set(after))
        raise ValueError(f"update_to_weight_ratio: tensors differ before and after: {missing[:5]}")
    if not before:
        return 0.0
    parts = [_squared_norms(b, after[name]) for name, b in before.items()]
    delta_sq, norm_sq = torch.stack(
        [torch.stack([d for d, _ in parts]).sum(), torch.stack([n for _, n in parts]).sum()]
    ).tolist()
    return _ratio(delta_sq, norm_sq)


def mean_token_entropy(logits: torch.Tensor, mask: torch.Tensor) -> float:
    """The mean over masked positions of the entropy -sum_v p_v log p_v of the next-token distribution
    (`logits[b, t, v]`, `mask[b, t]`), in nats."""
    if logits.shape[:-1] != mask.shape:
        raise ValueError(f"mean_token_entropy: logits {tuple(logits.shape)} do not match mask {tuple(mask.shape)}")
    logp = torch.log_softmax(logits.to(torch.float64), dim=-1)
    entropy = -(logp.exp() * logp).sum(-1)
    weighted, m = _masked(entropy, mask, "mean_token_entropy")
    return float(weighted.sum() / m.sum())


def slope(points: Series, window: int) -> float | None:
    """The least-squares slope (per step) of the last `window` (step, value) points; None until there are
    `window` of them (window >= 2)."""
    if window < 2:
        raise ValueError(f"slope: the window needs at least 2 points, got {window}")
    last = [(float(s), float(v)) for s, v in points][-window:]
    if len(last) < window:
        return None
    mx = sum(s for s, _ in last) / window
    my = sum(v for _, v in last) / window
    sxx = sum((s - mx) ** 2 for s, _ in last)
    if sxx == 0:
        return None
    return sum((s - mx) * (v - my) for s, v in last) / sxx


def kl_per_position(logits: torch.Tensor, base_logits: torch.Tensor) -> torch.Tensor:
    """KL(pi || pi_base) of the next-token distributions at each position (summed over the vocabulary, the last
    dimension), in float64: `logits[..., v]` the policy's, `base_logits[..., v]` the base's."""
    if logits.shape != base_logits.shape:
        raise ValueError(f"kl_exact: logits {tuple(logits.shape)} and base {tuple(base_logits.shape)} differ")
    logp = torch.log_softmax(logits.to(torch.float64), dim=-1)
    logq = torch.log_softmax(base_logits.to(torch.float64), dim=-1)
    return (logp.exp() * (logp - logq)).sum(-1)


def kl_exact(logits: torch.Tensor, base_logits: torch.Tensor, mask: torch.Tensor) -> float:
    """KL(pi || pi_base) of the next-token distributions, summed over the vocabulary and averaged over masked
    positions: exact at each position of fixed probe sequences (no sampling), from both models' logits."""
    weighted, m = _masked(kl_per_position(logits, base_logits), mask, "kl_exact")
    return float(weighted.sum() / m.sum())


@dataclass
class ProbeSums:
    """Sums over the output tokens of probe sequences, so that chunks of positions add up exactly: the
    log-probability of each probe token under the policy (`ll`), KL(pi || pi_base) at its position (`kl`), and
    the number of tokens. Their means are `probe_log_likelihood` and `kl_exact` of the whole set."""

    ll: float = 0.0
    kl: float = 0.0
    tokens: float = 0.0

    def __add__(self, other: ProbeSums) -> ProbeSums:
        return ProbeSums(self.ll + other.ll, self.kl + other.kl, self.tokens + other.tokens)

    @property
    def mean_ll(self) -> float:
        if self.tokens <= 0:
            raise ValueError("probe_sums: the probe set has no token")
        return self.ll / self.tokens

    @property
    def mean_kl(self) -> float:
        if self.tokens <= 0:
            raise ValueError("probe_sums: the probe set has no token")
        return self.kl / self.tokens


def probe_sums(logits: torch.Tensor, base_logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> ProbeSums:
    """`ProbeSums` of positions `[..., V]` (the policy's `logits` and the base's `base_logits` at the positions
    that predict `targets[...]`, with `mask[...]` 1 on output tokens): the sum of log pi(target) and of
    KL(pi || pi_base) over the masked positions, in float64."""
    if logits.shape[:-1] != targets.shape or targets.shape != mask.shape:
        raise ValueError(
            f"probe_sums: logits {tuple(logits.shape)}, targets {tuple(targets.shape)} and mask "
            f"{tuple(mask.shape)} do not match"
        )
    m = mask.to(torch.float64)
    logp = torch.log_softmax(logits.to(torch.float64), dim=-1)
    ll = logp.gather(-1, targets.long().unsqueeze(-1)).squeeze(-1)
    kl = kl_per_position(logits, base_logits)
    sums = torch.stack([(ll * m).sum(), (kl * m).sum(), m.sum()]).tolist()
    return ProbeSums(sums[0], sums[1], sums[2])


def kl_estimate(
    logprobs: torch.Tensor,
    base_logprobs: torch.Tensor,
    mask: torch.Tensor,
    estimator: Literal["k1", "k2", "k3"] = "k3",
) -> float:
    """KL(pi || pi_base) per token from the log-probs of tokens *sampled from pi* under both models (Schulman's
    estimators, r = pi_base / pi): k1 = -log r (unbiased, can be negative), k2 = (log r)^2 / 2, k3 = r - 1 - log r
    (unbiased and >= 0; the trainer's KL anchor uses it). On tokens not sampled from pi (a fixed probe set) these
    are not the KL: use `kl_exact` there."""
    if logprobs.shape != base_logprobs.shape:
        raise ValueError("kl_estimate: log-probs of the policy and of the base differ in shape")
    log_r = base_logprobs.to(torch.float64) - logprobs.to(torch.float64)
    if estimator == "k1":
        per_token = -log_r
    elif estimator == "k2":
        per_token = log_r**2 / 2
    elif estimator == "k3":
        per_token = torch.expm1(log_r) - log_r
    else:
        raise ValueError(f"kl_estimate: estimator must be k1, k2 or k3, got {estimator!r}")
    weighted, m = _masked(per_token, mask, "kl_estimate")
    return float(weighted.sum() / m.sum())


def canary_accuracy(correct: Iterable[float]) -> float:
    """The accuracy on a small fixed canary set (each problem's score in [0, 1], e.g. 1 if the greedy answer is
    right): their mean."""
    scores = [float(c) for c in correct]
    if not scores:
        raise ValueError("canary_accuracy: the canary set is empty")
    if any(not 0.0 <= s <= 1.0 for s in scores):
        raise ValueError("canary_accuracy: scores must be in [0, 1]")
    return sum(scores) / len(scores)


def select_probes(episodes: Sequence[Episode], k: int) -> dict[str, dict[str, list[Turn]]]:
    """Per policy and role, up to `k` of its turns from the episodes whose final answer scored 1 (`reward >= 1`):
    known-correct outputs of that role. Turns without completion tokens are left out. Spread over problems:
    first every problem's first such turn, then every problem's second, ..., each round in episode order, so
    `k` below the count draws from as many problems as it can; deterministic in the episodes' order."""
    if k < 1:
        raise ValueError(f"select_probes: k must be >= 1, got {k}")
    ranked: dict[tuple[str, str], list[tuple[int, int, Turn]]] = {}
    seen: dict[tuple[str, str, str], int] = {}  # (pid, role, problem) -> turns taken so far
    position = 0
    for ep in episodes:
        if not ep.reward >= 1.0:
            continue
        for t in ep.turns:
            if not t.completion_ids:
                continue
            rank = seen.get((t.policy_id, t.role, ep.problem_id), 0)
            seen[(t.policy_id, t.role, ep.problem_id)] = rank + 1
            ranked.setdefault((t.policy_id, t.role), []).append((rank, position, t))
            position += 1
    out: dict[str, dict[str, list[Turn]]] = {}
    for (pid, role), turns in sorted(ranked.items()):
        out.setdefault(pid, {})[role] = [t for _, _, t in sorted(turns, key=lambda x: (x[0], x[1]))[:k]]
    return out


# ---------------------------------------------------------------------------------------------------------
# 2a. The registry: metric rows -> one series per subject


@dataclass(frozen=True)
class Precursor:
    """A named precursor: how to read its series from a run's metric rows, and which side of a threshold warns."""

    name: str
    direction: Direction
    series: SeriesFn
    description: str = ""

    @property
    def fn(self) -> SeriesFn:
        """The series function (the registry names a duplicate by where it was defined)."""
        return self.series


PRECURSORS: Registry[Precursor] = Registry("precursor")


def register_precursor(name: str, direction: Direction, description: str = "") -> Callable[[SeriesFn], SeriesFn]:
    """`@register_precursor("my_signal", "above")` over a function metric rows -> {subject: [(step, value)]}."""
    if direction not in ("above", "below"):
        raise ValueError(f"register_precursor: direction must be 'above' or 'below', got {direction!r}")

    def deco(fn: SeriesFn) -> SeriesFn:
        PRECURSORS.add(name, Precursor(name, direction, fn, description or (fn.__doc__ or "").strip()))
        return fn

    return deco


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def series_by_subject(
    rows: Sequence[MetricRow], subject_of: Callable[[str], str | None]
) -> dict[str, list[tuple[int, float]]]:
    """(step, value) of every finite number in the rows whose key `subject_of` maps to a subject (None: not one of
    the series), by subject, in step order; rows without an integer step are skipped."""
    out: dict[str, list[tuple[int, float]]] = {}
    for row in rows:
        step = row.get("step")
        if not isinstance(step, int):
            continue
        for k, v in row.items():
            subject = subject_of(k)
            if subject is None or (x := _number(v)) is None:
                continue
            out.setdefault(subject, []).append((step, x))
    return {s: sorted(pts) for s, pts in out.items()}


def logged_series(rows: Sequence[MetricRow], name: str) -> dict[str, list[tuple[int, float]]]:
    """Every logged precursor/.../<name> value by subject ("run", "<pid>", "<pid>/<role>"), in step order."""

    def subject(key: str) -> str | None:
        pk = parse_precursor_key(key)
        return pk.subject if pk is not None and pk.name == name else None

    return series_by_subject(rows, subject)


def role_stat_series(rows: Sequence[MetricRow], stat: str) -> dict[str, list[tuple[int, float]]]:
    """role/<role>/<stat> by role, in step order (e.g. the entropy the trainer logs for every role)."""

    def role(key: str) -> str | None:
        rk = parse_role_key(key)
        return rk.role if rk is not None and rk.stat == stat else None

    return series_by_subject(rows, role)


def windowed_slopes(points: Series, window: int) -> list[tuple[int, float]]:
    """(step, slope of the `window` points ending there) for every point with a full window before it."""
    pts = list(points)
    out = []
    for i in range(window - 1, len(pts)):
        s = slope(pts[: i + 1], window)
        if s is not None:
            out.append((pts[i][0], s))
    return out


ENTROPY_WINDOW = 5


def _logged(name: str) -> SeriesFn:
    def read(rows: Sequence[MetricRow]) -> dict[str, list[tuple[int, float]]]:
        return logged_series(rows, name)

    return read


# The precursors the trainer logs under precursor/... (docs/analysis.md, "Precursors": what it computes, when)
LOGGED: tuple[tuple[str, Direction, str], ...] = (
    ("probe_ll_change", "below", "probe-set mean log-likelihood per token minus its value before training"),
    ("probe_ll", "below", "probe-set mean log-likelihood per token of known-correct outputs"),
    ("head_update_ratio", "above", "the output head's |dW| / |W| in one step"),
    ("update_ratio", "above", "a policy's update-to-weight ratio |dW| / |W| in one step"),
    ("kl_to_base", "above", "KL(pi || pi_base) per token on the probe prompts"),
    ("canary_change", "below", "canary accuracy minus its value before training"),
    ("canary_accuracy", "below", "accuracy on the fixed canary problems"),
)
for _name, _direction, _what in LOGGED:
    PRECURSORS.add(_name, Precursor(_name, _direction, _logged(_name), _what))

# What the trainer computes in its loop (training/precursors.py, config diagnostics.precursors): measured every
# `every` steps, measured at every step, and derived from the metric rows at every step (besides the user's `use`)
MEASURED_PERIODICALLY = ("probe_ll", "probe_ll_change", "kl_to_base", "canary_accuracy", "canary_change")
MEASURED_EACH_STEP = ("update_ratio", "head_update_ratio")
DERIVED_EACH_STEP = ("entropy_slope",)


@register_precursor("entropy", "below", "each role's mean token entropy (role/<role>/entropy)")
def _entropy(rows: Sequence[MetricRow]) -> dict[str, list[tuple[int, float]]]:
    return role_stat_series(rows, "entropy")


@register_precursor(
    "entropy_slope", "below", f"slope per step of each role's entropy over the last {ENTROPY_WINDOW} logged steps"
)
def _entropy_slope(rows: Sequence[MetricRow]) -> dict[str, list[tuple[int, float]]]:
    return {r: windowed_slopes(pts, ENTROPY_WINDOW) for r, pts in role_stat_series(rows, "entropy").items()}


def get_precursor(name: str) -> Precursor:
    """The registered precursor called `name`; ValueError naming the known ones otherwise."""
    p = PRECURSORS.get(name)
    if p is None:
        raise ValueError(f"unknown precursor {name!r}; known: {PRECURSORS.names()}")
    return p


def resolve_precursor(name: str, direction: Direction | None = None) -> Precursor:
    """The precursor `name` names: a registered one, or a "module:function" / "file.py:function" over metric
    rows, named by its function (a function registered with `@register_precursor` keeps its registered name and
    direction; a plain function needs `direction`). ValueError / ConfigError naming what is wrong."""
    if not is_reference(name):
        return get_precursor(name)
    fn = load_callable(name, "precursor")
    for p in PRECURSORS.values():
        if p.series is fn:
            return p
    if direction not in ("above", "below"):
        raise ValueError(f"precursor {name!r}: a precursor given as a function needs its direction (above|below)")
    return Precursor(getattr(fn, "__name__", name.rpartition(":")[2]), direction, fn, (fn.__doc__ or "").strip())


def values_at(series_by_subject: Mapping[str, Series], step: int) -> dict[str, float]:
    """{subject: its value at `step`} for the subjects with a point there."""
    out: dict[str, float] = {}
    for subject, pts in series_by_subject.items():
        for s, v in pts:
            if s == step and (x := _number(v)) is not None:
                out[subject] = x
    return out


def fired_at(
    series_by_subject: Mapping[str, Series], direction: Direction, threshold: float, step: int, subject: str = "any"
) -> tuple[str, float] | None:
    """(subject, value) when the precursor fires at `step` (its value strictly past `threshold`): a named
    subject's value, or ("any") the most alarming value over the subjects, as `run_series` reduces them and
    `score_precursor` judges them; None when it does not fire or has no value at `step`."""
    now = values_at(series_by_subject, step)
    if subject != "any":
        now = {subject: now[subject]} if subject in now else {}
    if not now:
        return None
    pick = max if direction == "above" else min
    worst = pick(sorted(now), key=now.__getitem__)  # ties: the first subject in name order
    return (worst, now[worst]) if fires(now[worst], threshold, direction) else None


def run_series(series_by_subject: Mapping[str, Series], direction: Direction, subject: str = "any") -> Series:
    """One series for a run: a named subject's, or ("any") at each step the most alarming value over the
    subjects (the largest for "above", the smallest for "below"), so the run fires when any subject does."""
    if subject != "any":
        return list(series_by_subject.get(subject, []))
    pick = max if direction == "above" else min
    by_step: dict[int, list[float]] = {}
    for pts in series_by_subject.values():
        for s, v in pts:
            by_step.setdefault(s, []).append(v)
    return [(s, pick(vs)) for s, vs in sorted(by_step.items())]


# ---------------------------------------------------------------------------------------------------------
# 2b. Scoring against labelled runs


@dataclass(frozen=True)
class LabelledRun:
    """A run with what happened to it: `cliff_step` is the first evaluation step of its cliff (a cliff of a
    type the plan counts), None for a calm run. A warning counts for a cliff run when it fires at or before
    `deadline` (default: cliff_step - 1, strictly before the first evaluation that showed the fall)."""

    name: str
    seed: int
    steps: int  # the run's length in training steps (lead as a fraction of the run)
    cliff_step: int | None = None
    deadline: int | None = None

    @property
    def calm(self) -> bool:
        return self.cliff_step is None

    @property
    def warn_by(self) -> int | None:
        if self.cliff_step is None:
            return None
        return self.deadline if self.deadline is not None else self.cliff_step - 1


def fires(value: float, threshold: float, direction: Direction) -> bool:
    """Whether `value` is past `threshold` on the alarming side (strictly); NaN never fires."""
    return value > threshold if direction == "above" else value < threshold


def firing_steps(series: Series, threshold: float, direction: Direction) -> set[int]:
    return {s for s, v in series if fires(v, threshold, direction)}


def alarm_onsets(steps: Sequence[int], firing: set[int]) -> list[int]:
    """An alarm is a stretch of consecutive logged steps (`steps`, in order) that all fire; its onset is the
    first of them. A signal that stays past its threshold is one alarm, not one per step."""
    onsets, previous = [], False
    for s in steps:
        now = s in firing
        if now and not previous:
            onsets.append(s)
        previous = now
    return onsets


@dataclass(frozen=True)
class RunOutcome:
    run: LabelledRun
    first_warning: int | None  # cliff runs: the first alarm at or before the deadline
    false_alarms: int  # calm runs: the number of alarms

    @property
    def lead(self) -> int | None:
        """Steps from the warning to the cliff's first evaluation."""
        if self.first_warning is None or self.run.cliff_step is None:
            return None
        return self.run.cliff_step - self.first_warning


def judge_run(run: LabelledRun, steps: Sequence[int], firing: set[int]) -> RunOutcome:
    """A cliff run is warned when an alarm starts at or before its deadline (alarms after it are ignored; a run
    that did fall raises no false alarms); a calm run's alarms are all false alarms."""
    onsets = alarm_onsets(sorted(set(steps)), firing)
    if run.calm:
        return RunOutcome(run, None, len(onsets))
    warn_by = run.warn_by
    early = [s for s in onsets if warn_by is not None and s <= warn_by]
    return RunOutcome(run, early[0] if early else None, 0)


@dataclass
class PrecursorScore:
    """A rule measured on labelled runs: recall over cliff runs (Clopper-Pearson), lead times of the warned ones,
    false alarms per calm run (Garwood) and the share of calm runs with any alarm (Clopper-Pearson)."""

    recall: Proportion
    false_alarms: Rate  # alarms in calm runs per calm run
    calm_alarmed: Proportion
    leads: list[int]
    lead_fractions: list[float]
    threshold: float | None = None
    direction: Direction | None = None
    outcomes: list[RunOutcome] = field(default_factory=list)

    @property
    def median_lead(self) -> float | None:
        return statistics.median(self.leads) if self.leads else None

    @property
    def median_lead_fraction(self) -> float | None:
        return statistics.median(self.lead_fractions) if self.lead_fractions else None


def score_outcomes(outcomes: Sequence[RunOutcome], level: float = 0.95) -> PrecursorScore:
    cliffs = [o for o in outcomes if not o.run.calm]
    calm = [o for o in outcomes if o.run.calm]
    warned = [o for o in cliffs if o.first_warning is not None]
    leads = [o.lead for o in warned if o.lead is not None]
    return PrecursorScore(
        recall=proportion(len(warned), len(cliffs), level),
        false_alarms=rate_interval(sum(o.false_alarms for o in calm), len(calm), level),
        calm_alarmed=proportion(sum(o.false_alarms > 0 for o in calm), len(calm), level),
        leads=leads,
        lead_fractions=[o.lead / o.run.steps for o in warned if o.lead is not None and o.run.steps > 0],
        outcomes=list(outcomes),
    )


RunSeries = tuple[LabelledRun, Series]


def _clean(series: Series) -> list[tuple[int, float]]:
    return [(int(s), float(v)) for s, v in series if not math.isnan(float(v))]


def score_precursor(
    runs: Sequence[RunSeries], threshold: float, direction: Direction, level: float = 0.95
) -> PrecursorScore:
    """Recall, lead and false alarms of "alarm when the series is past `threshold`" on these runs."""
    outcomes = []
    for run, series in runs:
        pts = _clean(series)
        outcomes.append(judge_run(run, [s for s, _ in pts], firing_steps(pts, threshold, direction)))
    score = score_outcomes(outcomes, level)
    score.threshold, score.direction = threshold, direction
    return score


def score_combined(
    runs: Sequence[tuple[LabelledRun, Sequence[tuple[Series, float, Direction]]]], level: float = 0.95
) -> PrecursorScore:
    """The combined rule: a step fires when any precursor fires at its own threshold; alarms are stretches of
    consecutive logged steps (of any precursor) that fire."""
    outcomes = []
    for run, parts in runs:
        steps: set[int] = set()
        firing: set[int] = set()
        for series, threshold, direction in parts:
            pts = _clean(series)
            steps |= {s for s, _ in pts}
            firing |= firing_steps(pts, threshold, direction)
        outcomes.append(judge_run(run, sorted(steps), firing))
    return score_outcomes(outcomes, level)


@dataclass
class FittedThreshold:
    threshold: float
    direction: Direction
    fit: PrecursorScore  # the rule on the fitting runs
    max_false_alarms_per_calm_run: float


def fit_threshold(
    runs: Sequence[RunSeries], direction: Direction, max_false_alarms_per_calm_run: float = 0.1
) -> FittedThreshold:
    """The fitting rule (docs/analysis.md, "Scoring a precursor"): among the thresholds that raise at most
    `max_false_alarms_per_calm_run` alarms per calm run on these (fitting) runs, the one with the highest recall;
    ties go to fewer false alarms, then the longer median lead, then the threshold farthest into the alarming
    side (the largest for "above"). Candidates: every value the runs logged (an alarm needs a value strictly past
    it) and one past all of them, which never fires, so a threshold always exists. ValueError when the runs hold
    no cliff run or no calm run (nothing to fit)."""
    if not any(not r.calm for r, _ in runs) or not any(r.calm for r, _ in runs):
        raise ValueError("fit_threshold: the fitting runs need at least one cliff run and one calm run")
    if max_false_alarms_per_calm_run < 0:
        raise ValueError("fit_threshold: max_false_alarms_per_calm_run must be >= 0")
    sign = 1.0 if direction == "above" else -1.0
    values = sorted({sign * v for _, series in runs for _, v in _clean(series)})
    candidates = ([values[0] - 1.0] if values else [0.0]) + values  # for "above": fire on values > t
    best: tuple[tuple[float, ...], float, PrecursorScore] | None = None
    for t in candidates:
        score = score_precursor(runs, sign * t, direction)
        if score.false_alarms.value > max_false_alarms_per_calm_run:
            continue
        lead = score.median_lead if score.median_lead is not None else -math.inf
        key = (score.recall.value, -score.false_alarms.value, lead, t)
        if best is None or key > best[0]:
            best = (key, sign * t, score)
    assert best is not None  # the largest candidate never fires: 0 false alarms
    return FittedThreshold(best[1], direction, best[2], max_false_alarms_per_calm_run)


def split_by_seed(
    items: Sequence[RunSeries], fit_seeds: Iterable[int], held_out_seeds: Iterable[int]
) -> tuple[list[RunSeries], list[RunSeries]]:
    """The runs of the fitting seeds and of the held-out seeds (runs of other seeds are in neither)."""
    fit, held = set(fit_seeds), set(held_out_seeds)
    if fit & held:
        raise ValueError(f"split_by_seed: seeds {sorted(fit & held)} are in both halves")
    return [x for x in items if x[0].seed in fit], [x for x in items if x[0].seed in held]
