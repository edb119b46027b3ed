"""The data model every other module speaks: Turn -> Episode -> group.

Plain dataclasses, no torch. Advantages, losses and metrics work from these objects only and never
know which workflow produced them: roles are just names, and workflow-specific facts travel as
`Episode.metrics` (numbers to average) and `Turn.claim` (what a turn asserted, for role-local credit).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

FinishReason = Literal["stop", "length"]


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
    # What the turn asserted, for role attribution, e.g. {"kind": "answer", "answer": "5"},
    # {"kind": "verdict", "correct": True, "reviewed": "5"}, {"kind": "pick", "picked": "5", "candidates": [...]}.
    claim: dict[str, Any] | None = None
    # Filled by the trainer:
    reward: float = 0.0
    advantage: float = 0.0

    def __post_init__(self) -> None:
        if len(self.logprobs) != len(self.completion_ids):
            raise ValueError(
                f"Turn({self.instance}): {len(self.completion_ids)} completion tokens but {len(self.logprobs)} log-probs"
            )

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.completion_ids)


@dataclass
class Episode:
    """One workflow run on one problem."""

    problem_id: str
    sample: int  # which of the G samples of this problem
    turns: list[Turn] = field(default_factory=list)
    final_answer: str | None = None
    reward: float = 0.0  # the task's score of final_answer
    metrics: dict[str, float] = field(default_factory=dict)  # workflow-specific numbers, averaged per step
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Episode:
        d = dict(d)
        d["turns"] = [Turn(**t) for t in d.get("turns", [])]
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


def turns_by_policy(episodes: Iterable[Episode]) -> dict[str, list[Turn]]:
    out: dict[str, list[Turn]] = defaultdict(list)
    for ep in episodes:
        for t in ep.turns:
            out[t.policy_id].append(t)
    return dict(out)


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
