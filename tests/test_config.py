"""Config loading: typed, strict, and errors that name the field and the file."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch

from rolecast.cli import main
from rolecast.config.load import load_config, validate_config
from rolecast.core.errors import ConfigError
from rolecast.prompts import PromptFileError


def write(tmp_path, text):
    p = tmp_path / "run.yaml"
    p.write_text(text)
    return p


def test_default_config_is_the_testbed_recipe():
    cfg = load_config()
    assert cfg.model.path == "testbed" and cfg.task.name == "testbed" and cfg.workflow.name == "single"


def test_study_defaults_when_a_config_is_silent(tmp_path):
    cfg = load_config(write(tmp_path, "task: {name: testbed}\n"))
    t = cfg.train
    assert (t.group_size, t.lr, t.kl_coef, t.clip_low, t.clip_high, t.max_grad_norm) == (8, 2e-5, 0.0, 0.2, 0.28, 1.0)
    assert cfg.rollout.temperature == 0.7 and (cfg.model.lora.r, cfg.model.lora.alpha) == (64, 32)


def test_misspelled_key_names_field_and_file(tmp_path):
    p = write(tmp_path, "train:\n  learning_rate: 0.1\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert "train.learning_rate" in str(e.value) and str(p) in str(e.value) and "unknown field" in str(e.value)


def test_unknown_field_suggests_the_closest_valid_name(tmp_path):
    """The closest field of the same section (difflib), with its full path; nothing when none is close."""
    with pytest.raises(ConfigError) as e:
        load_config(None, {"train.lrr": 1e-4}, {"train.lrr": "--set train.lrr=1e-4"})
    assert str(e.value) == "--set train.lrr=1e-4: train.lrr: unknown field; did you mean train.lr?"
    p = write(
        tmp_path, "trian:\n  steps: 3\nmodel:\n  lora: {rank: 4}\neval:\n  extra_sets: [{name: a, task: x, splt: t}]\n"
    )
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert "trian: unknown field; did you mean train?" in str(e.value)
    assert "model.lora.rank: unknown field (misspelled?)" in str(e.value)  # 'rank' is not close enough to 'r'
    assert "eval.extra_sets.0.splt: unknown field; did you mean eval.extra_sets.0.split?" in str(e.value)
    with pytest.raises(ConfigError) as e:
        load_config(None, {"train.zzzz": 1})
    assert str(e.value).endswith("train.zzzz: unknown field (misspelled?)")


def test_wrong_type_names_field(tmp_path):
    p = write(tmp_path, "train:\n  group_size: eight\n")
    with pytest.raises(ConfigError, match=r"train\.group_size"):
        load_config(p)


def test_overrides_apply_and_are_validated(tmp_path):
    p = write(tmp_path, "train: {steps: 5}\n")
    assert load_config(p, {"train.steps": 7, "routing.sharing": "isolated"}).train.steps == 7
    with pytest.raises(ConfigError, match=r"rollout\.temperature"):
        load_config(p, {"rollout.temperature": -1})


@pytest.mark.parametrize(
    "yaml_text,needle",
    [
        ("workflow: {name: voting}\nrouting: {sharing: map, map: {generator: g}}\n", "aggregator"),
        ("workflow: {name: voting, options: {voters: 3}}\n", "voters"),
        ("workflow: {name: tree_search}\n", "tree_search"),
        ("train: {advantage: ppo_gae}\n", "ppo_gae"),
    ],
)
def test_cross_checks_fail_before_any_model_loads(tmp_path, yaml_text, needle):
    with pytest.raises(ConfigError, match=needle):
        load_config(write(tmp_path, yaml_text + "model: {path: /nonexistent/model}\n"))


def test_role_without_a_prompt_is_rejected(tmp_path):
    wf = tmp_path / "courtroom.py"
    wf.write_text(
        "from rolecast.workflows import workflow\n"
        "@workflow('courtroom', prompts={'lawyer': ['solve'], 'witness': ['cross_examine']})\n"
        "async def courtroom(ctx):\n"
        "    return (await ctx.call('lawyer', ctx.prompt('solve'))).text\n"
    )
    p = write(tmp_path, f"workflow: {{name: '{wf}:courtroom'}}\nmodel: {{path: /nonexistent}}\n")
    # the prompt file lacks it, not the config: the error names the prompt file (tests/test_workflow_declarations.py)
    with pytest.raises(PromptFileError, match=r"prompts/testbed\.yaml: no prompt\(s\) \['cross_examine'\].*'witness'"):
        load_config(p)


def test_cli_reports_config_errors_with_exit_code_2(tmp_path, capsys):
    p = write(tmp_path, "rollout: {max_new_tokes: 5}\n")
    assert main(["train", "--config", str(p)]) == 2
    err = capsys.readouterr().err
    assert "rollout.max_new_tokes" in err and str(p) in err


def test_unknown_local_model_path_is_rejected_at_load(tmp_path):
    with pytest.raises(ConfigError, match=r"model\.path.*/nonexistent/model.*does not exist"):
        load_config(write(tmp_path, "model: {path: /nonexistent/model}\n"))
    assert load_config(write(tmp_path, "model: {path: Qwen/Qwen3-0.6B}\n")).model.path == "Qwen/Qwen3-0.6B"


# ---------------------------------------------------------------------------------------------------------
# The schema is pure: building a RunConfig reads nothing; validation is the step that looks


NAMES_ELSEWHERE = {
    "model": {"device": "cuda", "path": "/nonexistent/model"},
    "task": {"name": "no_such_task", "prompts": "/nonexistent/prompts.yaml"},
    "workflow": {"name": "no_such_workflow"},
}


def test_a_run_config_for_another_machine_builds_here_and_reads_nothing():
    """A config for a CUDA machine, naming a task, a workflow, a prompt file and a model none of which exist here,
    builds on this CPU-only machine: no file is opened and no process started while it is built (an audit hook,
    in a fresh interpreter, records every open; no monkeypatching)."""
    code = textwrap.dedent(
        f"""
        import json, sys
        from rolecast.config.schema import RunConfig

        seen = []
        watched = ("open", "os.listdir", "os.scandir", "subprocess.Popen", "ctypes.dlopen", "socket.connect")
        sys.addaudithook(lambda event, args: seen.append([event, str(args)[:200]]) if event in watched else None)
        cfg = RunConfig.model_validate({NAMES_ELSEWHERE!r})
        print(json.dumps([cfg.model.device, cfg.model.path, cfg.task.name, cfg.workflow.name, seen]))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    device, path, task, workflow, seen = json.loads(out.stdout.splitlines()[-1])
    assert (device, path, task, workflow) == ("cuda", "/nonexistent/model", "no_such_task", "no_such_workflow")
    assert seen == []


