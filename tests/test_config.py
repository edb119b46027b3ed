"""Config loading: typed, strict, and errors that name the field and the file."""

from __future__ import annotations

import pytest

from rolecast.cli import main
from rolecast.config import load_config
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
