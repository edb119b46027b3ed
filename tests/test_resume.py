"""Resume never loses or mixes a run: the final evaluation is finished, logs are cut back to the checkpoint
(tolerating a half-written last line), a damaged newest checkpoint falls back to an intact one, config changes
are refused (fields that define the run) or applied for real (lr), and run directories are checked before
a model loads and not left half-made."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
import torch

from rolecast.cli import main
from rolecast.config.load import load_config
from rolecast.core.errors import ConfigError
from rolecast.core.rundir import read_jsonl
from rolecast.training import grpo
from rolecast.training.checkpoint import load_checkpoint
from rolecast.training.grpo import train
from rolecast.training.run_dir import RunDirError, prepare_new_run_dir


def tiny(run_dir: Path, **overrides):
    """The embedded testbed model (it solves about half the problems, so groups have advantages and the
    weights move) with tiny settings."""
    base = {
        "run_dir": str(run_dir),
        "train.steps": 2,
        "train.problems_per_step": 2,
        "train.group_size": 4,
        "train.epochs": 1,
        "train.lr": 1e-4,
        "train.lr_schedule": "constant",
        "rollout.max_new_tokens": 8,
        "eval.size": 2,
        "eval.every": 1,
        "logging.progress": False,
        "checkpoint.every": 1,
        "checkpoint.keep_last": 3,
    }
    return load_config(None, {**base, **overrides})


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A 2-step run: base eval, periodic eval after step 1, final eval after step 2, checkpoints 1 and 2."""
    run_dir = tmp_path_factory.mktemp("finished") / "run"
    train(tiny(run_dir))
    return run_dir


@pytest.fixture
def run_copy(finished_run, tmp_path) -> Path:
    return Path(shutil.copytree(finished_run, tmp_path / "run"))


def test_the_finished_run_logs_each_evaluation_once(finished_run):
    assert [(r["tag"], r["step"]) for r in rows(finished_run / "eval.jsonl")] == [
        ("base", 0),
        ("periodic", 1),
        ("final", 2),
    ]
    assert [r["step"] for r in rows(finished_run / "metrics.jsonl")] == [1, 2]


def test_resume_finishes_a_final_evaluation_that_was_killed(run_copy, caplog):
    # killed during the final evaluation: checkpoint 2 and metrics done, no final row, and the kill left
    # half-written last lines in both logs
    evals = rows(run_copy / "eval.jsonl")[:-1]
    (run_copy / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in evals) + '{"run": "x", "st')
    with open(run_copy / "metrics.jsonl", "a") as f:
        f.write('{"step": 3, "rew')
    with caplog.at_level(logging.WARNING):
        summary = train(tiny(run_copy), resume=run_copy)
    assert "final_accuracy" in summary
    assert [(r["tag"], r["step"]) for r in rows(run_copy / "eval.jsonl")] == [
        ("base", 0),
        ("periodic", 1),
        ("final", 2),
    ]
    assert [r["step"] for r in rows(run_copy / "metrics.jsonl")] == [1, 2]
    assert "eval.jsonl: dropped a half-written last line" in caplog.text
    assert "metrics.jsonl: dropped a half-written last line" in caplog.text
    # a bad line that is not the last one is damage, not a kill: named with its line number
    (run_copy / "metrics.jsonl").write_text('{"step": 1}\nnot json\n{"step": 2}\n')
    with pytest.raises(ConfigError, match=r"metrics.jsonl:2: not a JSON line"):
        read_jsonl(run_copy / "metrics.jsonl")


