"""What a verifier returns: the reward and what it read from the completion."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Score:
    reward: float  # in [0, 1]; 1 = correct
    answer: str | None = None  # what was extracted from the text, for logs and agreement metrics
    reason: str | None = None  # why it scored 0 when that is not plain wrongness (no answer, timeout, ...)
