"""The study's DeepCoder data preparation (examples/deepcoder/prepare_deepcoder_data.py): the runtime-results
filter and LiveCodeBench's problem prompt (rllm/data/utils.py fetch_live_code_bench_system_prompt)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rolecast.tasks import make_task

DEEPCODER = Path(__file__).parent / "fixtures" / "deepcoder_primeintellect.jsonl"


def _all(task):
    return {p.meta["index"]: p for split in ("train", "test") for p in task.problems(split)}


def test_runtime_results_keep_the_problems_the_file_does_not_name(tmp_path):
    """The file names rows 0 (test 0 passed, test 1 failed) and 1 (its only test failed): row 0 keeps one test,
    row 1 is dropped, rows 2-5 (not named) keep every test, as the study's `_num_passing_tests = -1` does."""
    f = tmp_path / "runtime_results.json"
    f.write_text(json.dumps({"0": {"0": {"status": "passed"}, "1": {"status": "failed"}}, "1": {"0": {"status": "x"}}}))
    everything = _all(make_task("deepcoder", path=str(DEEPCODER), test_size=1))
    filtered = _all(make_task("deepcoder", path=str(DEEPCODER), test_size=1, runtime_results=str(f)))
    assert sorted(filtered) == [0, 2, 3, 4, 5]
    assert filtered[0].reference.n_tests == 1 and everything[0].reference.n_tests == 2
    for i in (2, 3, 4, 5):
        assert filtered[i].reference.n_tests == everything[i].reference.n_tests


SYSTEM = (
    "You are an expert Python programmer. You will be given a question (problem specification) and will generate a "
    "correct Python program that matches the specification and passes all tests."
)


def test_livecodebench_problem_text_byte_for_byte():
    rows = [json.loads(line) for line in DEEPCODER.read_text().splitlines()]
    lcb = _all(make_task("deepcoder", path=str(DEEPCODER), test_size=1, problem_format="livecodebench"))
    plain = _all(make_task("deepcoder", path=str(DEEPCODER), test_size=1))
    assert plain[0].text == rows[0]["problem"].strip()  # rolecast's default: the statement alone
    assert lcb[0].text == (  # no starter code: stdin instructions; no separator before "### Format"
        f"{SYSTEM}\n\n{rows[0]['problem']}### Format: Read the inputs from stdin solve the problem and write the "
        "answer to stdout (do not directly test on the sample inputs). Enclose your code within delimiters as "
        "follows. Ensure that when the python program runs, it reads the inputs, runs the algorithm and writes "
        "output to STDOUT.\n```python\n# YOUR CODE HERE\n```\n\n### Answer: (use the provided format with "
        "backticks)\n\n"
    )
    assert lcb[1].text == (  # starter code, as given (unstripped)
        f"{SYSTEM}\n\n{rows[1]['problem']}### Format: You will use the following starter code to write the "
        "solution to the problem and enclose your code within delimiters.\n```python\n"
        f"{rows[1]['starter_code']}\n```\n\n### Answer: (use the provided format with backticks)\n\n"
    )
    with pytest.raises(ValueError, match="problem_format"):
        make_task("deepcoder", path=str(DEEPCODER), problem_format="lcb")
