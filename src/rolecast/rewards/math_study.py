"""The study's math grader, rLLM's, rule for rule (selected with the math task option ``grader: rllm``).

The reference study (XHMY/marl-llm-workflows, ``rllm/rewards/math_reward.py`` and
``rllm/rewards/math_utils/utils.py``) scores a completion like this; the rules are carried over, the code is
not:

1. Reasoning: when the completion contains ``</think>``, only the text after the first one is graded.
2. Extraction: only if the text contains ``\\boxed``. The answer is the last ``\\boxed`` (found from the
   right), read from there up to the brace that closes the first ``{`` after it; the result must start with
   ``\\boxed{`` exactly. So ``\\boxed 5`` (no brace), an unclosed ``\\boxed{5``, and ``\\fbox{5}`` (no
   ``\\boxed`` at all) give no answer, and there is no last-number fallback. (Its ``<|begin_of_box|>``
   marker rule is kept too.)
3. Gold: a gold string holding ``\\boxed`` is reduced to its box the same way.
4. Equal when either
   - the MATH ("mathd") normalisation makes both strings identical (strip ``\\text{}``, ``\\left``/
     ``\\right``, ``^\\circ``, ``\\$``, spaces, ``\\dfrac``->``\\frac``, ``a/b``->``\\frac{a}{b}``,
     ``0.5``->``\\frac{1}{2}``, a short ``x =`` prefix, ...), or
   - the sympy rule: after a second normalisation (units, ``\\%``, thousands commas, LaTeX to text, lower
     case) the strings are identical, or the answers split into the same number of tuple/interval elements
     and each pair is equal, where **an integer gold needs an integer answer string** (so ``3+4`` never
     equals ``7`` and ``17 \\times 3`` never equals ``51``: the boxed answer itself is compared, not its
     value), two plain fractions must be written identically (``2/4`` is not ``1/2``), and anything else is
     equal when sympy simplifies the difference to 0 (skipped for more than two unknown letters or big
     powers, which could hang sympy).

LaTeX to text goes through ``pylatexenc`` as in the study (``latex_to_text``), so mixed numbers
(``7 \\frac{3}{4}`` is 7 + 3/4), ``\\le`` and ``\\leq``, thin spaces in numbers (``1\\,000``) and ``\\mbox``
read as the study reads them; tests/fixtures/study_math_grading.jsonl pins such cases with the study's verdict
and rolecast's own grader's.
"""

from __future__ import annotations

import re

import sympy
from pylatexenc import latex2text
from sympy.parsing import sympy_parser

THINK_END = "</think>"
_END_BOX = "<|end_of_box|>"
_BOX_MARKERS = re.compile(r"<\|begin_of_box\|>([\s\S]*?)<\|end_of_box\|>")

# ----------------------------------------------------------------------------------------------------------
# extraction


