"""Dataset tasks: loading, split sizes, problem text, gold answers, skips, local files and scoring."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rolecast.rewards.code import CodeTests
from rolecast.tasks import make_task, task_names
from rolecast.tasks.datasets import data_root, dataset_file, read_rows

ALL = [
    "gsm8k",
    "math",
    "math500",
    "aime2024",
    "dapo_math",
    "mbpp",
    "mbpp_sanitized",
    "humaneval",
    "deepcoder",
    "math_jsonl",
    "code_jsonl",
]


def test_all_registered():
    assert set(ALL) <= set(task_names())


def test_task_names_are_registered_once_and_unknown_ones_named():
    from rolecast.core.errors import ConfigError
    from rolecast.tasks import register_task
    from rolecast.tasks.base import Task

    with pytest.raises(ValueError, match=r"task 'gsm8k' is already registered \(by rolecast\.tasks\.datasets\.GSM8K"):

        @register_task("gsm8k")
        class Other(Task):
            pass

    with pytest.raises(ConfigError, match=r"unknown task 'gsm9k' \(did you mean 'gsm8k'\?\); known: \["):
        make_task("gsm9k")


def test_families():
    fam = {n: make_task(n, **({"path": "x.jsonl"} if n.endswith("_jsonl") else {})).family for n in ALL}
    assert {n for n, f in fam.items() if f == "code"} == {
        "mbpp",
        "mbpp_sanitized",
        "humaneval",
        "deepcoder",
        "code_jsonl",
    }


def test_data_root_env_var_and_missing_file_error(tmp_path, monkeypatch):
    monkeypatch.setenv("ROLECAST_DATA_DIR", str(tmp_path))
    assert data_root() == tmp_path
    with pytest.raises(FileNotFoundError) as e:
        dataset_file("gsm8k/test.jsonl")
    assert str(tmp_path / "gsm8k/test.jsonl") in str(e.value) and "ROLECAST_DATA_DIR" in str(e.value)
    with pytest.raises(FileNotFoundError, match="ROLECAST_DATA_DIR"):
        make_task("gsm8k").problems("test")


@pytest.mark.parametrize(
    "name, sizes",
    [
        ("gsm8k", {"train": 7473, "test": 1319}),
        ("math", {"train": 7498, "test": 5000}),  # 2 train rows have an empty \boxed{}
        ("math500", {"train": 450, "validation": 50, "test": 500}),
        ("aime2024", {"train": 27, "validation": 3, "test": 30}),
        ("mbpp", {"train": 374, "validation": 90, "test": 500}),
        ("mbpp_sanitized", {"train": 120, "validation": 43, "test": 257}),
        ("humaneval", {"train": 148, "validation": 16, "test": 164}),
    ],
)
def test_split_sizes(data_dir, name, sizes):
    t = make_task(name)
    for split, n in sizes.items():
        assert len(t.problems(split)) == n, (name, split)
    if name == "math":
        assert dict(t.skipped) == {"empty \\boxed answer in solution": 2}
    else:
        assert sum(t.skipped.values()) == 0


def test_derived_splits_are_a_seeded_partition(data_dir):
    a, b, c = make_task("math500"), make_task("math500"), make_task("math500", seed=1)
    ids = lambda t, s: [p.id for p in t.problems(s)]  # noqa: E731
    assert ids(a, "train") == ids(b, "train")
    assert ids(a, "train") != ids(c, "train")
    assert set(ids(a, "train")) | set(ids(a, "validation")) == set(ids(a, "test"))
    assert not set(ids(a, "train")) & set(ids(a, "validation"))
    assert len(make_task("math500", val_fraction=0.2).problems("validation")) == 100


def test_validation_carved_from_train_only_on_request(data_dir):
    with pytest.raises(ValueError, match="val_fraction"):
        make_task("gsm8k").problems("validation")
    t = make_task("gsm8k", val_fraction=0.1)
    assert len(t.problems("validation")) == 747 and len(t.problems("train")) == 7473 - 747
    assert len(t.problems("test")) == 1319


def test_unknown_split():
    with pytest.raises(ValueError, match="split"):
        make_task("gsm8k").problems("dev")


def test_gsm8k_problem(data_dir):
    p = make_task("gsm8k").problems("test")[0]
    assert p.text.startswith("Janet\u2019s ducks lay 16 eggs per day.")
    assert p.reference == "18" and p.id == "gsm8k/test/0"


def test_math_problem_and_meta(data_dir):
    p = make_task("math").problems("test")[0]
    assert p.text.startswith("How many vertical asymptotes")
    assert p.reference == "2" and p.meta["level"] == "Level 3" and p.meta["subject"] == "Algebra"


def test_math500_and_aime(data_dir):
    p = make_task("math500").problems("test")[0]
    assert p.reference == r"\left( 3, \frac{\pi}{2} \right)" and p.id == "test/precalculus/807.json"
    a = make_task("aime2024").problems("test")
    assert a[0].id == "aime2024/2024-II-4" and a[0].reference == "33"


def test_mbpp_problem_shows_first_test(data_dir):
    p = make_task("mbpp").problems("test")[0]
    assert p.text == (
        "Write a python function to remove first and last occurrence of a given character from the string.\n"
        'Your code should pass this test:\nassert remove_Occ("hello","l") == "heo"'
    )
    assert isinstance(p.reference, CodeTests) and p.reference.kind == "asserts" and len(p.reference.asserts) == 3
    assert p.id == "mbpp/11"


def test_humaneval_problem_is_the_prompt(data_dir):
    p = make_task("humaneval").problems("test")[0]
    assert p.id == "HumanEval/0" and p.text.startswith("from typing import List\n\n\ndef has_close_elements(")
    assert p.reference.kind == "humaneval" and p.reference.entry_point == "has_close_elements"


def test_scoring_through_tasks(data_dir):
    t = make_task("gsm8k")
    p = t.problems("test")[0]
    assert t.extract_answer(r"... so she makes \boxed{18} dollars") == "18"
    assert t.score(p, r"\boxed{18}").reward == 1.0
    assert [s.reward for s in t.score_many([p, p], [r"\boxed{18.0}", "#### 17"])] == [1.0, 0.0]
    h = make_task("humaneval")
    probs = h.problems("test")[:4]
    texts = ["```python\n" + q.text + q.meta["reference_solution"] + "\n```" for q in probs]
    texts[2] = "```python\ndef nothing(): pass\n```"
    assert [s.reward for s in h.score_many(probs, texts)] == [1.0, 1.0, 0.0, 1.0]


# ---------------------------------------------------------------------------------------------- local files


def _write_jsonl(path: Path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


DAPO_WRAPPED = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
    "What is $1+1$?\n\n"
    'Remember to put your answer on its own line after "Answer:".'
)


def _dapo_rows():
    row = lambda i, content, gt: {  # noqa: E731 - the DAPO-Math-17k schema
        "data_source": "math_dapo",
        "prompt": [{"content": content, "role": "user"}],
        "ability": "MATH",
        "reward_model": {"ground_truth": gt, "style": "rule-lighteval/MATH_v2"},
        "extra_info": {"index": f"id-{i}"},
    }
    rows = [row(0, DAPO_WRAPPED, "2")]
    rows += [row(i, f"Compute {i} times 3.", str(3 * i)) for i in range(1, 20)]
    rows.append(row(20, "No answer here.", ""))  # skipped: empty ground truth
    return rows


def test_dapo_from_jsonl_and_parquet(tmp_path):
    rows = _dapo_rows()
    t = make_task("dapo_math", path=_write_jsonl(tmp_path / "dapo.jsonl", rows))
    train, test = t.problems("train"), t.problems("test")
    # 21 rows: the study's held-out split takes ceil(10%) = 3 as "test"; 1 row is skipped (empty ground truth)
    assert len(train) + len(test) == 20 and len(test) in (2, 3)
    assert t.skipped == {"empty reward_model.ground_truth": 1}
    by_id = {p.id: p for p in list(train) + list(test)}
    assert by_id["dapo_math/id-0"].text == "What is $1+1$?" and by_id["dapo_math/id-0"].reference == "2"
    assert by_id["dapo_math/id-7"].text == "Compute 7 times 3." and by_id["dapo_math/id-7"].reference == "21"
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "train.parquet")
    t2 = make_task("dapo_math", path=tmp_path)  # a directory holding train.parquet
    assert [p.id for p in t2.problems("train")] == [p.id for p in train]


def test_deepcoder_fixture(tmp_path):
    rows = [
        {  # stdin problem, LiveCodeBench format
            "problem": "Read two integers and print their sum.",
            "tests": json.dumps(
                [
                    {"input": "1 2\n", "output": "3\n", "testtype": "stdin"},
                    {"input": "5 5\n", "output": "10\n", "testtype": "stdin"},
                ]
            ),
            "metadata": {},
        },
        {  # functional problem, func_name in metadata (stored as a JSON string, as on the hub)
            "problem": "Return the maximum of nums.",
            "starter_code": "class Solution:\n    def maxOf(self, nums: List[int]) -> int:\n        ",
            "tests": json.dumps([{"input": "[1, 5, 2]", "output": "5", "testtype": "functional"}]),
            "metadata": json.dumps({"func_name": "maxOf"}),
        },
        {"problem": "Broken row", "tests": "not json", "metadata": {}},
        {"problem": "TACO-style row", "tests": json.dumps({"inputs": ["1"], "outputs": ["1"]}), "metadata": {}},
    ]
    # lcbv5 rows given as one file: the study's seeded split would hold 1000 out, so test_size=1 here
    t = make_task("deepcoder", path={"train": _write_jsonl(tmp_path / "dc.jsonl", rows)}, test_size=1)
    probs = sorted(list(t.problems("train")) + list(t.problems("test")), key=lambda p: p.meta["index"])
    assert len(probs) == 3  # the TACO-style row is read as a stdin problem, as the study's data preparation does
    assert t.skipped == {"tests column is not valid JSON": 1}
    assert (
        probs[0].reference.kind == "stdio"
        and probs[1].reference.kind == "functional"
        and probs[1].reference.entry_point == "maxOf"
    )
    assert "Start from this code:\n```python\nclass Solution:" in probs[1].text
    good = [
        "```python\na, b = map(int, input().split())\nprint(a + b)\n```",
        "```python\nfrom typing import List\nclass Solution:\n    def maxOf(self, nums: List[int]) -> int:\n        return max(nums)\n```",
    ]
    assert [s.reward for s in t.score_many(probs[:2], good)] == [1.0, 1.0]
    s = t.score(probs[0], "```python\nprint(3)\n```")
    assert (s.reward, s.reason) == (0.0, None)  # ran and printed the wrong thing


def test_math_jsonl_column_mapping(tmp_path):
    f = _write_jsonl(tmp_path / "m.jsonl", [{"q": "1+1?", "sol": r"so \boxed{2}"}, {"q": "2+2?", "sol": "no box"}])
    t = make_task("math_jsonl", path=f, path_split="test", problem_key="q", answer_key="sol", answer_from="boxed")
    probs = t.problems("test")
    assert [(p.text, p.reference) for p in probs] == [("1+1?", "2")]
    assert t.skipped == {"no \\boxed answer in solution": 1}
    with pytest.raises(ValueError, match="missing column 'answer'"):
        make_task("math_jsonl", path=f, path_split="test", problem_key="q").problems("test")
    with pytest.raises(ValueError, match="path="):
        make_task("math_jsonl")


def test_code_jsonl_asserts(tmp_path):
    f = _write_jsonl(
        tmp_path / "c.jsonl", [{"task": "Double x.", "checks": ["assert dbl(2) == 4"]}, {"task": "x", "checks": []}]
    )
    t = make_task("code_jsonl", path=f, problem_key="task", tests_key="checks", test_format="asserts")
    probs = t.problems("train")
    assert len(probs) == 1 and t.skipped == {"empty checks": 1}
    assert t.score(probs[0], "```python\ndef dbl(x):\n    return 2 * x\n```").reward == 1.0


def test_the_study_grader_refuses_tests_it_cannot_run_as_the_data_loads(tmp_path):
    """grader rllm (the study's LiveCodeBench runner) runs stdio/functional tests only: a file of asserts fails
    as it loads, naming its first row, instead of every text of the first batch raising at scoring (GraderBug)."""
    rows = [{"task": "Double x.", "checks": ["assert dbl(2) == 4"]}]
    f = _write_jsonl(tmp_path / "c.jsonl", rows)
    kw = dict(path=f, problem_key="task", tests_key="checks", test_format="asserts")
    with pytest.raises(ValueError, match=r"c.jsonl, line 1: .*grader 'rllm'.* this row's are 'asserts': set task"):
        make_task("code_jsonl", grader="rllm", **kw).problems("train")
    assert len(make_task("code_jsonl", **kw).problems("train")) == 1  # rolecast's grader runs them
    lcb = [{"task": "Echo.", "checks": json.dumps([{"input": "1\n", "output": "1\n", "testtype": "stdin"}])}]
    f2 = _write_jsonl(tmp_path / "l.jsonl", lcb)
    t = make_task("code_jsonl", path=f2, problem_key="task", tests_key="checks", grader="rllm")
    (p,) = t.problems("train")
    assert p.reference.kind == "stdio"


def test_bad_json_line_names_file_and_line(tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_text('{"a": 1}\n{oops\n')
    with pytest.raises(ValueError, match=r"bad.jsonl, line 2"):
        read_rows(f)


def test_hub_needs_datasets_or_network(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "datasets", None)  # not installed (importing it raises ModuleNotFoundError)
    with pytest.raises(ImportError, match=r"rolecast\[hub\]"):
        make_task("gsm8k", hub=True).problems("test")
