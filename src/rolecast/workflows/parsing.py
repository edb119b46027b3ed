"""Parsers for role outputs. Each has a documented fallback so a malformed output still yields a decision."""

from __future__ import annotations

import re

_STRATEGY = re.compile(r"STRATEGY\s*(\d+)\s*:\s*(.*?)(?=STRATEGY\s*\d+\s*:|\Z)", re.S | re.I)
_DIGIT = re.compile(r"\d")


def last_boxed(text: str | None) -> str | None:
    """Content of the last \\boxed{...} (nested braces allowed), or None."""
    if not text:
        return None
    start = text.rfind("\\boxed")
    while start != -1:
        i = text.find("{", start)
        if i != -1 and text[start + len("\\boxed"):i].strip() == "":
            depth = 0
            for j in range(i, len(text)):
                if text[j] == "{":
                    depth += 1
                elif text[j] == "}":
                    depth -= 1
                    if depth == 0:
                        return text[i + 1:j].strip()
        start = text.rfind("\\boxed", 0, start)
    return None


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
