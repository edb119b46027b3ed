"""Parsers for role outputs, by parser set (the workflow option `parsers`): rolecast's own (in core/text.py, which
the diagnostics read too) and the reference study's, where the first match decides (`first_match`). Each has a
documented fallback so a malformed output still yields a decision."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from rolecast.core.text import last_boxed, parse_choice, parse_strategies, parse_verdict

__all__ = [
    "PARSER_SETS",
    "ParserSet",
    "ParserSetName",
    "parser_set",
    "last_boxed",
    "parse_choice",
    "parse_strategies",
    "parse_verdict",
    "study_parse_choice",
    "study_parse_strategies",
    "study_parse_verdict",
]

# ----------------------------------------------------------------------------------------------------------
# The reference study's parsers (XHMY/marl-llm-workflows, examples/math_reasoning/*_workflow.py), rule for rule;
# selected with the workflow option `parsers: first_match`. Side by side with rolecast's in docs/study_recipe.md.

_STUDY_CHOICE_BOX = re.compile(r"\\boxed\{(\d+)\}", re.I)
_STUDY_CHOICE_DIGIT = re.compile(r"\b([1-9])\b")
_STUDY_VERDICT = re.compile(r"\\boxed\{(Correct|Incorrect)\}", re.I)
_STUDY_STRATEGY = re.compile(r"STRATEGY\s*(\d+)\s*:\s*(.+?)(?=STRATEGY\s*\d+\s*:|$)", re.I | re.S)
# the study's `^\s*` here spans blank lines, so over a run of them it backtracked quadratically (8,192 newlines:
# 0.4 s); within one line, the same strategies (the blank lines it skipped end up in a body, which is stripped)
_STUDY_NUMBERED = re.compile(r"^[^\S\n]*(\d+)[.)]\s*(.+?)(?=^[^\S\n]*\d+[.)]|\Z)", re.M | re.S)
_MAX_DIGITS = 9  # a longer number is out of range for any pick (and int() refuses 4,301 digits)


def study_parse_choice(text: str | None, n: int) -> int:
    """The study's aggregator rule: the FIRST \\boxed{<digits>}; if absent or out of range, the FIRST
    standalone digit 1-9 (a word-bounded single digit; the 2 of "24" does not count); if that one is out of
    range (only the first is tried), or there is none, candidate 1."""
    text = text or ""
    m = _STUDY_CHOICE_BOX.search(text)
    if m and len(m.group(1)) <= _MAX_DIGITS and 0 <= int(m.group(1)) - 1 < n:
        return int(m.group(1)) - 1
    d = _STUDY_CHOICE_DIGIT.search(text)
    if d and 0 <= int(d.group(1)) - 1 < n:
        return int(d.group(1)) - 1
    return 0


def study_parse_verdict(text: str | None) -> str:
    """The study's evaluator rule: the FIRST \\boxed{Correct} / \\boxed{Incorrect} (any case) decides;
    without one the verdict is "unknown", its own outcome (not accepted, and under role-local rewards never
    right), where rolecast's parse_verdict counts it as Incorrect."""
    m = _STUDY_VERDICT.search(text or "")
    return m.group(1).lower() if m else "unknown"


def study_parse_strategies(text: str | None, k: int) -> list[str]:
    """The study's orchestrator rule, in order: `STRATEGY i:` blocks; else a numbered list (`1.` or `1)` at a
    line start); else the non-blank lines longer than 10 characters; each sorted by number where numbered,
    duplicates kept, at most k. If all give nothing, the whole reply is the one strategy."""
    text = text or ""
    found = _STUDY_STRATEGY.findall(text) or _STUDY_NUMBERED.findall(text)
    if found:
        strategies = [body.strip() for _, body in sorted(found, key=lambda x: _number(x[0]))]
    else:
        strategies = [ln.strip() for ln in text.split("\n") if len(ln.strip()) > 10][:k]
    if not strategies:
        strategies = [text.strip()]
    return strategies[:k]


def _number(digits: str) -> int | float:
    """The value of a run of digits, for sorting; one too long for int() sorts last."""
    return int(digits) if len(digits) <= 4000 else float("inf")


# ----------------------------------------------------------------------------------------------------------
# The sets a workflow chooses from


@dataclass(frozen=True)
class ParserSet:
    """The rules a workflow reads its roles' outputs with: an aggregator's pick among n candidates (0-based), an
    evaluator's verdict as (accepted, the parsed verdict where the rules tell more than accept/reject, else None),
    an orchestrator's strategies (at most k)."""

    choice: Callable[[str | None, int], int]
    verdict: Callable[[str | None], tuple[bool, str | None]]
    strategies: Callable[[str | None, int], list[str]]


def _accepts(text: str | None) -> tuple[bool, str | None]:
    return parse_verdict(text), None  # unparseable counts as Incorrect


def _first_verdict(text: str | None) -> tuple[bool, str | None]:
    said = study_parse_verdict(text)  # "correct" | "incorrect" | "unknown" (its own outcome)
    return said == "correct", said


ParserSetName = Literal["rolecast", "first_match"]
_SETS: dict[str, ParserSet] = {
    "rolecast": ParserSet(parse_choice, _accepts, parse_strategies),
    "first_match": ParserSet(study_parse_choice, _first_verdict, study_parse_strategies),
}
PARSER_SETS = tuple(_SETS)


def parser_set(name: str) -> ParserSet:
    """The parser set the workflow option `parsers` names; ValueError naming the choices otherwise."""
    if name not in _SETS:
        raise ValueError(f"workflow option parsers must be one of {PARSER_SETS}, got {name!r}")
    return _SETS[name]
