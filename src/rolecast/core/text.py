"""Reading what a role wrote: the last `\\boxed{...}` and the rolecast parsers of aggregator picks, verdicts and
orchestrator strategies. Shared by the verifiers (rewards/), the prompt filters, the workflows and the
diagnostics, so it lives below all of them. Each parser has a documented fallback, so a malformed output still
yields a decision. The reference study's own parsers, selected per workflow, are in workflows/parsing.py.
"""

from __future__ import annotations

import re

__all__ = ["last_boxed", "match_braces", "parse_choice", "parse_strategies", "parse_verdict"]

_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_STRATEGY = re.compile(r"STRATEGY\s*(\d+)\s*:\s*(.*?)(?=STRATEGY\s*\d+\s*:|\Z)", re.S | re.I)
_DIGIT = re.compile(r"\d")


def match_braces(text: str, start: int) -> int | None:
    """Index just past the brace that closes the one at text[start], or None if unbalanced."""
    depth = 0
    i = start
    while i < len(text):
        c = text[i]
        if c == "\\":  # an escaped brace (\{ \}) does not nest
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


def last_boxed(text: str | None) -> str | None:
    """Content of the last \\boxed{...} / \\fbox{...} (or ``\\boxed 5``), or None."""
    if not text:
        return None
    for m in reversed(list(_BOX_RE.finditer(text))):
        rest = m.end()
        j = rest
        while j < len(text) and text[j] == " ":
            j += 1
        if j < len(text) and text[j] == "{":
            end = match_braces(text, j)
            if end is None:
                continue  # truncated generation: an unclosed box is not an answer; try an earlier one
            return text[j + 1 : end - 1].strip()
        if j > rest:  # "\boxed 5": the next whitespace/dollar-delimited token
            tok = re.match(r"[^\s$]+", text[j:])
            if tok:
                return tok.group(0).rstrip(".,;")
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
