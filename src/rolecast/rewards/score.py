"""What a verifier returns: the reward and what it read from the completion."""

from __future__ import annotations

from dataclasses import dataclass

# the longest completion a verifier reads (128 Ki characters, ~25 a token at the recipes' 5,120-token cap): a
# longer one scores 0 with reason "too_long", unread, so the trainer's work per completion stays bounded
MAX_TEXT_CHARS = 1 << 17


@dataclass(frozen=True)
class Score:
    reward: float  # in [0, 1]; 1 = correct
    answer: str | None = None  # what was extracted from the text, for logs and agreement metrics
    reason: str | None = None  # why it scored 0 when that is not plain wrongness (no answer, timeout, ...)
