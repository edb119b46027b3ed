"""The host-side parsers made linear (issue 33) read what the regexes they replace read, and the rules for comparing
numbers (docs/sandbox.md, "Comparing numbers") hold case by case.

The former implementations are kept here as the specification (they are right, only quadratic on hostile input):
hypothesis compares old and new on short texts made of the characters that matter to each."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rolecast.core.text import last_boxed
from rolecast.rewards import compare
from rolecast.rewards.code import _fenced_blocks, extract_program
from rolecast.rewards.math import _GSM_RE, _gsm_answer
from rolecast.sandbox import parse_quietly

SETTINGS = dict(max_examples=400, deadline=None, derandomize=True, database=None)

# ------------------------------------------------------------------------------------------ the former parsers

_OLD_OPEN_FENCE = re.compile(r"(`{3,})[ \t]*([^\n`]*)\n")
_OLD_BOX = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")


def old_fenced_blocks(text: str) -> list[tuple[str, str, bool]]:
    out: list[tuple[str, str, bool]] = []
    pos = 0
    while True:
        m = _OLD_OPEN_FENCE.search(text, pos)
        if not m:
            return out
        close = re.compile("`{" + str(len(m.group(1))) + ",}").search(text, m.end())
        body = text[m.end() : close.start() if close else len(text)]
        if body and not body.endswith("\n"):
            body += "\n"
        out.append((m.group(2).strip().lower(), body, close is not None))
        if not close:
            return out
        pos = close.end()


def old_bare_code(lines: list[str]) -> str:
    for end in range(len(lines), 0, -1):
        cand = "\n".join(lines[:end])
        try:
            if cand.strip():
                parse_quietly(cand)
                return cand.rstrip() + "\n"
        except (SyntaxError, ValueError):
            pass
    return "\n".join(lines) + "\n"


def old_match_braces(text: str, start: int) -> int | None:
    depth, i = 0, start
    while i < len(text):
        c = text[i]
        if c == "\\":
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


def old_last_boxed(text: str) -> str | None:
    for m in reversed(list(_OLD_BOX.finditer(text))):
        j = m.end()
        while j < len(text) and text[j] == " ":
            j += 1
        if j < len(text) and text[j] == "{":
            end = old_match_braces(text, j)
            if end is None:
                continue
            return text[j + 1 : end - 1].strip()
        if j > m.end():
            tok = re.match(r"[^\s$]+", text[j:])
            if tok:
                return tok.group(0).rstrip(".,;")
    return None


def texts_of(*pieces: str, max_pieces: int = 14) -> st.SearchStrategy[str]:
    return st.lists(st.sampled_from(pieces), max_size=max_pieces).map("".join)


# ------------------------------------------------------------------------------------------ old == new


@settings(**SETTINGS)
@given(texts_of("`", "``", "```", "````", "\n", " ", "\t", "python", "py", "x", "return 1", "\r", "c++"))
def test_fence_scanner_reads_what_the_regex_read(text):
    assert _fenced_blocks(text) == old_fenced_blocks(text)


CODE_LINES = [
    "def f(x):",
    "    return x",
    "    y = (1,",
    "2)",
    "import os",
    "class A:",
    "    pass",
    "@dec",
    "x = [",
    "]",
]
PROSE_LINES = ["This returns x.", "Note (see above", "", "   ", "'''", "Example: f(1) == 1", "else:", "print(1)"]


@settings(**SETTINGS)
@given(
    st.lists(st.sampled_from(CODE_LINES), min_size=1, max_size=6), st.lists(st.sampled_from(PROSE_LINES), max_size=4)
)
def test_bare_code_takes_the_longest_prefix_that_parses_as_before(code, prose):
    """Code then prose (the case the fallback is for): the same program as trying every prefix, longest first."""
    text = "\n".join(["def g():", "    return 1", *code, *prose])
    assert extract_program(text) == old_bare_code(text.splitlines())


@settings(**SETTINGS)
@given(texts_of("\\boxed", "\\fbox", "{", "}", "\\{", "\\}", "\\", " ", "$", "5", "x", ".", "\\boxedx", max_pieces=16))
def test_last_boxed_reads_what_the_brace_walk_read(text):
    assert last_boxed(text) == old_last_boxed(text)


@settings(**SETTINGS)
@given(texts_of("####", "#", " ", "\n", "\n\n", "\t", "\r", "5", "ab", "#### ", " \n"))
def test_gsm_answer_is_the_regexs_last(text):
    found = _GSM_RE.findall(text)
    assert _gsm_answer(text) == (found[-1] if found else None)


# ------------------------------------------------------------------------------------------ numbers


@pytest.mark.parametrize(
    "got, expected, ok",
    [
        ("2001000", "2001000", True),
        ("2001000.0", "2001000", True),  # an integer's value, written otherwise
        ("2.001e6", "2001000", True),
        ("+2001000", "2001000", True),
        ("2001001", "2001000", False),  # integers exactly: no tolerance
        ("2000999.9999", "2001000", False),
        ("500000000000000000", "500000000500000000", False),
        ("9" * 5000, "9" * 5000 + ".0", True),  # past int()'s 4,300 digits, and past a float's range
        ("9" * 4999 + "8", "9" * 5000, False),
        ("0.3333333", "0.333333333", True),  # not an integer: within 1e-6
        ("0.33", "0.333333", False),
        ("1e-7", "0.0000005", True),  # absolute tolerance near 0
        ("1.5e400", "1.5e400", True),
        ("1.5000001e400", "1.5e400", False),  # an integer value (1.5e400 is one): exactly
        ("nan", "nan", True),  # NaN and the infinities: only spelled the same
        ("NaN", "nan", False),
        ("Nan", "nan", False),
        ("inf", "inf", True),
        ("Infinity", "inf", False),
        ("1e999", "inf", False),
        ("sNaN", "1", False),
        ("1", "sNaN", False),
        ("sNaN", "sNaN", True),
        ("1e999999999999999999999", "1", False),  # past Decimal's exponents: not a number
        ("abc", "abc", True),
        ("abc", "ABC", False),
    ],
)
def test_token_rules(got, expected, ok):
    assert compare.token_matches(got, expected) is ok


@pytest.mark.parametrize(
    "got, expected, ok",
    [
        (2001001, 2001000, False),
        (2001000.0, 2001000, True),
        (True, 1, False),  # a bool is not a number
        (10**400, 1e300, False),  # no OverflowError
        (1.0000001, 1.0, False),  # an integral float: exactly
        (1.5000001, 1.5, True),
        (10**400, 1.5, False),
        (math.nan, math.nan, True),
        (1.0, math.nan, False),
        (math.inf, math.inf, True),
        (-math.inf, math.inf, False),
        (math.inf, 1e308, False),
        ("1", 1, False),
    ],
)
def test_json_number_rules(got, expected, ok):
    assert compare.json_numbers_match(got, expected) is ok


@pytest.mark.parametrize(
    "got, expected, ok",
    [
        ('[1, [2, {"a": 3.0000001}]]', '[1, [2, {"a": 3.0}]]', False),
        ('[1, [2, {"a": 3.5000001}]]', '[1, [2, {"a": 3.5}]]', True),
        ("[" * 5000 + "]" * 5000, "[[]]", False),  # deeper than the decoder goes
        ("[" * 500 + "]" * 500, "[" * 500 + "]" * 500, True),  # deep, equal: the walk is iterative
        ("NaN", "NaN", True),
        ("9" * 5000, "1", False),  # int() refuses it: not JSON here
        ('{"a": 1, "b": 2}', '{"b": 2, "a": 1}', True),
        ('{"a": 1}', '{"a": 1, "b": 2}', False),
        ("null", "null", True),
        ('"x"', "null", False),
    ],
)
def test_json_value_rules(got, expected, ok):
    assert compare.json_values_match(got, expected) is ok


@pytest.mark.parametrize(
    "got, expected, ok",
    [
        (b"1.50\n", "1.5", True),  # equal as decimals
        (b"0.3333333\n", "0.333333333", False),  # no tolerance in the study
        (b"sNaN\n", "1", False),  # the study's comparison raises: a failed test
        (b"1 sNaN\n", "1 2", False),
        (b"sNaN\n", "sNaN", True),  # equal lines
        (b"NaN\n", "nan", False),  # a NaN equals nothing
        (b"2001001\n", "2001000", False),
        (b"1e999999999999999999999\n", "1", False),
    ],
)
def test_study_stdout_rules(got, expected, ok):
    assert compare.stdout_matches(got, expected, compare.STUDY) is ok
