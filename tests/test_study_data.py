"""The study's data, in each real layout (small fixture files written in the datasets' schemas)."""

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from rolecast.sandbox import SandboxPool
from rolecast.tasks import make_task

FIX = Path(__file__).parent / "fixtures"
PROCESSED = FIX / "dapo_math_processed_en.jsonl"  # open-r1/DAPO-Math-17k-Processed, config en
ORIGINAL = FIX / "dapo_math_original.jsonl"  # BytedTsinghua-SIA/DAPO-Math-17k (duplicates, one Chinese row)
DEEPCODER = FIX / "deepcoder_primeintellect.jsonl"  # agentica-org/DeepCoder-Preview-Dataset, primeintellect


def _to_parquet(src: Path, dst: Path) -> Path:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = [json.loads(line) for line in src.read_text().splitlines()]
    pq.write_table(pa.Table.from_pylist(rows), dst)
    return dst


def test_dapo_processed_layout_loads_and_splits_as_the_study():
    t = make_task("dapo_math", path=str(PROCESSED))  # used to crash: json.loads on the prompt string
    train, test = t.problems("train"), t.problems("test")
    n = 9
    perm = np.random.default_rng(42).permutation(n)  # = datasets.train_test_split(test_size=0.1, seed=42)
    n_test = math.ceil(0.1 * n)
    rows = [json.loads(line) for line in PROCESSED.read_text().splitlines()]
    assert [p.reference for p in test] == [rows[i]["solution"] for i in perm[:n_test]]
    assert [p.reference for p in train] == [rows[i]["solution"] for i in perm[n_test:]]
    assert {p.id for p in train}.isdisjoint(p.id for p in test)
    assert test[0].text and "Remember to put" not in test[0].text  # default: the DAPO instruction stripped


def test_dapo_original_layout_is_deduplicated_filtered_and_split_identically(tmp_path):
    orig = make_task("dapo_math", path=str(ORIGINAL))
    proc = make_task("dapo_math", path=str(PROCESSED))
    for split in ("train", "test"):  # 13 rows -> 10 unique -> 9 English: the processed en copy, same split
        assert [(p.text, p.reference) for p in orig.problems(split)] == [
            (p.text, p.reference) for p in proc.problems(split)
        ]
    assert len(orig.problems("train")) + len(orig.problems("test")) == 9
    both = make_task("dapo_math", path=str(ORIGINAL), language="all")
    assert len(both.problems("train")) + len(both.problems("test")) == 10
    pq_path = _to_parquet(ORIGINAL, tmp_path / "train.parquet")  # the hub's file format
    from_pq = make_task("dapo_math", path=str(pq_path))
    assert [p.id for p in from_pq.problems("test")] == [p.id for p in orig.problems("test")]


def test_dapo_instruction_keep_is_the_study_prompt():
    t = make_task("dapo_math", path=str(PROCESSED), instruction="keep")
    p = t.problems("test")[0]
    assert p.text.startswith("Solve the following math problem step by step.") and "Remember to put" in p.text


def test_dapo_missing_file_names_the_expected_path(tmp_path, monkeypatch):
    monkeypatch.setenv("ROLECAST_DATA_DIR", str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"dapo_math/train\.parquet not found.*DAPO-Math-17k-Processed"):
        make_task("dapo_math").problems("train")
    (tmp_path / "dapo_math").mkdir()
    shutil.copy(PROCESSED, tmp_path / "dapo_math" / "train.jsonl")  # the .jsonl form is accepted too
    assert len(make_task("dapo_math").problems("test")) == 1


def test_study_grader_compares_the_box_not_its_value():
    study = make_task("dapo_math", path=str(PROCESSED), grader="rllm")
    seven = next(p for p in list(study.problems("train")) + list(study.problems("test")) if "3+4" in p.text)
    assert study.score(seven, r"So the answer is \boxed{7}.").reward == 1.0
    assert study.score(seven, r"\boxed{3+4}").reward == 0.0  # rolecast's grader evaluates it: 1.0
    assert study.score(seven, r"\fbox{7}").reward == 0.0
    assert study.score(seven, r"\boxed 7").reward == 0.0
    assert study.score(seven, r"\boxed{7").reward == 0.0
    assert study.score(seven, "The answer is 7").reward == 0.0  # no last-number fallback
    with pytest.raises(ValueError, match="no last-number fallback"):
        make_task("dapo_math", path=str(PROCESSED), grader="rllm", last_number=True)


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(2) as p:
        yield p


