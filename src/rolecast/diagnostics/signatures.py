"""Failure signatures: named detectors over a step's episodes and over the per-step metric stream.

Every detector has a name, a documented rule with a threshold (the fields of `SignatureThresholds`) and
returns `Alert`s (kind "signature"; the early warning's gradient signals are the same record, warnings.py)
carrying the example turns that triggered it (step, problem id, sample, role, text excerpt), so a reader can check
the call. docs/analysis.md lists them all.

Two kinds:
- episode detectors look at one step's episodes (role leakage, aggregator position bias / blind majority,
  format failure). They accept `Episode` objects or the plain dicts of `episodes/step_N.jsonl` (from
  `dataclasses.asdict(Episode)`); a turn's `claim` may be a dict with a "kind" key, a dict without one, or a
  typed object, and its kind is then inferred from its fields (`claim_kind`).
- series detectors (`SeriesSignatures`) follow per-step metrics against the run's own start: length collapse
  or blow-up, entropy collapse, truncation surge, evaluator rubber-stamping. Their state is a small JSON-able
  dict, so the early warning that runs them inside the training loop can be checkpointed.

Roles are found by what their turns claim where possible (verdict -> evaluator, pick -> aggregator, several
instances of one role -> parallel role); only the planner (orchestrator) is found by role name.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rolecast.core.metric_keys import parse_role_key, wf_key
from rolecast.core.text import last_boxed, parse_strategies

AnswerExtractor = Callable[[str], str | None]  # a task's extract_answer; \boxed{} by default


@dataclass
class SignatureThresholds:
    """Every threshold a signature uses; docs/analysis.md gives the reasoning for each default."""

    # role leakage
    planner_roles: tuple[str, ...] = ("orchestrator",)
    planner_solves_rate: float = 0.5  # share of planner turns with a \boxed{} answer or no STRATEGY line
    echo_similarity: float = 0.9  # difflib ratio of two instances' normalised texts counted as an echo
    echo_min_chars: int = 40  # shorter texts are mostly a bare answer, where agreeing is not echoing
    echo_rate: float = 0.5  # share of eligible episodes whose parallel instances all echo each other
    evaluator_rewrite_rate: float = 0.5  # share of verdict turns that rewrite instead of judging
    evaluator_rewrite_chars: int = 200  # a verdict at least this long *and* ...
    evaluator_rewrite_ratio: float = 1.5  # ... this many times the reviewed solution's length is a rewrite
    aggregator_answers_rate: float = 0.5  # share of pick turns whose \boxed{} is not a candidate index
    # aggregator
    position_bias_rate: float = 0.8  # share of contested picks going to one index
    position_bias_min: int = 8  # contested picks needed before judging
    blind_majority_rate: float = 0.9  # share of "majority wrong, a minority right" picks going to the majority
    blind_majority_min: int = 5
    # format
    format_failure_rate: float = 0.5  # share of a role's claiming turns with no parseable answer / decision
    format_min_turns: int = 4
    # series (per role, against the mean of the first `baseline_steps` steps, on a `window`-step mean)
    baseline_steps: int = 3
    window: int = 3
    length_collapse_ratio: float = 0.5
    length_blowup_ratio: float = 2.0
    entropy_collapse_ratio: float = 0.3
    truncation_surge_delta: float = 0.2  # truncated share up by this much over the baseline ...
    truncation_surge_min: float = 0.25  # ... and at least this high
    rubber_stamp_accept: float = 0.9  # evaluator accept rate (window mean) at least this ...
    rubber_stamp_precision_drop: float = 0.1  # ... while precision fell this much below its baseline
    examples: int = 3  # example turns kept per finding


@dataclass
class Example:
    step: int
    problem_id: str
    sample: int
    role: str
    instance: str
    excerpt: str


SIGNATURE, GRADIENT = "signature", "gradient"  # an Alert's kinds


@dataclass
class Alert:
    """A signal that fired at a step: a failure signature (kind "signature", this module's detectors) or a gradient
    signal of the early warning (kind "gradient", warnings.py), with its value against its threshold."""

    name: str  # signature or signal name, e.g. "rubber_stamping", "amplification"
    kind: str  # "signature" | "gradient"
    step: int
    subject: str  # the role (or "pid/role", or policy) it concerns
    value: float
    threshold: float
    message: str
    examples: list[Example] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


Flagged = Sequence[tuple["EpisodeView", "TurnView", bool]]  # a role's turns, each with whether it shows the sign


def _role_shares(
    name: str,
    step: int,
    by_role: Mapping[str, Flagged],
    threshold: float,
    message: str,
    n_examples: int,
    min_turns: int = 1,
) -> list[Alert]:
    """Per role with at least `min_turns` turns: an alert when the share of its flagged turns reaches `threshold`,
    its examples the first flagged turns. `message` is formatted with the role and the counts ({hits}/{total})."""
    out = []
    for role, rows in by_role.items():
        if len(rows) < max(min_turns, 1):
            continue
        hits = [(ep, t) for ep, t, flagged in rows if flagged]
        rate = len(hits) / len(rows)
        if rate >= threshold:
            text = message.format(role=role, hits=len(hits), total=len(rows))
            examples = [_example(step, ep, t) for ep, t in hits[:n_examples]]
            out.append(Alert(name, SIGNATURE, step, role, rate, threshold, text, examples))
    return out


# ---------------------------------------------------------------------------------------------------------
# Reading episodes defensively


@dataclass
class TurnView:
    role: str
    instance: str
    text: str
    finish_reason: str
    n_completion: int
    claim: dict[str, Any] | None


@dataclass
class EpisodeView:
    problem_id: str
    sample: int
    turns: list[TurnView]


def _get(obj: Any, name: str, default: Any = None) -> Any:
    return obj.get(name, default) if isinstance(obj, dict) else getattr(obj, name, default)


def claim_dict(claim: Any) -> dict[str, Any] | None:
    """A claim as a dict with a "kind": from a dict (kind kept or inferred) or a typed object (its fields)."""
    if claim is None:
        return None
    if isinstance(claim, dict):
        d = dict(claim)
    elif dataclasses.is_dataclass(claim) and not isinstance(claim, type):
        d = dataclasses.asdict(claim)
    elif hasattr(claim, "model_dump"):
        d = claim.model_dump()
    elif hasattr(claim, "__dict__"):
        d = dict(vars(claim))
    else:
        return None
    kind = d.get("kind") or getattr(claim, "kind", None)
    if not isinstance(kind, str):
        kind = "verdict" if "accept" in d else "pick" if "picked" in d else "answer" if "text" in d else None
    d["kind"] = kind
    return d


def view_episodes(episodes: Iterable[Any]) -> list[EpisodeView]:
    """`Episode` objects or episodes/step_N.jsonl dicts -> views; malformed entries are skipped."""
    out = []
    for ep in episodes:
        turns = []
        for t in _get(ep, "turns", None) or []:
            text = _get(t, "text", "") or ""
            role = str(_get(t, "role", "?"))
            turns.append(
                TurnView(
                    role=role,
                    instance=str(_get(t, "instance", role)),
                    text=str(text),
                    finish_reason=str(_get(t, "finish_reason", "stop")),
                    n_completion=len(_get(t, "completion_ids", None) or []),
                    claim=claim_dict(_get(t, "claim", None)),
                )
            )
        out.append(EpisodeView(str(_get(ep, "problem_id", "?")), int(_get(ep, "sample", 0) or 0), turns))
    return out


def excerpt(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _example(step: int, ep: EpisodeView, t: TurnView) -> Example:
    return Example(step, ep.problem_id, ep.sample, t.role, t.instance, excerpt(t.text))


# ---------------------------------------------------------------------------------------------------------
# Episode detectors: each returns the findings that fired at this step (empty when healthy or no evidence)


def planner_solves(step: int, episodes: Sequence[EpisodeView], th: SignatureThresholds) -> list[Alert]:
    """Role leakage, planner: an orchestrator that solves instead of planning. A planner turn 'solves' when it
    states a \\boxed{} answer or has no parseable 'STRATEGY i:' line. Fires when the share of such turns among
    the step's planner turns is >= planner_solves_rate."""
    by_role = {
        role: [
            (ep, t, last_boxed(t.text) is not None or not parse_strategies(t.text, 99))
            for ep in episodes
            for t in ep.turns
            if t.role == role
        ]
        for role in th.planner_roles
    }
    message = "{hits}/{total} {role} turns answer (\\boxed{{}}) or plan no STRATEGY"
    return _role_shares("planner_solves", step, by_role, th.planner_solves_rate, message, th.examples)


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def parallel_echo(step: int, episodes: Sequence[EpisodeView], th: SignatureThresholds) -> list[Alert]:
    """Role leakage, parallel instances: workers (or voters) that echo each other. For every role with >= 2
    instances in an episode whose texts are all >= echo_min_chars long, the episode 'echoes' when every pair of
    instance texts has a difflib similarity >= echo_similarity. Fires when the share of echoing episodes among
    eligible ones is >= echo_rate."""
    eligible: dict[str, int] = Counter()
    echoes: dict[str, list[tuple[EpisodeView, TurnView]]] = defaultdict(list)
    for ep in episodes:
        by_role: dict[str, list[TurnView]] = defaultdict(list)
        for t in ep.turns:
            by_role[t.role].append(t)
        for role, ts in by_role.items():
            if len({t.instance for t in ts}) < 2 or any(len(t.text.strip()) < th.echo_min_chars for t in ts):
                continue
            eligible[role] += 1
            texts = [_norm(t.text) for t in ts]
            if all(
                difflib.SequenceMatcher(None, a, b).ratio() >= th.echo_similarity
                for i, a in enumerate(texts)
                for b in texts[i + 1 :]
            ):
                echoes[role].append((ep, ts[0]))
                echoes[role].append((ep, ts[1]))
    out = []
    for role, n in eligible.items():
        rate = len(echoes[role]) / 2 / n
        if rate >= th.echo_rate:
            out.append(
                Alert(
                    "parallel_echo",
                    SIGNATURE,
                    step,
                    role,
                    rate,
                    th.echo_rate,
                    f"{len(echoes[role]) // 2}/{n} episodes: all {role} instances near-identical",
                    [_example(step, ep, t) for ep, t in echoes[role][: 2 * th.examples]],
                )
            )
    return out


def _reviewed_text(claim: dict[str, Any]) -> str:
    r = claim.get("reviewed")
    return r if isinstance(r, str) else ""


def evaluator_rewrites(step: int, episodes: Sequence[EpisodeView], th: SignatureThresholds) -> list[Alert]:
    """Role leakage, evaluator: a verdict turn that rewrites the solution instead of judging it: it contains a
    code fence, or its last \\boxed{} is neither Correct nor Incorrect (an answer), or it is at least
    evaluator_rewrite_chars long and evaluator_rewrite_ratio times the reviewed solution. Fires when the share
    of such verdict turns is >= evaluator_rewrite_rate."""
    by_role: dict[str, list[tuple[EpisodeView, TurnView, bool]]] = defaultdict(list)
    for ep in episodes:
        for t in ep.turns:
            if not t.claim or t.claim.get("kind") != "verdict":
                continue
            boxed = last_boxed(t.text)
            answer_box = boxed is not None and boxed.strip().strip(".").lower() not in ("correct", "incorrect")
            long = len(t.text) >= th.evaluator_rewrite_chars and len(t.text) >= th.evaluator_rewrite_ratio * len(
                _reviewed_text(t.claim)
            )
            by_role[t.role].append((ep, t, "```" in t.text or answer_box or long))
    message = "{hits}/{total} {role} verdicts contain code, an answer box or a rewrite"
    return _role_shares("evaluator_rewrites", step, by_role, th.evaluator_rewrite_rate, message, th.examples)


def _picks(episodes: Sequence[EpisodeView]) -> dict[str, list[tuple[EpisodeView, TurnView]]]:
    by_role: dict[str, list[tuple[EpisodeView, TurnView]]] = defaultdict(list)
    for ep in episodes:
        for t in ep.turns:
            c = t.claim
            if c and c.get("kind") == "pick" and isinstance(c.get("candidates"), list) and c["candidates"]:
                by_role[t.role].append((ep, t))
    return by_role


def _box_index(text: str, n: int) -> int | None:
    """The 0-based index an explicit \\boxed{i} names, or None when there is no box or it is no index 1..n."""
    boxed = last_boxed(text)
    if boxed is None:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*\.?\s*", boxed)
    return int(m.group(1)) - 1 if m and 1 <= int(m.group(1)) <= n else None


def aggregator_answers(step: int, episodes: Sequence[EpisodeView], th: SignatureThresholds) -> list[Alert]:
    """Role leakage, aggregator: a pick turn that answers instead of choosing: its last \\boxed{} is not a
    candidate index 1..n (e.g. \\boxed{42} with 3 candidates, or a worked answer). Fires when the share of such
    pick turns is >= aggregator_answers_rate. (A pick with no box at all is a format failure.)"""
    by_role = {
        role: [
            (ep, t, last_boxed(t.text) is not None and _box_index(t.text, len(_claim(t)["candidates"])) is None)
            for ep, t in rows
        ]
        for role, rows in _picks(episodes).items()
    }
    message = "{hits}/{total} {role} turns box something other than a candidate index"
    return _role_shares("aggregator_answers", step, by_role, th.aggregator_answers_rate, message, th.examples)


def _claim(t: Any) -> dict[str, Any]:
    """A turn view's claim as a dict (the pick turns `_picks` returns always have one)."""
    return t.claim or {}


def _contested(claim: dict[str, Any], extract: AnswerExtractor) -> bool:
    """The choice matters: candidates differ in correctness (when scored) or in their answers."""
    flags = claim.get("candidates_correct")
    if isinstance(flags, list) and flags:
        return any(flags) and not all(flags)
    answers = [extract(c) or _norm(c) for c in claim["candidates"]]
    return len(set(answers)) > 1


def position_bias(
    step: int, episodes: Sequence[EpisodeView], th: SignatureThresholds, extract: AnswerExtractor = last_boxed
) -> list[Alert]:
    """Aggregator position bias: among contested picks (candidates differ in correctness, or in answers when
    unscored), the share going to the most-picked index. Fires when that share is >= position_bias_rate with at
    least position_bias_min contested picks (chance is 1/n)."""
    out = []
    for role, rows in _picks(episodes).items():
        rows = [
            (ep, t) for ep, t in rows if isinstance(_claim(t).get("picked"), int) and _contested(_claim(t), extract)
        ]
        if len(rows) < th.position_bias_min:
            continue
        counts = Counter(_claim(t)["picked"] for _, t in rows)
        index, top = counts.most_common(1)[0]
        rate = top / len(rows)
        if rate >= th.position_bias_rate:
            n = max(len(_claim(t)["candidates"]) for _, t in rows)
            ex = [(ep, t) for ep, t in rows if _claim(t)["picked"] == index]
            out.append(
                Alert(
                    "position_bias",
                    SIGNATURE,
                    step,
                    role,
                    rate,
                    th.position_bias_rate,
                    f"{top}/{len(rows)} contested picks chose candidate {index + 1} (chance 1/{n})",
                    [_example(step, ep, t) for ep, t in ex[: th.examples]],
                )
            )
    return out


def blind_majority(
    step: int, episodes: Sequence[EpisodeView], th: SignatureThresholds, extract: AnswerExtractor = last_boxed
) -> list[Alert]:
    """Aggregator blind majority: picks where a strict majority of candidates share a wrong answer and some
    other candidate is correct (needs scored claims: candidates_correct). Fires when the share of such picks
    that went to the majority is >= blind_majority_rate, with at least blind_majority_min such picks."""
    by_role: dict[str, list[tuple[EpisodeView, TurnView, bool]]] = {}
    for role, rows in _picks(episodes).items():
        cases = by_role.setdefault(role, [])  # (pick, whether it followed the majority)
        for ep, t in rows:
            c = t.claim or {}
            flags, picked = c.get("candidates_correct"), c.get("picked")
            if not isinstance(flags, list) or not isinstance(picked, int) or not any(flags):
                continue
            answers = [extract(x) for x in c["candidates"]]
            counted = Counter(a for a in answers if a is not None)
            if not counted:
                continue
            major, votes = counted.most_common(1)[0]
            members = [i for i, a in enumerate(answers) if a == major]
            if votes * 2 > len(answers) and not any(flags[i] for i in members):
                cases.append((ep, t, picked in members))
    message = "{hits}/{total} picks followed a wrong majority over a correct minority"
    return _role_shares(
        "blind_majority", step, by_role, th.blind_majority_rate, message, th.examples, th.blind_majority_min
    )


def format_failure(
    step: int, episodes: Sequence[EpisodeView], th: SignatureThresholds, extract: AnswerExtractor = last_boxed
) -> list[Alert]:
    """Format failure: claiming turns with no parseable answer or decision: an answer claim whose text has no
    extractable answer (the task's extractor; \\boxed{} by default), a verdict with no \\boxed{} at all, a pick
    with neither a \\boxed{} nor a digit 1..n. Per role; fires when the share is >= format_failure_rate over at
    least format_min_turns turns."""
    rows: dict[str, list[tuple[EpisodeView, TurnView, bool]]] = defaultdict(list)
    for ep in episodes:
        for t in ep.turns:
            c = t.claim
            if not c or c.get("kind") not in ("answer", "verdict", "pick"):
                continue
            if c["kind"] == "answer":
                text = c.get("text")
                bad = extract(text if isinstance(text, str) else t.text) is None
            elif c["kind"] == "verdict":
                bad = last_boxed(t.text) is None
            else:
                n = len(c.get("candidates") or [])
                bad = last_boxed(t.text) is None and not any(1 <= int(d) <= n for d in re.findall(r"\d", t.text))
            rows[t.role].append((ep, t, bad))
    message = "{hits}/{total} {role} turns have no parseable answer or decision"
    return _role_shares("format_failure", step, rows, th.format_failure_rate, message, th.examples, th.format_min_turns)


def episode_findings(
    step: int, episodes: Iterable[Any], th: SignatureThresholds | None = None, extract: AnswerExtractor = last_boxed
) -> list[Alert]:
    """Every episode detector on one step's episodes (objects or dicts)."""
    th = th or SignatureThresholds()
    views = view_episodes(episodes)
    if not views:
        return []
    return [
        *planner_solves(step, views, th),
        *parallel_echo(step, views, th),
        *evaluator_rewrites(step, views, th),
        *aggregator_answers(step, views, th),
        *position_bias(step, views, th, extract),
        *blind_majority(step, views, th, extract),
        *format_failure(step, views, th, extract),
    ]


# ---------------------------------------------------------------------------------------------------------
# Series detectors: per-step metrics against the run's own start


def _finite(x: Any) -> float | None:
    return (
        float(x)
        if isinstance(x, (int, float)) and not isinstance(x, bool) and x == x and abs(x) != float("inf")
        else None
    )


class _Tracked:
    """One metric: the mean of its first `baseline_steps` values, and a window of its latest values."""

    def __init__(self, baseline_steps: int, window: int, state: dict[str, Any] | None = None):
        self.first: list[float] = list((state or {}).get("first", []))
        self.recent: deque[float] = deque((state or {}).get("recent", []), maxlen=window)
        self.baseline_steps = baseline_steps

    def add(self, x: float) -> None:
        if len(self.first) < self.baseline_steps:
            self.first.append(x)
        self.recent.append(x)

    @property
    def ready(self) -> bool:
        """Judged only once the baseline is complete and the window holds values after it."""
        return len(self.first) == self.baseline_steps and len(self.recent) == self.recent.maxlen

    @property
    def baseline(self) -> float:
        return sum(self.first) / len(self.first)

    @property
    def current(self) -> float:
        return sum(self.recent) / len(self.recent)

    def state(self) -> dict[str, Any]:
        return {"first": list(self.first), "recent": list(self.recent)}


_SERIES_STATS = ("length", "entropy", "truncated")  # the role/<role>/<stat> series followed
_ACCEPT_RATE, _PRECISION = wf_key("evaluator_accept_rate"), wf_key("evaluator_precision")


class SeriesSignatures:
    """Length collapse / blow-up, entropy collapse, truncation surge (per role, from `role/{role}/length`,
    `role/{role}/entropy`, `role/{role}/truncated`) and evaluator rubber-stamping (`wf/evaluator_accept_rate`,
    `wf/evaluator_precision`). Each metric's baseline is the mean of its first `baseline_steps` values; it is
    judged on the mean of its last `window` values, from the first step where both are complete. Feed steps in
    order with `update`; `state_dict` is JSON."""

    def __init__(self, th: SignatureThresholds | None = None):
        self.th = th or SignatureThresholds()
        self.tracked: dict[str, _Tracked] = {}

    def _track(self, key: str, value: float) -> _Tracked:
        tr = self.tracked.get(key)
        if tr is None:
            tr = self.tracked[key] = _Tracked(self.th.baseline_steps, self.th.window)
        tr.add(value)
        return tr

    def update(self, step: int, metrics: dict[str, Any], episodes: Iterable[Any] = ()) -> list[Alert]:
        th = self.th
        views: list[EpisodeView] | None = None

        def examples(pred: Callable[[TurnView], bool], key: Callable[[TurnView], float] | None = None) -> list[Example]:
            nonlocal views
            if views is None:
                views = view_episodes(episodes)
            rows = [(ep, t) for ep in views for t in ep.turns if pred(t)]
            if key is not None:
                rows.sort(key=lambda r: key(r[1]))
            return [_example(step, ep, t) for ep, t in rows[: th.examples]]

        def of_role(role: str, truncated: bool = False) -> Callable[[TurnView], bool]:
            return lambda t: t.role == role and (not truncated or t.finish_reason == "length")

        out: list[Alert] = []
        for k in sorted(metrics):
            rk = parse_role_key(k)
            x = _finite(metrics[k])
            if rk is None or rk.stat not in _SERIES_STATS or x is None:
                continue
            role, stat = rk.role, rk.stat
            tr = self._track(k, x)
            if not tr.ready:
                continue
            base, cur = tr.baseline, tr.current
            if stat == "length" and base > 0 and cur <= th.length_collapse_ratio * base:
                out.append(
                    Alert(
                        "length_collapse",
                        SIGNATURE,
                        step,
                        role,
                        cur / base,
                        th.length_collapse_ratio,
                        f"{role} mean length {cur:.1f} tokens vs {base:.1f} at the start",
                        examples(of_role(role), lambda t: len(t.text)),
                    )
                )
            elif stat == "length" and base > 0 and cur >= th.length_blowup_ratio * base:
                out.append(
                    Alert(
                        "length_blowup",
                        SIGNATURE,
                        step,
                        role,
                        cur / base,
                        th.length_blowup_ratio,
                        f"{role} mean length {cur:.1f} tokens vs {base:.1f} at the start",
                        examples(of_role(role), lambda t: -len(t.text)),
                    )
                )
            elif stat == "entropy" and base > 0 and cur <= th.entropy_collapse_ratio * base:
                out.append(
                    Alert(
                        "entropy_collapse",
                        SIGNATURE,
                        step,
                        role,
                        cur / base,
                        th.entropy_collapse_ratio,
                        f"{role} token entropy {cur:.3f} vs {base:.3f} at the start",
                        examples(of_role(role)),
                    )
                )
            elif stat == "truncated" and cur >= th.truncation_surge_min and cur - base >= th.truncation_surge_delta:
                out.append(
                    Alert(
                        "truncation_surge",
                        SIGNATURE,
                        step,
                        role,
                        cur,
                        th.truncation_surge_min,
                        f"{role} truncated share {cur:.2f} vs {base:.2f} at the start",
                        examples(of_role(role, truncated=True)),
                    )
                )
        acc, prec = _finite(metrics.get(_ACCEPT_RATE)), _finite(metrics.get(_PRECISION))
        if acc is not None and prec is not None:
            ta, tp = self._track(_ACCEPT_RATE, acc), self._track(_PRECISION, prec)
            if (
                ta.ready
                and tp.ready
                and ta.current >= th.rubber_stamp_accept
                and tp.current <= tp.baseline - th.rubber_stamp_precision_drop
            ):
                out.append(
                    Alert(
                        "rubber_stamping",
                        SIGNATURE,
                        step,
                        "evaluator",
                        ta.current,
                        th.rubber_stamp_accept,
                        f"evaluator accepts {ta.current:.2f} of solutions; precision {tp.current:.2f} vs "
                        f"{tp.baseline:.2f} at the start",
                        examples(
                            lambda t: bool(
                                t.claim
                                and t.claim.get("kind") == "verdict"
                                and t.claim.get("accept")
                                and t.claim.get("reviewed_correct") is False
                            )
                        ),
                    )
                )
        return out

    def state_dict(self) -> dict[str, Any]:
        return {k: tr.state() for k, tr in self.tracked.items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.tracked = {k: _Tracked(self.th.baseline_steps, self.th.window, s) for k, s in state.items()}