def _last_boxed_only(text: str) -> str | None:
    idx = text.rfind("\\boxed")
    if idx < 0:
        idx = text.rfind("\\fbox")
        if idx < 0:
            return None
    depth = 0
    for i in range(idx, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[idx : i + 1]
    return None


def study_extract(text: str | None) -> str | None:
    """The answer the study's grader reads from a completion, or None."""
    if not text:
        return None
    if THINK_END in text:
        text = text.split(THINK_END)[1]
    if "<|begin_of_box|>" in text and "<|end_of_box|>" in text:
        # up to the last end marker only: a begin marker after it would scan to the end of the text and fail, once
        # per marker (quadratic); before it, each scan stops at the next end marker
        last_end = text.rfind(_END_BOX) + len(_END_BOX)
        found = _BOX_MARKERS.findall(text, 0, last_end)
        if found:
            return found[-1].strip()
    if "\\boxed" not in text:
        return None
    box = _last_boxed_only(text)
    if box is None or not box.startswith("\\boxed{") or not box.endswith("}"):
        return None
    return box[len("\\boxed{") : -1]


# ----------------------------------------------------------------------------------------------------------
# the MATH ("mathd") string normalisation


def _fix_fracs(s: str) -> str:
    parts = s.split("\\frac")
    out = parts[0]
    for sub in parts[1:]:
        out += "\\frac"
        if sub[:1] == "{":
            out += sub
            continue
        if len(sub) < 2:
            return s
        a, b = sub[0], sub[1]
        if b != "{":
            out += "{" + a + "}{" + b + "}" + sub[2:]
        else:
            out += "{" + a + "}" + b + sub[2:]
    return out


def _fix_a_slash_b(s: str) -> str:
    if len(s.split("/")) != 2:
        return s
    a, b = s.split("/")
    try:
        ai, bi = int(a), int(b)
    except ValueError:
        return s
    return f"\\frac{{{ai}}}{{{bi}}}" if s == f"{ai}/{bi}" else s


def _fix_sqrt(s: str) -> str:
    if "\\sqrt" not in s:
        return s
    parts = s.split("\\sqrt")
    out = parts[0]
    for sub in parts[1:]:
        out += ("\\sqrt{" + sub[0] + "}" + sub[1:]) if sub[:1] not in ("{", "") else "\\sqrt" + sub
    return out


def mathd_normalize(answer: str | None) -> str | None:
    if answer is None:
        return None
    s = answer.strip()
    m = re.search(r"^\\text\{(?P<text>.+?)\}", s)
    if m is not None:
        s = m.group("text").strip()
    s = s.replace("\n", "").replace("\\!", "").replace("\\\\", "\\")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac")
    s = s.replace("\\left", "").replace("\\right", "")
    s = s.replace("^{\\circ}", "").replace("^\\circ", "").replace("\\$", "")
    if "\\text{ " in s:  # units on the right
        parts = s.split("\\text{ ")
        if len(parts) == 2:
            s = parts[0]
    s = s.replace("\\%", "").replace(" .", " 0.").replace("{.", "{0.")
    if not s:
        return s
    if s[0] == ".":
        s = "0" + s
    if len(s.split("=")) == 2 and len(s.split("=")[0]) <= 2:
        s = s.split("=")[1]
    s = _fix_sqrt(s).replace(" ", "")
    s = _fix_fracs(s)
    if s == "0.5":
        s = "\\frac{1}{2}"
    return _fix_a_slash_b(s)


# ----------------------------------------------------------------------------------------------------------
# the sympy rule

_UNITS = [
    "degree",
    "cm",
    "centimeter",
    "meter",
    "mile",
    "second",
    "minute",
    "hour",
    "day",
    "week",
    "month",
    "year",
    "foot",
    "feet",
    "inch",
    "yard",
]
_BAD_SUBSTRINGS = ["^{", "^("]
_BAD_REGEXES = [r"\^[0-9]+\^", r"\^[0-9][0-9]+"]
_TUPLE_CHARS = "()[]"


# the Unicode that pylatexenc writes for LaTeX symbols, back to what sympy reads (the study's replacements)
_UNICODE = (("√", "sqrt"), ("π", "pi"), ("∞", "inf"), ("∪", "U"), ("·", "*"), ("×", "*"))


def latex_to_text(expr: str) -> str:
    """LaTeX to text as the study converts it (``_parse_latex``): ``\\tfrac``/``\\dfrac`` -> ``\\frac``, a space
    before each ``\\frac`` (so a mixed number ``7 \\frac{3}{4}`` stays two terms), pylatexenc's
    ``LatexNodes2Text`` with its default settings, then its Unicode symbols back to ``sqrt``, ``pi``, ``inf``,
    ``U`` and ``*``."""
    expr = expr.replace("\\tfrac", "\\frac").replace("\\dfrac", "\\frac").replace("\\frac", " \\frac")
    expr = latex2text.LatexNodes2Text().latex_to_text(expr)
    for symbol, text in _UNICODE:
        expr = expr.replace(symbol, text)
    return expr.strip()


def _is_float(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False


def _strip_commas(expr: str) -> str:
    p = re.compile(r"(\d)(,)(\d\d\d)($|\D)")
    while True:
        nxt = p.sub("\\1\\3\\4", expr)
        if nxt == expr:
            return nxt
        expr = nxt


def _str_is_int(x: str) -> bool:
    try:
        f = float(_strip_commas(x))
        return abs(f - int(round(f))) <= 1e-7
    except (ValueError, OverflowError):
        return False


def _normalize(expr: str | None) -> str | None:
    if expr is None:
        return None
    m = re.search(r"^\\text\{(?P<text>.+?)\}", expr)
    if m is not None:
        expr = m.group("text")
    expr = expr.replace("\\%", "%").replace("\\$", "$").replace("$", "").replace("%", "")
    expr = expr.replace(" or ", " , ").replace(" and ", " , ")
    expr = expr.replace("million", "*10^6").replace("billion", "*10^9").replace("trillion", "*10^12")
    for unit in _UNITS:
        expr = re.sub(rf"{unit}(es)?(s)? *(\^[0-9]+)?", "", expr)
    expr = re.sub(r"\^ *\\circ", "", expr)
    if expr and expr[0] == "{" and expr[-1] == "}":
        expr = expr[1:-1]
    expr = re.sub(",\\\\! *", "", expr)
    if _is_float(expr) and _str_is_int(expr):
        expr = str(int(round(float(expr))))
    if "\\" in expr:
        try:
            expr = latex_to_text(expr)
        except Exception:  # noqa: BLE001 - the study keeps the string as it was when pylatexenc fails
            pass
    expr = re.sub("- *", "-", expr)
    expr = re.sub("([0-9]) +([0-9])", "\\1+\\2", expr)  # a mixed number 7 3/4 -> 7+3/4
    expr = expr.replace(" ", "").replace("{", "").replace("}", "").lower()
    if _str_is_int(expr):
        expr = str(int(float(_strip_commas(expr).replace(",", ""))))
    return expr


def _allow_eval(expr: str) -> bool:
    letters = {c for c in expr.replace("sqrt", "").replace("frac", "") if c.isalpha()}
    if len(letters) > 2:
        return False
    return not any(b in expr for b in _BAD_SUBSTRINGS) and not any(re.search(r, expr) for r in _BAD_REGEXES)


def _equal_under_sympy(gold: str, given: str) -> bool:
    expr = f"({gold})-({given})"
    if not _allow_eval(expr):
        return False
    try:
        parsed = sympy_parser.parse_expr(
            expr.replace("^", "**"),
            transformations=sympy_parser.standard_transformations + (sympy_parser.implicit_multiplication_application,),
        )
        return sympy.simplify(parsed) == 0
    except Exception:  # noqa: BLE001 - any parse/simplify failure is "not equal", as in the study
        return False


def _split_tuple(expr: str) -> list[str]:
    expr = _strip_commas(expr)
    if not expr:
        return []
    if (
        len(expr) > 2
        and expr[0] in _TUPLE_CHARS
        and expr[-1] in _TUPLE_CHARS
        and all(ch not in expr[1:-1] for ch in _TUPLE_CHARS)
    ):
        return [e.strip() for e in expr[1:-1].split(",")]
    return [expr]


def _is_frac(expr: str) -> bool:
    return bool(re.search(r"^-?[0-9]+.?/0*[1-9][0-9]*.?$", expr))


def grade_sympy(given: str, gold: str) -> bool:
    g, a = _normalize(gold), _normalize(given)
    if g is None or a is None:
        return False
    if g == a:
        return True
    if not a:
        return False
    g_el, a_el = _split_tuple(g), _split_tuple(a)
    if len(g_el) > 1 and (g[0] != a[0] or g[-1] != a[-1]):
        return False
    if len(g_el) != len(a_el):
        return False
    for ge, ae in zip(g_el, a_el, strict=True):
        if _is_frac(ge) and _is_frac(ae):
            ok = ge == ae  # unreduced fractions are not accepted
        elif _str_is_int(ge) != _str_is_int(ae):
            ok = False  # an integer gold needs an integer answer: no evaluation of expressions
        else:
            ok = _equal_under_sympy(ge, ae)
        if not ok:
            return False
    return True


def study_equivalent(gold: str, given: str) -> bool:
    """The study's verdict for an extracted answer against a gold string."""
    golds = [gold]
    if "\\boxed" in gold:
        inner = study_extract(gold)
        golds = [inner] if inner is not None else []
    return any(mathd_normalize(given) == mathd_normalize(g) or grade_sympy(given, g) for g in golds)
