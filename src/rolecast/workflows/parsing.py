"""Parsers for role outputs. Each has a documented fallback so a malformed output still yields a decision."""

from __future__ import annotations

import re

from ..rewards.math import last_boxed

__all__ = ["last_boxed", "parse_choice", "parse_strategies", "parse_verdict"]

_STRATEGY = re.compile(r"STRATEGY\s*(\d+)\s*:\s*(.*?)(?=STRATEGY\s*\d+\s*:|\Z)", re.S | re.I)
_DIGIT = re.compile(r"\d")


def parse_choice(text: str | None, n: int) -> int:
    """0-based candidate index picked by an aggregator: \\boxed{i}, then the first digit 1..n, then candidate 1."""
    boxed = last_boxed(text)
    if boxed is not None:
        m = re.search(r"\d+", boxed)
        if m and 1 <= int(m.group()) <= n:
            return int(m.group()) - 1
    for m in _DIGIT.finditer(text or ""):
        if 1 <= int(m.group()) <= n:
            return int(m.group()) - 1
    return 0


def parse_verdict(text: str | None) -> bool:
    """True only for an explicit \\boxed{Correct}; anything unparseable counts as Incorrect."""
    boxed = last_boxed(text)
    return boxed is not None and boxed.strip().strip(".").lower() == "correct"


def parse_strategies(text: str | None, k: int) -> list[str]:
    """Up to k distinct, non-empty 'STRATEGY i: ...' lines, in order."""
    out: list[str] = []
    for _, body in _STRATEGY.findall(text or ""):
        body = " ".join(body.split())
        if body and body not in out:
            out.append(body)
        if len(out) == k:
            break
    return out
