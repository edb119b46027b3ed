"""What a verifier returns: the reward and what it read from the completion; and what it returns instead of raising
when scoring one completion fails unexpectedly (a grader error, see rolecast.scoring for the rule)."""

from __future__ import annotations

import traceback
from dataclasses import dataclass

# the longest completion a verifier reads (128 Ki characters, ~25 a token at the recipes' 5,120-token cap): a
# longer one scores 0 with reason "too_long", unread, so the trainer's work per completion stays bounded
MAX_TEXT_CHARS = 1 << 17

GRADER_ERROR = "grader_error"  # Score.reason of a completion whose scoring raised


@dataclass(frozen=True)
class GraderFault:
    """The unexpected exception that scoring one completion raised: its type, message and innermost frame."""

    exception: str  # the exception's type name, e.g. "RecursionError"
    message: str  # its message, cut to 200 characters
    where: str  # file:line in function, of the innermost frame

    def __str__(self) -> str:
        return f"{self.exception}: {self.message} (at {self.where})"

    @classmethod
    def of(cls, exc: BaseException) -> GraderFault:
        frames = traceback.extract_tb(exc.__traceback__)
        where = f"{frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name}" if frames else "?"
        return cls(type(exc).__name__, str(exc)[:200], where)


@dataclass(frozen=True)
class Score:
    reward: float  # in [0, 1]; 1 = correct
    answer: str | None = None  # what was extracted from the text, for logs and agreement metrics
    reason: str | None = None  # why it scored 0 when that is not plain wrongness (no answer, timeout, ...)
    fault: GraderFault | None = None  # reason "grader_error": the exception scoring raised


def grader_error(exc: BaseException, answer: str | None = None) -> Score:
    """The score of a completion whose scoring raised `exc`: 0, reason "grader_error", the exception kept."""
    return Score(0.0, answer, GRADER_ERROR, GraderFault.of(exc))
