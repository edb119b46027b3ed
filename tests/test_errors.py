"""Expected failures: one or two lines naming the cause and the file or field, exit status 2, no traceback
unless --debug, and before any model loads. No network: hub checks use HF_HUB_OFFLINE or a closed loopback port."""

from __future__ import annotations

import json
import socket
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from rolecast import runtime
from rolecast.cli import main
from rolecast.config.load import load_config
from rolecast.core.errors import ConfigError, DatasetError, MissingPackageError, ModelNotFoundError, UserError, require
from rolecast.tasks import make_task
from rolecast.tasks.datasets import read_rows
from rolecast.workflows import get_workflow


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def no_model_load(monkeypatch):
    """Fails the test if a run gets as far as loading a tokenizer (the first step of loading the model)."""

    def boom(*_a, **_k):
        raise AssertionError("the model started loading before the error was found")

    monkeypatch.setattr(runtime, "load_tokenizer", boom)


def cli_error(capsys, argv: list[str]) -> str:
    """Run the CLI, expect exit status 2 and one or two stderr lines without a traceback; return them."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and 1 <= len(err.splitlines()) <= 2, err
    return err


# --------------------------------------------------------------------------------------------------------
# --debug


def test_debug_flag_reraises_with_the_traceback(capsys):
    assert main(["train", "--set", "train.lr=abc"]) == 2
    with pytest.raises(ConfigError, match=r"--set train\.lr=abc"):
        main(["--debug", "train", "--set", "train.lr=abc"])


# --------------------------------------------------------------------------------------------------------
# --set overrides name the override, not the shipped config file


@pytest.mark.parametrize(
    "override, needles",
    [
        ("train.lr=abc", ["--set train.lr=abc: train.lr: Input should be a valid number"]),
        ("train.learning_rate=0.1", ["--set train.learning_rate=0.1: train.learning_rate: unknown field"]),
        ("train.lr.x=1", ["--set train.lr.x=1: train.lr is a value", "not a section"]),
        ("trian.lr=1", ["--set trian.lr=1: trian: unknown field"]),
        ("workflow.name=nope", ["--set workflow.name=nope: workflow.name: unknown workflow 'nope'"]),
    ],
)
def test_set_override_errors_name_the_override(capsys, override, needles):
    err = cli_error(capsys, ["train", "--set", override])
    for needle in needles:
        assert needle in err
    assert "testbed.yaml" not in err  # the shipped file is not at fault


def test_flag_errors_name_the_flag(capsys):
    err = cli_error(capsys, ["train", "--workflow", "tree_search"])
    assert "--workflow tree_search: workflow.name: unknown workflow 'tree_search'" in err


def test_file_errors_still_name_the_file(tmp_path):
    p = write(tmp_path / "run.yaml", "train: {lr: abc}\n")
    with pytest.raises(ConfigError, match=rf"{p}: train\.lr"):
        load_config(p, {"train.steps": 3})


# --------------------------------------------------------------------------------------------------------
# workflow options, typed and range-checked from the signature


@pytest.mark.parametrize(
    "name, option, value, needle",
    [
        ("voting", "n", 0, "greater than or equal to 1"),
        ("voting", "n", -1, "greater than or equal to 1"),
        ("voting", "n", "abc", "valid integer"),
        ("orch_workers", "k", 0, "greater than or equal to 1"),
        ("eval_opt", "max_rounds", 0, "greater than or equal to 1"),
        ("eval_opt", "shared_history", "maybe", "valid boolean"),
    ],
)
def test_bad_workflow_option_is_one_line_at_load(capsys, name, option, value, needle):
    err = cli_error(capsys, ["train", "--workflow", name, "--set", f"workflow.options.{option}={value}"])
    assert f"--set workflow.options.{option}={value}: workflow.options.{option}: " in err and needle in err


def test_good_workflow_options_are_typed():
    cfg = load_config(None, {"workflow.name": "voting", "workflow.options": {"n": "5"}})
    assert cfg.workflow.options == {"n": 5}
    assert load_config(None, {"workflow.name": "eval_opt"}).workflow.options == {}  # defaults stay implicit


def test_required_option_of_a_user_workflow(tmp_path):
    wf = write(
        tmp_path / "wf.py",
        "from rolecast.workflows import workflow\n"
        "@workflow('needs_k', prompts={'solver': ['solve']})\n"
        "async def needs_k(ctx, k: int):\n    return str(k)\n",
    )
    with pytest.raises(ConfigError, match=r"workflow\.options\.k: .*needs this option"):
        load_config(None, {"workflow.name": f"{wf}:needs_k"})
    assert load_config(None, {"workflow.name": f"{wf}:needs_k", "workflow.options.k": 2}).workflow.options == {"k": 2}


# --------------------------------------------------------------------------------------------------------
# the workflow loader's error paths


def test_get_workflow_error_paths(tmp_path):
    plain = write(tmp_path / "plain.py", "async def solo(ctx):\n    return None\n")
    broken = write(tmp_path / "broken.py", "import no_such_module_for_rolecast_tests\n")
    cases = {
        "tree_search": r"unknown workflow 'tree_search'; known: \[.*'voting'",
        "no_such_module_for_rolecast_tests:fn": r"no module named 'no_such_module_for_rolecast_tests'",
        "rolecast.workflows.voting:no_such_fn": r"rolecast\.workflows\.voting has no function 'no_such_fn'",
        f"{tmp_path / 'missing.py'}:fn": r"the file .*missing\.py does not exist",
        f"{plain}:solo": r"'solo' is not decorated with @rolecast\.workflows\.workflow",
        f"{broken}:fn": r"importing .*broken\.py failed: ModuleNotFoundError",
        f"{plain}:": r"expected 'package\.module:function'",
    }
    for ref, pattern in cases.items():
        with pytest.raises(ConfigError, match=pattern) as e:
            get_workflow(ref)
        assert isinstance(e.value, ValueError) and "\n" not in str(e.value)


# --------------------------------------------------------------------------------------------------------
# dataset files: the file and the 1-based line an editor shows


def test_malformed_line_after_a_row_with_a_unicode_line_separator(tmp_path):
    # U+2028 inside a JSON string is valid JSON and no line break for an editor; str.splitlines broke the row there
    f = write(
        tmp_path / "d.jsonl", json.dumps({"problem": "a\u2028b", "answer": "1"}, ensure_ascii=False) + "\n\n{oops\n"
    )
    with pytest.raises(DatasetError, match=r"d\.jsonl, line 3: not valid JSON"):
        read_rows(f)
    good = write(tmp_path / "g.jsonl", json.dumps({"problem": "a\u2028b", "answer": "1"}, ensure_ascii=False) + "\n")
    assert read_rows(good) == [{"problem": "a\u2028b", "answer": "1"}]


def test_missing_column_names_file_and_line(tmp_path):
    f = write(tmp_path / "d.jsonl", '{"problem": "1+1", "answer": "2"}\n\n{"question": "2+2", "answer": "4"}\n')
    with pytest.raises(DatasetError) as e:
        make_task("math_jsonl", path=str(f)).problems("train")
    msg = str(e.value)
    assert msg.startswith(f"{f}, line 3: ") and "missing column 'problem'" in msg and "'question'" in msg


def test_non_utf8_line_is_named(tmp_path):
    f = tmp_path / "latin1.jsonl"
    f.write_bytes(b'{"problem": "1+1", "answer": "2"}\n{"problem": "caf\xe9", "answer": "3"}\n')
    with pytest.raises(DatasetError, match=r"latin1\.jsonl, line 2: not UTF-8 text"):
        read_rows(f)


def test_empty_file_is_an_error(tmp_path):
    f = write(tmp_path / "empty.jsonl", "\n  \n")
    with pytest.raises(DatasetError, match=r"empty\.jsonl: the file holds no rows"):
        read_rows(f)


def test_missing_split(tmp_path):
    write(tmp_path / "train.jsonl", '{"problem": "1+1", "answer": "2"}\n')
    with pytest.raises(DatasetError, match=r"no test\.jsonl / test\.parquet / test\.json in"):
        make_task("math_jsonl", path=str(tmp_path)).problems("test")
    with pytest.raises(DatasetError, match=r"math_jsonl has no 'test' split"):
        make_task("math_jsonl", path={"train": str(tmp_path / "train.jsonl")}).problems("test")


def test_cli_dataset_error_before_the_model_loads(capsys, tmp_path, no_model_load):
    data = write(tmp_path / "d.jsonl", '{"problem": "1+1", "answer": "2"}\n{"problem": "2+2"}\n')
    err = cli_error(
        capsys,
        [
            "train",
            "--task",
            "math_jsonl",
            "--set",
            f"task.options.path={data}",
            "--set",
            "task.eval_split=train",
            "--run-dir",
            str(tmp_path / "run"),
        ],
    )
    assert f"{data}, line 2: " in err and "missing column 'answer'" in err


def test_cli_missing_split_names_the_field(capsys, tmp_path, no_model_load):
    err = cli_error(capsys, ["train", "--set", "task.eval_split=validation", "--run-dir", str(tmp_path / "run")])
    assert "task.eval_split 'validation'" in err


# --------------------------------------------------------------------------------------------------------
# missing optional packages: one line with the install command, at config load where possible


def test_require_names_the_install_command(monkeypatch):
    assert require("json", "unused") is json
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # as if not installed
    with pytest.raises(
        MissingPackageError,
        match=r"logging\.tensorboard needs the tensorboard package.*"
        r"pip install 'rolecast\[tensorboard\]'",
    ):
        require("tensorboard", "tensorboard", module="torch.utils.tensorboard", purpose="logging.tensorboard")
    with pytest.raises(MissingPackageError, match=r"pip install 'rolecast\[tensorboard\]'"):
        require("tensorboard", "tensorboard", load=False)


@pytest.mark.parametrize(
    "field, package, extra",
    [
        ("logging.tensorboard", "tensorboard", "tensorboard"),
        ("logging.wandb", "wandb", "wandb"),
        ("task.options.hub", "datasets", "hub"),
    ],
)
def test_missing_package_fails_at_config_load(capsys, monkeypatch, no_model_load, field, package, extra):
    monkeypatch.setitem(sys.modules, package, None)
    argv = ["train", "--set", f"{field}=true"] + (["--task", "gsm8k"] if package == "datasets" else [])
    err = cli_error(capsys, argv)
    assert f"--set {field}=true: {field}: needs the {package} package" in err
    assert f"pip install 'rolecast[{extra}]'" in err


def test_parquet_without_pyarrow(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    f = write(tmp_path / "d.parquet", "not really parquet")
    with pytest.raises(
        MissingPackageError,
        match=r"reading .*d\.parquet needs the pyarrow package.*"
        r"pip install 'rolecast\[parquet\]'",
    ):
        read_rows(f)


# --------------------------------------------------------------------------------------------------------
# unknown hub ids while offline: seconds, not a minute of retries


def closed_loopback_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now: a connection is refused at once
    return port


def test_offline_hub_id_fails_at_config_load(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(
        ConfigError,
        match=r"model\.path: 'nobody-rolecast/no-such-model' is not in the local "
        r"Hugging Face cache .* HF_HUB_OFFLINE is set",
    ):
        load_config(None, {"model.path": "nobody-rolecast/no-such-model"})
    # cached ids pass
    (tmp_path / "hub" / "models--nobody-rolecast--cached" / "snapshots" / "abc").mkdir(parents=True)
    assert load_config(None, {"model.path": "nobody-rolecast/cached"}).model.path == "nobody-rolecast/cached"


def test_unreachable_hub_fails_fast(monkeypatch, tmp_path):
    from rolecast.policies.models import load_model, load_tokenizer

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_loopback_port()}")
    for load in (load_tokenizer, load_model):
        t0 = time.perf_counter()
        with pytest.raises(
            ModelNotFoundError,
            match=r"'nobody-rolecast/no-such-model' is not in the local Hugging "
            r"Face cache and the hub \(http://127\.0\.0\.1:\d+\) cannot be "
            r"reached",
        ):
            load("nobody-rolecast/no-such-model")
        assert time.perf_counter() - t0 < 5  # transformers alone retries for about a minute


def test_cli_offline_hub_id(capsys, monkeypatch, tmp_path, no_model_load):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    err = cli_error(capsys, ["train", "--model", "nobody-rolecast/no-such-model"])
    assert "--model nobody-rolecast/no-such-model: model.path: " in err and "HF_HUB_OFFLINE" in err


def test_every_expected_error_is_a_user_error():
    for cls in (ConfigError, DatasetError, MissingPackageError, ModelNotFoundError):
        assert issubclass(cls, UserError)


# --------------------------------------------------------------------------------------------------------
# typed claims and the final text survive the episodes file


def test_episode_round_trips_through_the_episodes_file():
    from rolecast.core.episode import AnswerClaim, Episode, PickClaim, Turn, VerdictClaim

    def turn(claim, i):
        return Turn("r", "r", "p", [1], [2], [0.0], "t", "stop", index=i, claim=claim)

    ep = Episode(
        "q",
        0,
        [
            turn(AnswerClaim("a", correct=True), 0),
            turn(VerdictClaim(False, "a", correct=False, reviewed_correct=True), 1),
            turn(PickClaim(1, ["a", "b"], correct=None, candidates_correct=[False, False]), 2),
            turn(None, 3),
        ],
        final_text=r"\boxed{4}",
        reward=1.0,
    )
    line = json.dumps(asdict(ep))  # what the trainer writes to episodes/step_N.jsonl
    row = json.loads(line)
    assert [t["claim"]["kind"] for t in row["turns"][:3]] == ["answer", "verdict", "pick"]
    assert row["final_text"] == r"\boxed{4}" and "final_text" not in row["metadata"]
    assert Episode.from_dict(row) == ep and Episode.from_dict(json.loads(ep.to_json())) == ep
    # files written before final_text was a field
    row["metadata"] = {"final_text": row.pop("final_text")}
    assert Episode.from_dict(row).final_text == r"\boxed{4}"


def test_backend_protocol_declares_what_callers_use():
    from rolecast.rollout import Backend
    from rolecast.rollout.hf import HFBackend
    from rolecast.rollout.scripted import ScriptedBackend

    scripted = ScriptedBackend(lambda pid, m: "x", temperature=0.0)
    assert isinstance(scripted, Backend)
    scripted.reseed(7)
    assert scripted.seeds == [7]

    class OnlyGenerate:
        def generate(self, requests):
            return []

    assert not isinstance(OnlyGenerate(), Backend)  # temperature and reseed are part of the contract
    assert callable(HFBackend.reseed) and "temperature" in Backend.__annotations__
