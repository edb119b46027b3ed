"""Day-one mistakes on the command line (issue 34): each gives one line on stderr, naming the path, flag or field at
fault and why, and a non-zero exit status; none a traceback. Each case runs `rolecast.cli.main` as the console
script does; an unexpected exception (the old tracebacks) fails the test. One tiny run per module serves them all."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from test_trainer import tiny_config

from rolecast.cli import main
from rolecast.config import CONFIG_DIR
from rolecast.training.grpo import train

PROC = Path("/proc")
needs_proc = pytest.mark.skipif(not (PROC / "self").is_dir(), reason="needs Linux's /proc (a path nothing can write)")


@pytest.fixture(scope="module")
def run(tiny_model_dir, tmp_path_factory):
    """A 2-step LoRA run with checkpoints at steps 1 and 2."""
    run = tmp_path_factory.mktemp("cli_errors") / "run"
    train(tiny_config(tiny_model_dir, run, **{"eval.size": 2, "checkpoint.keep_last": 2}))  # keep both
    return run


@pytest.fixture(scope="module")
def run_without_checkpoints(run, tmp_path_factory):
    """A run stopped before its first checkpoint: its config.yaml and logs, no checkpoints/."""
    bare = tmp_path_factory.mktemp("no_checkpoints") / "run"
    shutil.copytree(run, bare, ignore=shutil.ignore_patterns("checkpoints"))
    return bare


def one_line_error(capsys, *argv: str, status: int = 2) -> str:
    """Run `rolecast ARGV`; assert the exit status and that stderr is one `rolecast: error:` line; return it."""
    assert main(list(argv)) == status
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("rolecast: error: "), lines[0]
    return lines[0]


# --- tracebacks that are now one line ---------------------------------------------------------------------------


def test_eval_of_a_run_without_checkpoints(capsys, run_without_checkpoints):
    line = one_line_error(capsys, "eval", "--checkpoint", str(run_without_checkpoints))
    assert f"--checkpoint {run_without_checkpoints}: no complete checkpoint under" in line
    assert "leave out --checkpoint" in line  # how to evaluate the base model instead


def test_eval_every_that_matches_no_checkpoint(capsys, run):
    line = one_line_error(capsys, "eval", "--checkpoint", str(run), "--every", "7")
    assert line.endswith(f"--every 7: no checkpoint of {run} is at a multiple of 7 (it has [1, 2])")


@needs_proc
def test_export_to_an_unwritable_out(capsys, run):
    line = one_line_error(capsys, "export", str(run), "--out", "/proc/x")
    assert line.startswith("rolecast: error: --out /proc/x: /proc cannot be written: ")
    assert not Path("/proc/x.tmp-export").exists()


def test_report_into_a_file_as_if_it_were_a_directory(capsys, run, tmp_path):
    some_file = tmp_path / "some_file"
    some_file.write_text("mine")
    line = one_line_error(capsys, "report", str(run), "--out", str(some_file / "report.html"))
    assert line == f"rolecast: error: --out {some_file / 'report.html'}: {some_file} is a file, not a directory"
    assert some_file.read_text() == "mine"


@needs_proc
def test_report_under_proc(capsys, run):
    line = one_line_error(capsys, "report", str(run), "--out", "/proc/x/report.html")
    assert line.startswith(
        "rolecast: error: --out /proc/x/report.html: /proc/x cannot be written (/proc would hold it): "
    )


def test_report_out_that_is_a_directory(capsys, run, tmp_path):
    line = one_line_error(capsys, "report", str(run), "--out", str(tmp_path))
    assert f"--out {tmp_path} is a directory; give the HTML file to write" in line


@needs_proc
def test_analyze_a_directory_that_cannot_be_written(capsys):
    line = one_line_error(capsys, "analyze", "/proc/self")
    assert line.startswith("rolecast: error: analyze /proc/self: /proc/self/analysis cannot be written")


def test_eval_out_that_is_a_directory(capsys, run, tmp_path):
    line = one_line_error(capsys, "eval", "--checkpoint", str(run), "--out", str(tmp_path))
    assert f"--out {tmp_path} is a directory; give the file to append the rows to" in line


@pytest.mark.parametrize("command", ["train", "eval"])
def test_model_that_is_an_empty_directory(capsys, tmp_path, command):
    empty = tmp_path / "model"
    empty.mkdir()
    line = one_line_error(capsys, command, "--model", str(empty))
    assert f"--model {empty}: model.path: '{empty}' is an empty directory; a model directory holds config.json" in line
    assert "sentencepiece" not in line


@pytest.mark.parametrize("command", ["sweep", "plan"])
def test_a_matrix_or_plan_that_is_not_yaml_is_one_line_naming_file_line_and_column(capsys, tmp_path, command):
    """The matrix and the analysis plan read YAML as a run config does (before: the parser's five-line dump)."""
    matrix = tmp_path / "m.yaml"
    if command == "sweep":
        matrix.write_text("axes: {seed: [0]}\nset:\n\ttrain.steps: 3\n")
        where, what = (
            f"{matrix}, line 3, column 1",
            "a tab character; YAML indents with spaces only (replace the tab with spaces)",
        )
    else:
        (tmp_path / "plan.yaml").write_text("title: t\ncliff: [\n  alpha: 0.05\nseeds: {}\n")
        matrix.write_text("axes: {seed: [0]}\nplan: plan.yaml\n")
        where, what = f"{tmp_path / 'plan.yaml'}, line 4, column 6", "not valid YAML (expected ',' or ']', but got ':')"
    line = one_line_error(capsys, "sweep", str(matrix), "--dry-run")
    assert line.startswith("rolecast: error: ") and f"{where}: {what}" in line and line.endswith(what)


def test_model_directory_without_weights_or_tokenizer(capsys, tmp_path):
    (tmp_path / "config.json").write_text("{}")
    line = one_line_error(capsys, "train", "--model", str(tmp_path))
    assert f"'{tmp_path}' is not a model directory: it has no weights and no tokenizer;" in line


def test_yaml_tab_indent(capsys, tmp_path):
    recipe = tmp_path / "run.yaml"
    recipe.write_text("train:\n  steps: 3\n\tlr: 0.001\n")
    line = one_line_error(capsys, "train", "-c", str(recipe))
    assert line == (
        f"rolecast: error: {recipe}, line 3, column 1: a tab character; YAML indents with spaces only "
        "(replace the tab with spaces)"
    )


def test_other_yaml_errors_are_one_line_with_the_line(capsys, tmp_path):
    recipe = tmp_path / "run.yaml"
    recipe.write_text("train:\n  steps: [3\n")
    line = one_line_error(capsys, "config", "show", "-c", str(recipe))
    assert line.startswith(f"rolecast: error: {recipe}, line 3, column 1: not valid YAML (expected ',' or ']'")


def test_study_recipe_whose_training_set_is_not_on_disk(capsys, tiny_model_dir, tmp_path, monkeypatch):
    """The recipe's message (where to put DAPO-Math-17k) without the 15-line traceback; the model is a local one,
    so nothing reaches for the hub, and the data is read before the model loads."""
    monkeypatch.setenv("ROLECAST_DATA_DIR", str(tmp_path / "data"))
    recipe = str(CONFIG_DIR / "study" / "math_voting.yaml")
    run_dir = tmp_path / "run"
    line = one_line_error(capsys, "train", "-c", recipe, "--model", tiny_model_dir, "--run-dir", str(run_dir))
    assert f"dapo_math: {tmp_path / 'data' / 'dapo_math' / 'train.parquet'} not found (offline)" in line
    assert not run_dir.exists()  # a new run that failed before its first step leaves nothing


def test_task_flag_on_a_recipe_resets_the_recipes_task_options(capsys, caplog):
    """`--task gsm8k` on the DAPO-Math recipe: its task.options (language, test_size, ...) were for dapo_math and
    made gsm8k fail with "unexpected keyword argument"; now they are dropped, with one warning naming them and how
    to set the new task's; `--set task.options.X` applies after. The recipe's profile still applies to the new
    task: gsm8k is graded by the study's grader."""
    recipe = str(CONFIG_DIR / "study" / "math_voting.yaml")
    assert main(["config", "show", "-c", recipe, "--task", "gsm8k"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["task"]["name"] == "gsm8k" and shown["task"]["options"] == {"grader": "rllm"}
    assert shown["workflow"]["options"] == {"n": 3, "parsers": "first_match"}  # the rest of the recipe stays
    warning = [r.getMessage() for r in caplog.records if r.name == "rolecast.config.load"]
    assert len(warning) == 1
    assert warning[0].startswith(f"--task gsm8k: task.options of {recipe} were for task dapo_math")
    assert "language='en'" in warning[0] and "--set task.options.NAME=VALUE" in warning[0]
    assert main(["config", "show", "-c", recipe, "--task", "gsm8k", "--set", "task.options.limit=5"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["task"]["options"] == {"limit": 5, "grader": "rllm"}
    caplog.clear()
    assert main(["config", "show", "-c", recipe, "--task", "dapo_math"]) == 0  # the same task keeps its options
    assert yaml.safe_load(capsys.readouterr().out)["task"]["options"]["instruction"] == "keep"
    assert not [r for r in caplog.records if r.name == "rolecast.config.load"]


# --- flags that were accepted silently ----------------------------------------------------------------------------


def test_eval_every_without_checkpoint(capsys):
    line = one_line_error(capsys, "eval", "--every", "2")
    assert line == "rolecast: error: --every 2 picks checkpoints of a run: give the run with --checkpoint RUN_DIR"


@pytest.mark.parametrize(
    ("flag", "value", "what"),
    [
        ("--size", "0", "the number of eval problems"),
        ("--n", "0", "the number of samples per problem"),
        ("--size", "-3", "the number of eval problems"),
    ],
)
def test_eval_counts_below_one(capsys, flag, value, what):
    line = one_line_error(capsys, "eval", flag, value)
    assert line == f"rolecast: error: {flag} {value}: {what} must be at least 1"


def test_eval_every_zero(capsys, run):
    line = one_line_error(capsys, "eval", "--checkpoint", str(run), "--every", "0")
    assert line == "rolecast: error: --every 0: the checkpoint step interval must be at least 1"


@pytest.mark.parametrize("command", ["train", "eval", "config"])
def test_threads_zero(capsys, command):
    argv = [command, "show"] if command == "config" else [command]
    line = one_line_error(capsys, *argv, "--threads", "0")
    assert line == "rolecast: error: --threads 0: threads: must be at least 1 (got 0); leave it out for torch's default"


def test_threads_below_one_in_a_recipe(capsys, tmp_path):
    recipe = tmp_path / "run.yaml"
    recipe.write_text("threads: -2\n")
    line = one_line_error(capsys, "config", "show", "-c", str(recipe))
    assert line == f"rolecast: error: {recipe}: threads: must be at least 1 (got -2); leave it out for torch's default"


def test_stop_after_zero(capsys, tmp_path):
    line = one_line_error(capsys, "train", "--stop-after", "0", "--run-dir", str(tmp_path / "run"))
    assert line == "rolecast: error: --stop-after 0: the number of steps to run before stopping must be at least 1"
    assert not (tmp_path / "run").exists()  # refused before anything was created


def test_the_api_refuses_stop_after_zero(tiny_model_dir, tmp_path):
    from rolecast import train as api_train
    from rolecast.core.errors import ConfigError

    with pytest.raises(ConfigError, match="stop_after=0: .* must be at least 1"):
        api_train(tiny_config(tiny_model_dir, tmp_path / "run"), stop_after=0)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("action", ["info", "rollouts"])
def test_testbed_info_or_rollouts_of_a_directory_that_is_no_build(capsys, tmp_path, action):
    line = one_line_error(capsys, "testbed", action, str(tmp_path))
    assert line == (
        f"rolecast: error: {tmp_path} is not a testbed build: it has no build_info.json "
        "(`rolecast testbed build --out DIR` writes one)"
    )