def test_resume_falls_back_from_a_damaged_checkpoint_and_logs_nothing_twice(run_copy, caplog):
    # the newest checkpoint's weights file is cut short (a disk error, a copy interrupted); `rolecast eval`
    # rows (tag "checkpoint") are not the trainer's and stay
    weights = next((run_copy / "checkpoints" / "step_2").glob("policy*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:100])
    with open(run_copy / "eval.jsonl", "a") as f:
        f.write(json.dumps({"run": "x", "step": 2, "tag": "checkpoint", "pass@1": 0.5}) + "\n")
    with caplog.at_level(logging.WARNING):
        train(tiny(run_copy), resume=run_copy)
    assert f"{weights} has 100 bytes" in caplog.text and "step_1" in caplog.text
    # step 2 was redone from checkpoint 1: its metrics row and its evaluations are logged once
    assert [r["step"] for r in rows(run_copy / "metrics.jsonl")] == [1, 2]
    assert [(r["tag"], r["step"]) for r in rows(run_copy / "eval.jsonl")] == [
        ("base", 0),
        ("periodic", 1),
        ("checkpoint", 2),
        ("final", 2),
    ]
    note = rows(run_copy / "resumes.jsonl")[-1]
    assert note["step"] == 1 and "has 100 bytes" in note["damaged_checkpoints"][0]
    assert load_checkpoint(run_copy)[0] == 2  # the redone step 2 was checkpointed intact


def test_refused_resume_changes_name_the_field_and_touch_nothing(run_copy, capsys):
    before = {p.relative_to(run_copy): p.read_bytes() for p in run_copy.rglob("*") if p.is_file()}
    for field, value in [
        ("train.group_size", 2),
        ("routing.sharing", "isolated"),
        ("seed", 1),
        ("model.trainable", "lora"),
        ("train.lr_schedule", "cosine"),
    ]:
        with pytest.raises(ConfigError, match=rf"cannot resume with a changed {field}\b"):
            train(tiny(run_copy, **{field: value}), resume=run_copy)
    # the command line: the run's own config.yaml plus --set, refused in one line with exit status 2
    assert main(["train", "--resume", str(run_copy), "--set", "workflow.name=voting"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "workflow.name" in err and "'single' -> 'voting'" in err
    after = {p.relative_to(run_copy): p.read_bytes() for p in run_copy.rglob("*") if p.is_file()}
    assert after == before  # config.yaml included: the run is still resumable as it was
    with pytest.raises(ConfigError, match="train.steps: 1 is below the step 2"):
        train(tiny(run_copy, **{"train.steps": 1}), resume=run_copy)


def test_a_changed_lr_is_used_from_the_resume_on(run_copy, tmp_path):
    """Step 3 from the same checkpoint, with the same data and gradients: Adam's update scales with the lr, so
    a tenth of the lr must move the weights a tenth as far (the optimizer state restored from the checkpoint
    carries the old lr; it must not win)."""
    other = Path(shutil.copytree(run_copy, tmp_path / "other"))
    same = {"train.steps": 3, "eval.at_end": False, "eval.every": 0}
    train(tiny(run_copy, **same), resume=run_copy)
    train(tiny(other, **same, **{"train.lr": 1e-5}), resume=other)
    w2 = load_checkpoint(run_copy, 2)[1]["policy/shared"]
    a, b = load_checkpoint(run_copy, 3)[1]["policy/shared"], load_checkpoint(other, 3)[1]["policy/shared"]
    moved_a = torch.cat([(a[k] - w2[k]).flatten() for k in w2])
    moved_b = torch.cat([(b[k] - w2[k]).flatten() for k in w2])
    assert moved_a.abs().max() > 1e-5
    torch.testing.assert_close(moved_b, moved_a / 10, rtol=1e-3, atol=2e-7)
    assert rows(other / "metrics.jsonl")[-1]["policy/shared/lr"] == 1e-5
    assert rows(run_copy / "metrics.jsonl")[-1]["policy/shared/lr"] == 1e-4
    assert rows(other / "resumes.jsonl")[-1]["changed"] == {
        "eval.at_end": [True, False],
        "eval.every": [1, 0],
        "train.lr": [1e-4, 1e-5],
        "train.steps": [2, 3],
    }
    assert load_config(other / "config.yaml").train.lr == 1e-5


# ---------------------------------------------------------------------------------------------------------
# Run directories


def test_a_new_run_into_an_existing_run_is_refused_unless_overwriting(finished_run, tmp_path):
    run_dir = Path(shutil.copytree(finished_run, tmp_path / "run"))
    before = sorted(p.name for p in run_dir.iterdir())
    with pytest.raises(RunDirError, match=rf"run dir {run_dir} already holds a run .*--overwrite"):
        train(tiny(run_dir))
    assert sorted(p.name for p in run_dir.iterdir()) == before
    (run_dir / "notes.txt").write_text("mine")
    assert prepare_new_run_dir(run_dir, overwrite=True) == []
    assert sorted(p.name for p in run_dir.iterdir()) == ["notes.txt"]  # only the run's own files go
    assert main(["train", "--run-dir", str(run_dir), "--resume", str(run_dir), "--overwrite"]) == 2


def test_unusable_run_dirs_fail_before_the_model_loads(tmp_path, monkeypatch, capsys):
    def no_model(cfg):
        raise AssertionError("the model was loaded before the run dir was checked")

    monkeypatch.setattr(grpo, "build_runtime", no_model)
    a_file = tmp_path / "taken"
    a_file.write_text("")
    with pytest.raises(RunDirError, match=f"run dir {a_file}: exists and is not a directory"):
        train(tiny(a_file))
    with pytest.raises(RunDirError, match=f"run dir {a_file / 'run'}: cannot be created"):
        train(tiny(a_file / "run"))
    with pytest.raises(RunDirError, match=f"cannot resume {tmp_path}: it has no config.yaml"):
        train(tiny(tmp_path), resume=tmp_path)
    assert main(["train", "--run-dir", str(a_file), "--set", "logging.progress=false"]) == 2
    assert capsys.readouterr().err.strip() == f"rolecast: error: run dir {a_file}: exists and is not a directory"


def test_a_read_only_run_dir_is_named(tmp_path, monkeypatch):
    import os

    if os.geteuid() == 0:
        pytest.skip("root writes into read-only directories")
    monkeypatch.setattr(grpo, "build_runtime", lambda cfg: pytest.fail("model loaded"))
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(RunDirError, match=f"run dir {ro}: cannot be written"):
            train(tiny(ro))
    finally:
        ro.chmod(0o700)


def test_a_run_that_fails_before_its_first_step_leaves_no_run_dir(tmp_path, monkeypatch):
    run_dir = tmp_path / "new" / "run"  # parents are created, and removed again with it
    with pytest.raises(ValueError, match="nosuchsplit"):  # fails after the model loaded
        train(tiny(run_dir, **{"task.train_split": "nosuchsplit"}))
    assert not (tmp_path / "new").exists()

    def crash(*args, **kwargs):
        raise RuntimeError("the sandbox crashed")

    # fails in the base evaluation, after config.yaml was written: still nothing left; an existing empty
    # directory the user made stays
    from rolecast.runtime import Runtime

    monkeypatch.setattr(Runtime, "evaluate", crash)
    run_dir.mkdir(parents=True)
    with pytest.raises(RuntimeError, match="sandbox crashed"):
        train(tiny(run_dir))
    assert run_dir.is_dir() and list(run_dir.iterdir()) == []
