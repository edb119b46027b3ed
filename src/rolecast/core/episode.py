"""The data model every other module speaks: Turn -> Episode -> group.

Plain dataclasses, no torch. Advantages, losses and metrics work from these objects only and never
know which workflow produced them: roles are just names, and workflow-specific facts travel as
`Episode.metrics` (numbers to average) and `Turn.claim` (what a turn asserted, for role-local credit).

Claims are three small classes. The workflow fills what the turn asserted; scoring (scoring.py)
fills `correct` and the per-kind truth fields. In episodes/step_N.jsonl each is a JSON object with a `kind`
tag ("answer" | "verdict" | "pick"), read back by `Episode.from_dict`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

FinishReason = Literal["stop", "length"]


@dataclass
class AnswerClaim:
    """The turn states a solution: `text` is scored like a final answer."""

    text: str
    correct: bool | None = None  # set by scoring
    kind: Literal["answer"] = field(default="answer", init=False)


@dataclass
class VerdictClaim:
    """The turn judged the solution `reviewed`: `accept` is its verdict."""

    accept: bool
    reviewed: str
    # the parsed verdict where a parser tells more than accept/reject: the first_match parsers (the study's) give
    # "correct", "incorrect" or "unknown" (unparseable, an outcome of its own); None under rolecast's parsers
    verdict: str | None = None
    correct: bool | None = None  # set by scoring: the verdict matches the truth of `reviewed`
    reviewed_correct: bool | None = None  # set by scoring: `reviewed` is correct
    kind: Literal["verdict"] = field(default="verdict", init=False)


@dataclass
class PickClaim:
    """The turn picked `candidates[picked]` (0-based) among candidate solutions."""

    picked: int
    candidates: list[str]
    correct: bool | None = None  # set by scoring: the pick is correct (None when no candidate was)
    candidates_correct: list[bool] | None = None  # set by scoring, one flag per candidate
    kind: Literal["pick"] = field(default="pick", init=False)


Claim = AnswerClaim | VerdictClaim | PickClaim
CLAIM_KINDS: dict[str, type[AnswerClaim] | type[VerdictClaim] | type[PickClaim]] = {
    "answer": AnswerClaim,
    "verdict": VerdictClaim,
    "pick": PickClaim,
}


def claim_from_dict(d: dict[str, Any]) -> Claim:
    """The claim a serialised `{"kind": ..., ...}` object describes."""
    d = dict(d)
    kind = d.pop("kind", None)
    if kind not in CLAIM_KINDS:
        raise ValueError(f"unknown claim kind {kind!r}; known: {sorted(CLAIM_KINDS)}")
    cls = CLAIM_KINDS[kind]
    return cls(**{f.name: d[f.name] for f in fields(cls) if f.init and f.name in d})


@dataclass
class Turn:
    """One role call: what was asked, what was sampled, and how it was sampled."""

    role: str  # role name, e.g. "generator"
    instance: str  # agent-instance id, e.g. "generator/1"; equals role for singleton roles
    policy_id: str  # which trainable parameters produced it
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]  # sampling log-probs, one per completion token
    text: str  # decoded completion
    finish_reason: FinishReason
    index: int = 0  # position of the turn in its episode
    claim: Claim | None = None  # what the turn asserted, set by the workflow, for role attribution
    # Filled by the trainer:
    reward: float = 0.0
    advantage: float = 0.0

    def __post_init__(self) -> None:
        if len(self.logprobs) != len(self.completion_ids):
            raise ValueError(
                f"Turn({self.instance}): {len(self.completion_ids)} completion tokens but {len(self.logprobs)} log-probs"
            )


@dataclass
class Episode:
    """One workflow run on one problem."""

    problem_id: str
    sample: int  # which of the G samples of this problem
    turns: list[Turn] = field(default_factory=list)
    final_text: str | None = None  # what the workflow returned
    final_answer: str | None = None  # the answer the task extracted from final_text
    reward: float = 0.0  # the task's score of final_text
    metrics: dict[str, float] = field(default_factory=dict)  # workflow-specific numbers, averaged per step
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Episode:
        d = dict(d)
        turns = []
        for t in d.get("turns", []):
            t = dict(t)
            t.pop("num_tokens", None)
            if t.get("claim") is not None:
                t["claim"] = claim_from_dict(t["claim"])
            turns.append(Turn(**t))
        d["turns"] = turns
        meta = dict(d.get("metadata") or {})
        if "final_text" not in d and "final_text" in meta:  # written before final_text was a field
            d["final_text"] = meta.pop("final_text")
            d["metadata"] = meta
        return cls(**d)


GroupKey = tuple
KEYERS: dict[str, Callable[[Episode, Turn], GroupKey]] = {
    "role": lambda ep, t: (ep.problem_id, t.role),
    "instance": lambda ep, t: (ep.problem_id, t.role, t.instance),
    "turn": lambda ep, t: (ep.problem_id, t.role, t.index),
}


def group_turns(episodes: Iterable[Episode], by: str = "role") -> dict[GroupKey, list[Turn]]:
    """Regroup turns for GRPO: by (problem, role) by default, or per instance, or per turn index."""
    if by not in KEYERS:
        raise ValueError(f"group_by must be one of {sorted(KEYERS)}, got {by!r}")
    keyer = KEYERS[by]
    groups: dict[GroupKey, list[Turn]] = defaultdict(list)
    for ep in episodes:
        for t in ep.turns:
            groups[keyer(ep, t)].append(t)
    return dict(groups)


def turns_by_policy(episodes: Iterable[Episode], policy_ids: Iterable[str] = ()) -> dict[str, list[Turn]]:
    """Every turn under the policy that produced it, in episode order; each of `policy_ids` is a key even
    when it has no turn (so every policy's scheduler still steps)."""
    out: dict[str, list[Turn]] = {pid: [] for pid in policy_ids}
    for ep in episodes:
        for t in ep.turns:
            out.setdefault(t.policy_id, []).append(t)
    return out


def distinct_rows(keys: Iterable[Hashable]) -> tuple[list[int], list[int]]:
    """(the first row of each distinct key, each row's index into that list), e.g.
    [a, b, a, c] -> ([0, 1, 3], [0, 1, 0, 2]). Generation and the update use it to run a prompt that several
    rows share (a group's samples, parallel agents of a role) through the model once."""
    index: dict[Hashable, int] = {}
    first: list[int] = []
    of_row = []
    for i, k in enumerate(keys):
        if k not in index:
            index[k] = len(first)
            first.append(i)
        of_row.append(index[k])
    return first, of_row