def test_validation_is_what_refuses_what_this_machine_lacks():
    """The same config, checked: the first problem is named by its field; with the names fixed, the model path;
    then the device (this machine has no CUDA); `environment=False` leaves this machine's checks out."""
    with pytest.raises(ConfigError, match=r"^<config>: workflow\.name: unknown workflow 'no_such_workflow'"):
        validate_config(NAMES_ELSEWHERE)
    with pytest.raises(ConfigError, match=r"^<config>: task\.name: unknown task 'no_such_task'"):
        validate_config({**NAMES_ELSEWHERE, "workflow": {"name": "single"}})
    fixed = {**NAMES_ELSEWHERE, "workflow": {"name": "single"}, "task": {"name": "testbed"}}
    with pytest.raises(ConfigError, match=r"^<config>: model\.path: '/nonexistent/model' does not exist"):
        validate_config(fixed)
    assert validate_config(fixed, environment=False).model.device == "cuda"
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match=r"^<config>: model\.device: 'cuda' asked for, but this machine has no"):
            validate_config({**fixed, "model": {"device": "cuda"}})


def test_an_override_names_itself_in_a_check_of_what_it_names():
    """A cross-field check's error names the override that set the field, as a type error does."""
    with pytest.raises(ConfigError) as e:
        load_config(None, {"train.advantage": "grpp"}, {"train.advantage": "--set train.advantage=grpp"})
    assert str(e.value).startswith("--set train.advantage=grpp: train.advantage: unknown "), str(e.value)
    assert "did you mean 'grpo'?" in str(e.value)


def test_a_users_attribution_function_must_load_when_the_config_is_checked(tmp_path):
    """A "module:function" attribution that does not load fails at the check, not at the first step."""
    with pytest.raises(ConfigError, match=r"train\.attribution: .*no module named 'no_such_module_rc'"):
        load_config(None, {"train.attribution": "no_such_module_rc:fn"})
    with pytest.raises(ConfigError, match=r"train\.attribution: unknown .*'rol' \(did you mean 'role'\?\)"):
        load_config(None, {"train.attribution": "rol"})
