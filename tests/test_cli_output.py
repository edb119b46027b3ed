"""What the command line prints when things go right (issue 34): no third-party bar or warning from `export`, a
progress bar that says when it evaluates, the final `base -> final` line after a resume, `rolecast config show`,
`rolecast env`, and a top-level help written for users."""

from __future__ import annotations

import io
import os
import platform
import re
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest
import torch
import yaml
from rich.console import Console as RichConsole
from test_trainer import tiny_config

from rolecast.cli import main
from rolecast.config import CONFIG_DIR
from rolecast.config.load import load_config
from rolecast.config.schema import dump_config
from rolecast.core.rundir import read_jsonl
from rolecast.envinfo import OPTIONAL, EnvInfo, Gpu, TaskData, format_env, missing_features, task_data
from rolecast.training.grpo import train
from rolecast.training.sinks import Console

# what third-party noise looks like: a tqdm bar ("Loading weights:  50%|#####     | 23/46 [00:00<...]"), a
# warnings.warn line ("...py:3312: FutureWarning: ..."), transformers' own logger lines
NOISE = re.compile(r"\d+%\||it/s\]|Warning: |warnings\.warn|Loading weights|Writing model shards|^\s*\[transformers\]")


def rolecast_cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rolecast.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="module")
def lora_run(tiny_model_dir, tmp_path_factory):
    """A 2-step Voting / Isolated LoRA run (two adapters), checkpoints at steps 1 and 2."""
    run = tmp_path_factory.mktemp("cli_output") / "run"
    train(tiny_config(tiny_model_dir, run, **{"workflow.name": "voting", "routing.sharing": "isolated"}))
    return run


# --- export: no noise, a portable adapter config ------------------------------------------------------------------


