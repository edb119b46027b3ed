"""The command line's own surface: --version, and each subcommand's help listing what it uses."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib.metadata import version

import pytest

import rolecast
from rolecast.cli import main


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rolecast.cli", *args], capture_output=True, text=True, timeout=120)


def flags(help_text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", help_text))


def test_version_prints_the_installed_version():
    out = run_cli("--version")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"rolecast {rolecast.__version__}"
    assert rolecast.__version__ == version("rolecast")  # the package's metadata and the module agree


def test_eval_help_lists_only_what_evaluation_uses():
    out = run_cli("eval", "--help")
    assert out.returncode == 0, out.stderr
    assert flags(out.stdout) == {
        "--help",
        "--config",
        "--workflow",
        "--sharing",
        "--task",
        "--model",
        "--backend",
        "--seed",
        "--threads",
        "--set",
        "--checkpoint",
        "--every",
        "--n",
        "--size",
        "--out",
    }
    # training-only settings are not offered (they were, and did nothing)
    for flag in ("--steps", "--run-dir", "--trainable", "--resume", "--overwrite", "--stop-after"):
        assert flag not in out.stdout


def test_train_help_keeps_the_training_flags():
    out = run_cli("train", "--help")
    assert {"--steps", "--run-dir", "--trainable", "--resume", "--overwrite", "--stop-after"} <= flags(out.stdout)


def test_an_unknown_flag_is_reported_with_the_subcommands_usage(capsys):
    """`rolecast train --bogus` shows train's usage, which names its flags; argparse alone showed the top-level
    usage ("rolecast [-h] ... COMMAND"), which names none of them."""
    with pytest.raises(SystemExit) as stop:
        main(["train", "--steps", "2", "--bogus", "x"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: rolecast train ")
    assert "--stop-after" in err  # train's own usage line
    assert err.rstrip().endswith("rolecast train: error: unrecognized arguments: --bogus x")
    with pytest.raises(SystemExit):
        main(["eval", "--steps", "2"])  # --steps is training-only: eval's own usage reports it
    assert "usage: rolecast eval " in capsys.readouterr().err


def test_threads_flag_sets_the_runs_threads_and_the_recipe_takes_one():
    from rolecast.cli import build_parser
    from rolecast.commands import _overrides
    from rolecast.config.load import load_config

    for command in ("train", "eval"):
        overrides, origins = _overrides(build_parser().parse_args([command, "--threads", "3"]))
        assert overrides == {"threads": 3} and origins == {"threads": "--threads 3"}
        assert load_config(None, overrides, origins).threads == 3
    assert load_config(None).threads == 1  # the embedded recipe: one thread (docs/benchmarks.md, "Threads")


def test_eval_of_a_checkpoint_reads_the_runs_own_config(tiny_model_dir, tmp_path, capsys):
    """`rolecast eval --checkpoint RUN_DIR` with no --config evaluates the run's workflow and policies (a voting /
    isolated run's two adapters), not the embedded default's single shared policy."""
    from test_trainer import tiny_config

    from rolecast.training.grpo import train

    run = tmp_path / "run"
    train(tiny_config(tiny_model_dir, run, **{"workflow.name": "voting", "routing.sharing": "isolated"}))
    out = tmp_path / "eval.jsonl"
    assert main(["eval", "--checkpoint", str(run), "--size", "2", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["tag"], r["step"], r["workflow"], r["sharing"]) for r in rows] == [
        ("checkpoint", 2, "voting", "isolated")
    ]
    assert main(["eval", "--checkpoint", str(tmp_path / "nothing")]) == 2
    assert "is not a rolecast run directory" in capsys.readouterr().err