def test_deepcoder_primeintellect_layout_split_and_function_calls(pool):
    t = make_task("deepcoder", path=str(DEEPCODER), test_size=2)
    train, test = t.problems("train"), t.problems("test")
    perm = np.random.default_rng(42).permutation(6)  # = datasets' shuffle(seed=42), first test_size held out
    assert [p.meta["index"] for p in test] == list(perm[:2])
    assert [p.meta["index"] for p in train] == list(perm[2:])
    by_index = {p.meta["index"]: p for p in list(train) + list(test)}
    vowels = by_index[1]
    assert vowels.reference.kind == "functional" and vowels.reference.entry_point == "count_vowels"
    assert vowels.reference.timeout_s == 3.0  # the study's per-test limit
    right = "```python\ndef count_vowels(s):\n    return sum(c in 'aeiouAEIOU' for c in s)\n```"
    wrong = "```python\ndef count_vowels(s):\n    return sum(c in 'aeiou' for c in s)\n```"  # misses upper case
    from rolecast.rewards.code import score_code

    assert score_code(right, vowels.reference, pool=pool).reward == 1.0  # scored 0 when run as a stdin program
    assert score_code(wrong, vowels.reference, pool=pool).reward == 0.0
    pair = by_index[2]  # a list return value, wrapped in a one-element list in the data
    good = (
        "```python\ndef pair_sum(nums, target):\n    seen = {}\n    for i, x in enumerate(nums):\n"
        "        if target - x in seen:\n            return [seen[target - x], i]\n        seen[x] = i\n```"
    )
    assert score_code(good, pair.reference, pool=pool).reward == 1.0
    add = by_index[0]
    assert add.reference.kind == "stdio"
    assert (
        score_code("```python\na, b = map(int, input().split())\nprint(a + b)\n```", add.reference, pool=pool).reward
        == 1.0
    )
    assert by_index[5].reference.kind == "functional" and by_index[5].reference.entry_point == "maxOf"  # LCB style


def test_deepcoder_runtime_results_filter_tests_before_the_split(tmp_path):
    keep = {
        "0": {"0": {"status": "passed"}, "1": {"status": "failed"}},
        "1": {"0": {"status": "failed"}},
        **{str(i): {"0": {"status": "passed"}} for i in range(2, 6)},
    }
    f = tmp_path / "runtime_results.json"
    f.write_text(json.dumps(keep))
    t = make_task("deepcoder", path=str(DEEPCODER), test_size=1, runtime_results=str(f))
    probs = list(t.problems("train")) + list(t.problems("test"))
    assert sorted(p.meta["index"] for p in probs) == [0, 2, 3, 4, 5]  # row 1 has no passing test left
    assert next(p for p in probs if p.meta["index"] == 0).reference.n_tests == 1


def test_deepcoder_defaults_and_missing_file(tmp_path, monkeypatch):
    monkeypatch.setenv("ROLECAST_DATA_DIR", str(tmp_path))
    t = make_task("deepcoder")
    assert t.subset == "primeintellect" and t.test_size == 1000
    with pytest.raises(FileNotFoundError, match=r"deepcoder/primeintellect/train\.parquet not found"):
        t.problems("train")


@pytest.mark.parametrize(
    "task,rel,fixture", [("dapo_math", "dapo_math", PROCESSED), ("deepcoder", "deepcoder/primeintellect", DEEPCODER)]
)
def test_offline_file_or_its_jsonl_sibling_one_rule(tmp_path, monkeypatch, task, rel, fixture):
    """Both tasks whose hub copy is Parquet read the offline .parquet, else its .jsonl sibling (one rule in
    DatasetTask), and say what to put there when neither exists; the rows read are the same either way."""
    monkeypatch.setenv("ROLECAST_DATA_DIR", str(tmp_path))
    options = {"test_size": 2} if task == "deepcoder" else {}
    with pytest.raises(
        FileNotFoundError, match=r"not found \(offline\)\. Put .* there as train\.parquet or train\.jsonl"
    ):
        make_task(task, **options).problems("train")
    (tmp_path / rel).mkdir(parents=True)
    shutil.copy(fixture, tmp_path / rel / "train.jsonl")
    from_jsonl = [p.id for p in make_task(task, **options).problems("test")]
    _to_parquet(fixture, tmp_path / rel / "train.parquet")
    (tmp_path / rel / "train.jsonl").unlink()
    assert [p.id for p in make_task(task, **options).problems("test")] == from_jsonl and from_jsonl
