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
    """Index just past the brace that closes the one at text[start], or None if unbalanced. An escaped brace
    (``\\{``, ``\\}``) does not nest. Linear in what it scans; for many braces of one text, :func:`closing_braces`."""
    return closing_braces(text, start).get(start)


_BRACE_TOKEN = re.compile(r"\\.|[{}]", re.S)  # an escape pair (skipped whole) or a brace


def closing_braces(text: str, start: int = 0) -> dict[int, int]:
    """For every ``{`` of text[start:] that is closed: the index just past its closing ``}`` (escaped braces do not
    count). One pass over the text, whatever the nesting: what makes :func:`last_boxed` linear where trying each
    box in turn was quadratic (a text of 1,000 unclosed boxes)."""
    closes: dict[int, int] = {}
    opened: list[int] = []
    for m in _BRACE_TOKEN.finditer(text, start):
        c = m.group()
        if c == "{":
            opened.append(m.start())
        elif c == "}" and opened:
            closes[opened.pop()] = m.end()
    return closes


_TOKEN = re.compile(r"[^\s$]+")


def last_boxed(text: str | None) -> str | None:
    """Content of the last \\boxed{...} / \\fbox{...} (or ``\\boxed 5``), or None. Linear in the text's length."""
    if not text:
        return None
    closes: dict[int, int] | None = None
    for m in reversed(list(_BOX_RE.finditer(text))):
        rest = m.end()
        j = rest
        while j < len(text) and text[j] == " ":
            j += 1
        if j < len(text) and text[j] == "{":
            if closes is None:
                closes = closing_braces(text)
            end = closes.get(j)
            if end is None:
                continue  # truncated generation: an unclosed box is not an answer; try an earlier one
            return text[j + 1 : end - 1].strip()
        if j > rest:  # "\\boxed 5": the next whitespace/dollar-delimited token
            tok = _TOKEN.match(text, j)
            if tok:
                return tok.group(0).rstrip(".,;")
    return None


def parse_choice(text: str | None, n: int) -> int:
    """0-based candidate index picked by an aggregator: \\boxed{i}, then the first digit 1..n, then candidate 1."""
    boxed = last_boxed(text)
    if boxed is not None:
        m = re.search(r"\d+", boxed)
        # a run of digits longer than any candidate count is out of range (and int() refuses 4,301 digits)
        if m and len(m.group()) <= 9 and 1 <= int(m.group()) <= n:
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
