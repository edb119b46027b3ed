"""The study profile (config/profiles.py): one declared list of the options the study's mode switches, filled into a
config where it does not set them, each overridable; and no layer outside config/ tests for the mode's name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from rolecast.cli import main
from rolecast.config import CONFIG_DIR, RunConfig
from rolecast.config.load import load_config
from rolecast.config.profiles import FORMER_VALUES, STUDY, TASK_OPTION
from rolecast.config.schema import dump_config, parse_config, resume_changes
from rolecast.tasks import TASKS, make_task
from rolecast.workflows import get_workflow

SRC = Path(__file__).resolve().parents[1] / "src" / "rolecast"
RECIPE = CONFIG_DIR / "study" / "math_voting.yaml"
# a registered task of each family, for the options scoped by family
FAMILY_TASK = {"math": "dapo_math", "code": "deepcoder", "testbed": "testbed"}


def _schema_field(dotted: str) -> bool:
    model: type = RunConfig
    for key in dotted.split("."):
        fields = getattr(model, "model_fields", {})
        if key not in fields:
            return False
        model = fields[key].annotation  # type: ignore[assignment]
    return True


@pytest.mark.parametrize("opt", STUDY.options, ids=[f"{o.field}={o.value}" for o in STUDY.options])
def test_every_option_is_a_typed_option_its_layer_accepts(opt):
    """A schema field (its type checks the value), a task option the tasks in scope take, or a workflow option the
    workflows in scope take (their signatures type them)."""
    if opt.field.startswith(TASK_OPTION):
        tasks = opt.scope.tasks or tuple(FAMILY_TASK[f] for f in opt.scope.families)
        assert tasks, opt
        for name in tasks:
            assert TASKS.get(name) is not None and TASKS.get(name).family in (opt.scope.families or {"math", "code"})
            make_task(name, **{opt.field[len(TASK_OPTION) :]: opt.value})  # raises on an unknown or bad option
    elif opt.field.startswith("workflow.options."):
        assert opt.scope.workflows, opt
        for wf in opt.scope.workflows:
            assert get_workflow(wf).check_options({opt.field.split(".")[-1]: opt.value})
    else:
        assert _schema_field(opt.field), opt.field
        section, name = opt.field.split(".")
        assert getattr(getattr(RunConfig.model_validate({section: {name: opt.value}}), section), name) == opt.value
    assert opt.switches


def test_the_profile_fills_in_each_option_and_an_explicit_value_wins(capsys):
    cfg = load_config(RECIPE, environment=False)
    assert cfg.profile == "study"
    assert cfg.task.options["grader"] == "rllm" and cfg.task.options["instruction"] == "keep"
    assert cfg.task.prompts == "study/math.yaml" and cfg.workflow.options["parsers"] == "first_match"
    assert (cfg.train.group_by, cfg.train.loss_agg, cfg.rollout.ended_reward) == (
        "instance",
        "seq-mean-token-mean",
        "committed",
    )
    assert cfg.eval.extra_sets[0].options == {"grader": "rllm"}  # the extra set's task is in the grader's scope
    over = load_config(RECIPE, {"workflow.options.parsers": "rolecast", "train.group_by": "role"}, environment=False)
    assert (over.workflow.options["parsers"], over.train.group_by) == ("rolecast", "role")
    assert main(["config", "show", "-c", str(RECIPE), "--set", "train.group_by=role"]) == 0
    out = capsys.readouterr().out
    assert yaml.safe_load(out)["train"]["group_by"] == "role"
    notes = [line for line in out.splitlines() if line.startswith("#")]
    assert notes[0].startswith("# profile study:")
    assert any("train.group_by: instance -> 'role' here (set by the config)" in n for n in notes)
    assert any(n.startswith("#   workflow.options.parsers: first_match  (") for n in notes)


def test_scope_follows_the_task_and_the_workflow(tmp_path):
    """On the testbed (no grader option, its own prompts) the task options and prompts stay out; single has no
    parsers; the train and eval options apply to any run."""
    bare = tmp_path / "bare.yaml"
    bare.write_text("profile: study\ntask: {name: testbed}\nworkflow: {name: single}\n")
    cfg = load_config(bare, environment=False)
    assert "grader" not in cfg.task.options and cfg.task.prompts is None and "parsers" not in cfg.workflow.options
    assert (cfg.train.lr_schedule, cfg.eval.protocol, cfg.train.group_by) == ("verl_cosine", "study", "role")
    code = load_config(CONFIG_DIR / "study" / "code_voting.yaml", environment=False)
    assert code.train.group_by == "role" and code.task.options["function_call_tests"] == "stdin"
    single = load_config(CONFIG_DIR / "study" / "math_single.yaml", environment=False)
    assert single.task.prompts == "study/math_single.yaml" and "parsers" not in single.workflow.options


def test_a_run_directory_holds_the_resolved_options_and_resumes():
    cfg = load_config(RECIPE, environment=False)
    saved = parse_config(yaml.safe_load(dump_config(cfg)))  # what training/run_dir.py reads back
    assert saved == cfg
    # a run written before the profile: the same options spelled out, with the values then named `study`
    old = yaml.safe_load(dump_config(cfg))
    old["profile"] = None
    old["task"]["options"]["grader"] = "study"
    old["workflow"]["options"]["parsers"] = "study"
    old["rollout"]["ended_reward"] = "study"
    old["eval"]["extra_sets"][0]["options"]["grader"] = "study"
    assert resume_changes(parse_config(old), cfg) == {}


def test_former_study_values_read_as_their_present_names():
    cfg = load_config(
        None,
        {
            "workflow.name": "eval_opt",
            "workflow.options.parsers": "study",
            "workflow.options.conversation": "study",
            "rollout.ended_reward": "study",
        },
        environment=False,
    )
    assert (cfg.workflow.options["parsers"], cfg.workflow.options["conversation"]) == ("first_match", "replies")
    assert cfg.rollout.ended_reward == "committed"
    assert {f: dict(v) for f, v in FORMER_VALUES.items()} == {
        "task.options.grader": {"study": "rllm"},
        "workflow.options.parsers": {"study": "first_match"},
        "workflow.options.conversation": {"study": "replies"},
        "rollout.ended_reward": {"study": "committed"},
    }


def _compares_with(node: ast.AST, name: str) -> bool:
    def names(n: ast.AST) -> bool:
        if isinstance(n, ast.Constant):
            return n.value == name
        if isinstance(n, (ast.Tuple, ast.List, ast.Set)):
            return any(names(e) for e in n.elts)
        return False

    return isinstance(node, ast.Compare) and any(names(n) for n in [node.left, *node.comparators])


def test_no_layer_outside_config_compares_with_the_modes_name():
    """The mode's name is config/'s business: anywhere else a comparison with "study" (==, !=, in) is a layer
    testing for the mode instead of reading its option. At 879f012 there were 16 such comparisons in 6 modules."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path.relative_to(SRC).parts[0] == "config":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if _compares_with(node, "study"):
                found.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert found == []
    assert _compares_with(ast.parse('x == "study"').body[0].value, "study")  # the check sees one
    assert _compares_with(ast.parse('x not in ("a", "study")').body[0].value, "study")