def test_export_prints_its_own_lines_and_nothing_else(lora_run, tmp_path):
    """The export loads the base with transformers and writes PEFT adapters: their "Loading weights" bar and PEFT's
    FutureWarning (is_gradient_checkpointing) used to fill the output."""
    out = tmp_path / "export"
    done = rolecast_cli("export", str(lora_run), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert done.stdout.splitlines() == [
        f"aggregator: PEFT LoRA adapter in {out / 'aggregator'} (roles: aggregator)",
        f"generator: PEFT LoRA adapter in {out / 'generator'} (roles: generator)",
        f"exported step 2 of {lora_run} to {out} (README.md there says how to load each)",
    ]
    verbose = rolecast_cli("--verbose", "export", str(lora_run), "--out", str(tmp_path / "verbose"))
    assert verbose.returncode == 0 and NOISE.search(verbose.stderr)  # what --verbose lets through (the check bites)


def test_export_records_the_base_as_the_config_names_it(lora_run, tiny_model_dir, tmp_path):
    """An adapter's base_model_name_or_path is what AutoPeftModel loads: the run's model.path as written (here the
    fixture's directory), or --base-model; never a path this machine resolved a name to."""
    import json

    for extra, want in (([], tiny_model_dir), (["--base-model", "Qwen/Qwen3-0.6B"], "Qwen/Qwen3-0.6B")):
        out = tmp_path / f"export{len(extra)}"
        assert main(["export", str(lora_run), "--out", str(out), *extra]) == 0
        for pid in ("generator", "aggregator"):
            assert json.loads((out / pid / "adapter_config.json").read_text())["base_model_name_or_path"] == want
        assert json.loads((out / "export.json").read_text())["base_model"] == want
        assert f'base_dir = "{want}"' in (out / "README.md").read_text()


def test_export_of_the_embedded_testbed_names_it_not_its_path(tmp_path):
    """The shipped testbed's directory is inside the installed package (an absolute path into one clone): the adapter
    records the name `testbed`, and the README says how rolecast turns it into a directory."""
    import json

    run = tmp_path / "run"
    overrides = {
        "run_dir": str(run),
        "model.trainable": "lora",
        "model.lora.r": 4,
        "train.steps": 1,
        "train.problems_per_step": 2,
        "train.group_size": 2,
        "rollout.max_new_tokens": 8,
        "eval.at_start": False,
        "eval.at_end": False,
        "logging.progress": False,
    }
    train(load_config(None, overrides))
    out = tmp_path / "export"
    assert main(["export", str(run), "--out", str(out)]) == 0
    config = json.loads((out / "shared" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "testbed"
    readme = (out / "README.md").read_text()
    assert 'base_dir = resolve_model_path("testbed")' in readme
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from rolecast.policies.models import resolve_model_path

    # the README's recipe loads it
    model = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(resolve_model_path("testbed")), out / "shared"
    )
    assert model.peft_config["default"].base_model_name_or_path == "testbed"


# --- train: the progress bar, the label of the SE, the resumed run's last line --------------------------------------


def test_the_bar_says_when_it_evaluates():
    """On a terminal the bar showed `step 0/3 ... reward nan eta -:--:--` through the 15-20 s base evaluation."""
    console = Console()
    buffer = io.StringIO()
    console.rich = RichConsole(file=buffer, force_terminal=True, width=150)
    bar = console.progress(3)
    progress = bar._progress
    assert progress is not None

    def shown() -> str:
        return str(progress.tasks[0].fields["status"])

    assert shown() == "starting"
    with console.evaluating("the base model"):
        assert shown() == "evaluating the base model"
        progress.refresh()
        assert "evaluating the base model" in buffer.getvalue()
    assert shown() == "starting"
    bar.advance(1, 0.5)
    assert shown() == "reward 0.500"
    with console.evaluating("at step 1"):
        assert shown() == "evaluating at step 1"
    assert shown() == "reward 0.500"
    bar.close()
    assert "nan" not in buffer.getvalue()


def test_a_resumed_run_prints_base_and_final(tiny_model_dir, tmp_path, capsys):
    run = tmp_path / "run"
    flags = ["--model", tiny_model_dir, "--trainable", "lora", "--threads", "2", "--run-dir", str(run)]
    small = ["--set", "train.problems_per_step=2", "--set", "train.group_size=2", "--set", "eval.size=2"]
    small += ["--set", "rollout.max_new_tokens=4", "--set", "logging.progress=false", "--set", "model.lora.r=4"]
    assert main(["train", "--steps", "2", "--stop-after", "1", *flags, *small]) == 0
    first = capsys.readouterr().out
    assert "accuracy: base" not in first  # the session stopped before the final evaluation
    assert main(["train", "--resume", str(run)]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    rows = read_jsonl(run / "eval.jsonl")
    base, final = (next(r for r in rows if r["tag"] == tag)["pass@1"] for tag in ("base", "final"))
    assert last.startswith(f"accuracy: base {base:.3f} -> final {final:.3f} (")
    assert last.endswith(f"; run dir: {run})")


# --- rolecast config show ---------------------------------------------------------------------------------------------


def test_config_show_prints_the_resolved_config_and_runs_nothing(tmp_path):
    recipe = CONFIG_DIR / "testbed.yaml"
    done = rolecast_cli(
        "config", "show", "-c", str(recipe), "--workflow", "voting", "--set", "train.lr=3e-4", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    expected = load_config(recipe, {"workflow.name": "voting", "train.lr": 3e-4})
    assert done.stdout == dump_config(expected)  # what the run's config.yaml would hold
    shown = yaml.safe_load(done.stdout)
    assert shown["workflow"]["name"] == "voting" and shown["train"]["lr"] == 3e-4
    assert list(tmp_path.iterdir()) == []  # no run directory, nothing written


def test_config_show_validates(capsys):
    assert main(["config", "show", "--set", "train.lrr=1"]) == 2
    assert (
        capsys.readouterr().err
        == "rolecast: error: --set train.lrr=1: train.lrr: unknown field; did you mean train.lr?\n"
    )


# --- the study recipes with vLLM rollouts -------------------------------------------------------------------------


STUDY_RECIPES = sorted((CONFIG_DIR / "study").glob("*_*.yaml"))


@pytest.mark.parametrize("recipe", STUDY_RECIPES, ids=lambda p: p.name)
def test_every_study_recipe_validates_with_vllm_rollouts(recipe):
    """One flag (`--backend vllm`, i.e. rollout.backend) switches a study recipe to vLLM rollouts. vLLM does not
    install here, so the definition is checked (the backend's limits included: LoRA policies, no seed_per_prompt);
    where it runs, the machine's checks (vllm installed, the GPU) are `rolecast env` and the run's own."""
    cfg = load_config(recipe, {"rollout.backend": "vllm"}, {"rollout.backend": "--backend vllm"}, environment=False)
    assert cfg.rollout.backend == "vllm" and cfg.model.trainable == "lora"
    assert load_config(recipe, environment=False).rollout.backend == "hf"  # the default stays the HF backend


@pytest.mark.skipif(find_spec("vllm") is not None, reason="vllm is installed here")
def test_without_vllm_the_switch_says_what_to_install(capsys):
    """On this machine (no vllm) the full check names the flag and the install command, in one line."""
    recipe = str(CONFIG_DIR / "study" / "math_voting.yaml")
    assert main(["config", "show", "-c", recipe, "--model", "testbed", "--backend", "vllm"]) == 2
    assert capsys.readouterr().err == (
        "rolecast: error: --backend vllm: rollout.backend: needs the vllm package, which is not installed: "
        "pip install 'rolecast[vllm]'\n"
    )


def test_vllm_backend_limits_are_said_at_config_load(capsys):
    recipe = str(STUDY_RECIPES[0])
    assert main(["config", "show", "-c", recipe, "--backend", "vllm", "--trainable", "full"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rolecast: error: --backend vllm: rollout.backend: vllm serves LoRA policies")
    assert len(err.splitlines()) == 1


# --- rolecast env ---------------------------------------------------------------------------------------------------


def test_env_describes_this_machine_on_one_screen(tmp_path):
    data = tmp_path / "data"
    (data / "gsm8k").mkdir(parents=True)
    (data / "gsm8k" / "test.jsonl").write_text("{}\n")
    (data / "aime2024").mkdir()
    (data / "aime2024" / "test.jsonl").write_text("{}\n")
    done = rolecast_cli("env", env={"ROLECAST_DATA_DIR": str(data)})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) <= 30 and max(map(len, lines)) <= 160, done.stdout  # one screen
    text = done.stdout
    assert f"python    {platform.python_version()} ({sys.executable})" in text
    assert f"torch     {torch.__version__}" in text
    from rolecast.sandbox import sandbox_status

    mode, _ = sandbox_status()
    assert re.search(rf"^sandbox   {mode}", text, re.M)
    assert f"data:     {data} (ROLECAST_DATA_DIR)" in text
    assert re.search(r"tasks with their files: aime2024$", text, re.M)
    assert "some files missing: gsm8k (no gsm8k/train.jsonl)" in text  # its test split is there, not its train split
    assert re.search(r"no files: dapo_math, deepcoder, humaneval, math, math500, mbpp, mbpp_sanitized$", text, re.M)
    if not torch.cuda.is_available():
        assert "GPU: none that torch can use" in text
    if find_spec("vllm") is None:
        assert "vllm: not installed; needed for rollout.backend: vllm" in text


def machine(**changes) -> EnvInfo:
    """A hand-built machine: everything present unless changed."""
    base = {
        "rolecast": "0.1.0",
        "python": "3.11.7",
        "executable": "/venv/bin/python",
        "system": "Linux 6 x86_64",
        "torch": "2.13.0+cu128",
        "cuda_build": "12.8",
        "gpus": (Gpu(0, "NVIDIA H200", 139.8),),
        "nvidia_driver": True,
        "versions": {d: "1.0" for d in ("transformers", "peft", "tokenizers", "pydantic", *(o[0] for o in OPTIONAL))},
        "bwrap": "bubblewrap 0.8.0 at /usr/bin/bwrap",
        "sandbox_mode": "bwrap",
        "sandbox_why": "",
        "data_dir": Path("/"),  # a directory that exists
        "data_dir_source": "ROLECAST_DATA_DIR",
        "task_data": (TaskData("gsm8k", ()),),
        "cpu_count": 16,
        "usable_cpus": 16,
        "torch_threads": 16,
    }
    return EnvInfo(**{**base, **changes})


def test_a_ready_gpu_machine_misses_nothing():
    text = format_env(machine())
    assert "GPUs      cuda:0 NVIDIA H200 (140 GiB)" in text
    assert "torch     2.13.0+cu128, CUDA 12.8" in text
    assert text.endswith("missing:  nothing")
    assert missing_features(machine()) == []


def test_what_is_missing_says_what_it_costs_and_how_to_get_it():
    cpu_torch_on_a_gpu_machine = machine(gpus=(), cuda_build=None, torch="2.13.0+cpu")
    assert missing_features(cpu_torch_on_a_gpu_machine) == [
        "GPU: this machine has an NVIDIA driver (nvidia-smi) but torch is a CPU build; install torch's CUDA wheel "
        "(docs/gpu.md)"
    ]
    no_vllm = machine(versions={**machine().versions, "vllm": None})
    assert missing_features(no_vllm) == [
        "vllm: not installed; needed for rollout.backend: vllm (rollouts on a vLLM engine; a CUDA GPU, docs/gpu.md): "
        "pip install 'rolecast[vllm]'"
    ]
    assert "vllm -" in format_env(no_vllm)
    fallback = missing_features(machine(sandbox_mode="fallback", sandbox_why="bubblewrap (bwrap) is not installed"))
    assert len(fallback) == 1 and fallback[0].startswith("sandbox: bubblewrap (bwrap) is not installed; code tasks")
    no_data = missing_features(machine(data_dir=Path("/nonexistent/data")))
    assert no_data == [
        "data: /nonexistent/data does not exist; the dataset tasks need their files there or ROLECAST_DATA_DIR "
        "(the testbed tasks need none)"
    ]


def test_task_data_accepts_a_jsonl_beside_a_missing_parquet(tmp_path):
    (tmp_path / "dapo_math").mkdir()
    (tmp_path / "dapo_math" / "train.jsonl").write_text("{}\n")
    found = {t.task: t.missing for t in task_data(tmp_path)}
    assert found["dapo_math"] == ()  # the task reads train.jsonl when train.parquet is absent
    assert found["math500"] == ("math500/test.jsonl",)
    assert "testbed" not in found  # embedded: no files


# --- --help -------------------------------------------------------------------------------------------------------


def test_top_level_help_speaks_to_users():
    done = rolecast_cli("--help")
    assert done.returncode == 0
    text = done.stdout
    assert "commands.py" not in text and "per subcommand" not in text
    for command in ("train", "eval", "export", "analyze", "sweep", "report", "config", "env", "testbed", "model"):
        assert re.search(rf"^\s+{command}\s+\S", text, re.M), command
    assert "rolecast train" in text and "rolecast env" in text


def test_a_reader_that_closes_the_pipe_ends_the_command_quietly():
    """`rolecast ... | head`: the pipe closes before the command writes (it is still importing), so its first write
    fails; it stops with 141, as a shell reports SIGPIPE, and says nothing (before: a BrokenPipeError at exit)."""
    matrix = CONFIG_DIR / "testbed_matrix.yaml"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rolecast.cli", "sweep", str(matrix), "--dry-run"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141
    assert stderr == ""
