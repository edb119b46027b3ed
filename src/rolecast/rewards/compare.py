"""Comparing what a program produced with what was expected: printed output line by line, a function's JSON return
value, and the numbers in both. One :func:`stdout_matches` serves both code graders, each with its own rules:
:data:`ROLECAST` (rewards/code.py) and :data:`STUDY` (the reference study's ``grade_stdio``, rewards/code_study.py).

Everything here reads text a program wrote, so nothing here raises on it (a ``sNaN``, a 5,000-deep JSON list, an
integer of 10,000 digits are all just "no match") and the cost is linear in its length.

rolecast's rules for numbers (docs/sandbox.md, "Comparing numbers"), applied where two tokens (or two JSON numbers)
differ as text:

- an expected value that is an integer (``2001000``, ``2001000.0``, ``2.001e6``) is matched only by exactly that
  value: ``2001000.0`` matches ``2001000``, ``2001001`` does not. No tolerance, at any size: a relative tolerance
  paid ``500000000000000000`` for ``500000000500000000``;
- any other finite expected value is matched within 1e-6, absolute or relative;
- NaN (``nan``, ``NaN``, ``sNaN``, ...) and the infinities match only themselves: in printed output only when
  spelled the same (so a name such as ``Nan`` never matches ``nan``), in JSON a NaN matches a NaN and an infinity
  the same infinity. Neither ever matches a finite number.

The study's rules stay the study's: a line matches when equal after stripping, or when both are lists of
``Decimal`` numbers that are equal (no tolerance, ``5`` equals ``5.0``); a NaN never equals anything, and a
comparison that raises in the study (a signalling NaN) is a failed test here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

REL_TOL = 1e-6
ABS_TOL = 1e-6

# ----------------------------------------------------------------------------------------------------------
# numbers


def parse_decimal(tok: str) -> Decimal | None:
    """The number a token spells (Decimal's syntax: ``-1.5e3``, ``1_000``, ``inf``, ``nan``, ``sNaN``), or None.
    Exact at any length; an exponent beyond Decimal's range is not a number."""
    try:
        return Decimal(tok)
    except (InvalidOperation, ValueError, TypeError):
        return None


def _is_integer(d: Decimal) -> bool:
    return d == d.to_integral_value()


def close(got: float, expected: float) -> bool:
    """Within the tolerance (1e-6 absolute or relative); both finite."""
    return math.isclose(got, expected, rel_tol=REL_TOL, abs_tol=ABS_TOL)


def token_matches(got: str, expected: str) -> bool:
    """rolecast's rule for one printed token (see the module docstring): equal text, or numbers equal by value."""
    if got == expected:
        return True
    e, g = parse_decimal(expected), parse_decimal(got)
    if e is None or g is None or not e.is_finite() or not g.is_finite():
        return False  # not numbers, or NaN / an infinity spelled differently
    if _is_integer(e):
        return g == e  # exact, at any size
    fg, fe = float(g), float(e)
    if math.isfinite(fg) and math.isfinite(fe):
        return close(fg, fe)
    return g == e  # beyond a float's range: only the exact value


def json_numbers_match(got: object, expected: int | float) -> bool:
    """rolecast's rule for a JSON number the program returned (`got`, any decoded JSON value) against the expected
    one: booleans are not numbers; an integral expected value only by its exact value; NaN only by NaN."""
    if isinstance(got, bool) or not isinstance(got, (int, float)):
        return False
    if isinstance(expected, float):
        if math.isnan(expected):
            return isinstance(got, float) and math.isnan(got)
        if not math.isinf(expected) and not expected.is_integer():
            if isinstance(got, int):
                return got.bit_length() <= 1000 and close(float(got), expected)
            return math.isfinite(got) and close(got, expected)
    return got == expected  # Python compares int and float exactly, at any size


# ----------------------------------------------------------------------------------------------------------
# JSON values (functional tests)


def json_values_match(got: str | None, expected: str) -> bool:
    """rolecast's comparison of a function's JSON return value with the expected JSON: equal structure (tuples
    arrive as lists), strings and None by equality, numbers by :func:`json_numbers_match`. A value too deep for
    the JSON decoder, or not JSON, never matches; the walk is iterative, so depth costs no recursion."""
    a, b = _loads(got), _loads(expected)
    if a is _INVALID or b is _INVALID:
        return False
    todo: list[tuple[Any, Any]] = [(a, b)]
    while todo:
        x, y = todo.pop()
        if isinstance(y, bool) or y is None or isinstance(y, str):
            if type(x) is not type(y) or x != y:
                return False
        elif isinstance(y, (int, float)):
            if not json_numbers_match(x, y):
                return False
        elif isinstance(y, list):
            if not isinstance(x, list) or len(x) != len(y):
                return False
            todo.extend(zip(x, y, strict=True))
        elif isinstance(y, dict):
            if not isinstance(x, dict) or x.keys() != y.keys():
                return False
            todo.extend((x[k], y[k]) for k in y)
        else:
            return False
    return True


_INVALID = object()


def _loads(text: str | None) -> Any:
    """The JSON value of `text`, or _INVALID (empty, not JSON, deeper than the decoder's recursion limit, an
    integer of more than 4,300 digits)."""
    if not text:
        return _INVALID
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return _INVALID


def study_json_values_match(got: str | None, expected: str) -> bool:
    """The study's comparison of a function's result (``grade_call_based``): ``==`` on the JSON values (so ``True``
    equals ``1`` and floats must be equal)."""
    a, b = _loads(got), _loads(expected)
    if a is _INVALID or b is _INVALID:
        return False
    try:
        return bool(a == b)
    except RecursionError:
        return False


# ----------------------------------------------------------------------------------------------------------
# printed output


@dataclass(frozen=True)
class OutputRules:
    """One grader's way of comparing printed output with the expected output."""

    name: str
    decode_errors: str  # how the program's bytes become text: "strict" (invalid UTF-8 never matches), ...
    lines: Callable[[str], list[str]]  # a text's lines as compared
    line_matches: Callable[[str, str], bool]  # (got, expected) lines that differ as text may still match


def _rolecast_lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.strip().splitlines()]


