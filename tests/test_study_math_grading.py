"""The study grader's LaTeX to text is pylatexenc's, as in the study (rllm/rewards/math_utils/utils.py
`_parse_latex`): each case of tests/fixtures/study_math_grading.jsonl holds the study's verdict and rolecast's own
grader's (math_verify), written down; both graders must give them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rolecast.rewards.math import score_math
from rolecast.rewards.math_study import latex_to_text, study_equivalent, study_extract

CASES = [json.loads(line) for line in (Path(__file__).parent / "fixtures" / "study_math_grading.jsonl").open()]


@pytest.mark.parametrize("case", CASES, ids=[f"{c['given']} vs {c['gold']}" for c in CASES])
def test_study_and_rolecast_verdicts(case):
    boxed = rf"the answer is \boxed{{{case['given']}}}"
    assert study_equivalent(case["gold"], study_extract(boxed)) is case["study"], case["why"]
    assert (score_math(boxed, case["gold"]).reward == 1.0) is case["rolecast"], case["why"]


def test_the_fixture_covers_the_cases_where_the_graders_part():
    assert {c["study"] != c["rolecast"] for c in CASES} == {True, False}
    assert len(CASES) >= 12


def test_latex_to_text_is_pylatexenc_with_the_studys_replacements():
    assert latex_to_text(r"7 \frac{3}{4}") == "7  3/4"  # the study's extra space before \frac
    assert latex_to_text(r"\sqrt{2} \cdot \pi") == "sqrt(2) *pi"
    assert latex_to_text(r"[1, \infty) \cup \{5\}") == "[1, inf) U{5}"
    assert latex_to_text(r"x \le 3") == latex_to_text(r"x \leq 3")