def _rolecast_line_matches(got: str, expected: str) -> bool:
    tg, te = got.split(), expected.split()
    return len(tg) == len(te) and all(token_matches(g, e) for g, e in zip(tg, te, strict=True))


def _study_lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().split("\n")]


def _study_decimals(line: str) -> list[Decimal] | None:
    out = []
    for tok in line.split():
        d = parse_decimal(tok)
        if d is None:
            return None  # the study: a ValueError/TypeError is a wrong answer, InvalidOperation a failed test
        out.append(d)
    return out


def _study_line_matches(got: str, expected: str) -> bool:
    dg, de = _study_decimals(got), _study_decimals(expected)
    if dg is None or de is None:
        return False
    try:
        return dg == de
    except InvalidOperation:  # a signalling NaN: the study's comparison raises, a failed test
        return False


# rolecast: trailing whitespace per line and surrounding blank lines ignored, tokens by token_matches
ROLECAST = OutputRules("rolecast", "strict", _rolecast_lines, _rolecast_line_matches)
# the study's grade_stdio: each line stripped, then equal text or equal lists of Decimal numbers
STUDY = OutputRules("rllm", "surrogatepass", _study_lines, _study_line_matches)


def stdout_matches(got: bytes, expected: str, rules: OutputRules = ROLECAST) -> bool:
    """Does the printed output `got` match `expected` under a grader's `rules`? The same number of lines, each
    equal as text or matching by the rules' line rule."""
    try:
        text = got.decode("utf-8", rules.decode_errors)
    except UnicodeDecodeError:
        return False
    a, b = rules.lines(text), rules.lines(expected)
    if len(a) != len(b):
        return False
    return all(la == lb or rules.line_matches(la, lb) for la, lb in zip(a, b, strict=True))
