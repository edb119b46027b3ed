"""A workflow that breaks its declaration fails in one line naming what to fix, under every routing:
a role it calls but did not declare (found in its source at config load, or at its first call when the role is
computed), and a prompt it declares that the prompt files lack (blamed on the prompt files, not the config)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rolecast.cli import main
from rolecast.config.load import load_config
from rolecast.core.errors import UserError
from rolecast.policies.router import build_routing
from rolecast.prompts import PromptBook, PromptFileError
from rolecast.rollout.engine import RolloutStats, run_episodes
from rolecast.rollout.scripted import ScriptedBackend
from rolecast.tasks import make_task
from rolecast.workflows import WorkflowError, get_workflow

WORKFLOWS = """
from rolecast.workflows import workflow

CRITIC = "critic"


@workflow("literal_critic", prompts={"solver": ["solve"]})
async def literal_critic(ctx):
    first = await ctx.call("solver", ctx.prompt("solve"))
    again = await ctx.call(
        "critic", ctx.prompt("solve")
    )
    return again.text or first.text


@workflow("computed_critic", prompts={"solver": ["solve"], "judge": ["aggregate"]})
async def computed_critic(ctx):
    first = await ctx.call("solver", ctx.prompt("solve"))
    again = await ctx.call(CRITIC, ctx.prompt("solve"))
    return again.text or first.text


@workflow("needs_a_missing_prompt", prompts={"solver": ["solve"], "critic": ["critique"]})
async def needs_a_missing_prompt(ctx):
    return (await ctx.call("solver", ctx.prompt("solve"))).text
"""


@pytest.fixture
def wf_file(tmp_path):
    path = tmp_path / "my_workflows.py"
    path.write_text(WORKFLOWS)
    return path


@pytest.mark.parametrize("sharing", ["shared", "isolated"])
def test_a_literal_undeclared_role_fails_at_config_load_naming_it_and_the_declared_ones(wf_file, sharing):
    with pytest.raises(WorkflowError) as e:
        load_config(None, {"workflow.name": f"{wf_file}:literal_critic", "routing.sharing": sharing})
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(f"workflow 'literal_critic' ({wf_file}:10) calls role 'critic', which it does not declare")
    assert "its declared roles are ['solver']" in msg


@pytest.mark.parametrize("sharing", ["shared", "isolated", "map"])
def test_a_computed_undeclared_role_fails_at_its_first_call_before_any_generation(wf_file, sharing):
    spec = get_workflow(f"{wf_file}:computed_critic")
    spec.check_calls()  # the role is a variable: the source check cannot see it
    mapping = {"*": "everyone"} if sharing == "map" else None
    backend, stats = ScriptedBackend(lambda pid, messages: r"\boxed{5}"), RolloutStats()
    with pytest.raises(WorkflowError) as e:
        run_episodes(
            spec,
            list(make_task("testbed").problems("test"))[:2],
            2,
            task=make_task("testbed"),
            prompts=PromptBook("testbed"),
            router=build_routing(spec.roles, sharing, mapping),
            backend=backend,
            stats=stats,
        )
    assert str(e.value) == (
        "workflow 'computed_critic' calls role 'critic', which it does not declare; its declared roles are "
        "['solver', 'judge'] (declare every role in @workflow(..., prompts={role: [prompt names]}))"
    )
    # the solver's wave ran; the critic's call was refused before it reached the backend
    assert [[r.role for r in b] for b in backend.batches] == [["solver"] * 4]


@pytest.mark.parametrize("sharing", ["shared", "isolated"])
def test_the_command_line_prints_one_line_for_an_undeclared_role(wf_file, tiny_model_dir, tmp_path, capsys, sharing):
    """Through `rolecast train` on a real (tiny) model: exit status 2 and one line, no traceback, no run left."""
    run_dir = tmp_path / "run"
    args = ["train", "--model", tiny_model_dir, "--sharing", sharing, "--run-dir", str(run_dir), "--steps", "1"]
    args += ["--set", "eval.size=2", "--set", "logging.progress=false", "--set", "rollout.max_new_tokens=4"]
    assert main([*args, "--workflow", f"{wf_file}:computed_critic"]) == 2
    err = capsys.readouterr().err
    ours = [line for line in err.splitlines() if line.startswith("rolecast:")]
    assert len(ours) == 1 and "Traceback" not in err
    assert ours[0].startswith("rolecast: error: workflow 'computed_critic' calls role 'critic', which it does not")
    assert not (run_dir / "metrics.jsonl").exists()
    assert main([*args, "--workflow", f"{wf_file}:literal_critic"]) == 2  # found at config load: nothing loads
    err = capsys.readouterr().err
    assert err.startswith("rolecast: error: workflow 'literal_critic' (") and err.count("\n") == 1


def test_a_missing_prompt_is_blamed_on_the_prompt_file_not_the_config(wf_file, tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(f"workflow:\n  name: {wf_file}:needs_a_missing_prompt\n")
    with pytest.raises(PromptFileError) as e:
        load_config(config)
    msg = str(e.value)
    shipped = Path(__file__).resolve().parents[1] / "src" / "rolecast" / "prompts" / "testbed.yaml"
    assert msg.startswith(f"{shipped.relative_to(Path.cwd()) if shipped.is_relative_to(Path.cwd()) else shipped}: ")
    assert "no prompt(s) ['critique'], which workflow 'needs_a_missing_prompt' declares for role 'critic'" in msg
    assert str(config) not in msg
    # with a task.prompts file, both files are named (the prompt is in neither)
    extra = tmp_path / "my_prompts.yaml"
    extra.write_text("solve:\n  user: 'solve this: {{ problem }}'\n")
    with pytest.raises(PromptFileError, match=rf"testbed\.yaml and {extra}: no prompt\(s\) \['critique'\]"):
        load_config(config, {"task.prompts": str(extra)})
    # added to an override file, the same workflow loads
    fixed = tmp_path / "fixed_prompts.yaml"
    fixed.write_text("critique:\n  user: 'critique: {{ problem }}'\n")
    assert load_config(config, {"task.prompts": str(fixed)}).workflow.name.endswith(":needs_a_missing_prompt")


def test_rendering_a_prompt_the_files_lack_names_the_files():
    with pytest.raises(PromptFileError, match=r"prompts/testbed\.yaml: no prompt 'critique'; the prompts are \["):
        PromptBook("testbed").render("critique", problem="1 + 1")
    assert issubclass(PromptFileError, UserError) and issubclass(WorkflowError, UserError)


def test_shipped_workflows_and_the_example_declare_every_role_they_call():
    from rolecast.workflows.api import literal_call_roles

    shipped = [get_workflow(name) for name in ("single", "voting", "eval_opt", "orch_workers")]
    example = get_workflow(f"{Path(__file__).resolve().parents[1] / 'examples' / 'debate.py'}:debate")
    for spec in [*shipped, example]:
        spec.check_calls()
        assert {role for role, _ in literal_call_roles(spec.fn)} <= set(spec.roles)
    assert {role for role, _ in literal_call_roles(shipped[1].fn)} == {"generator", "aggregator"}


def test_the_source_scan_reads_nested_calls_and_keyword_roles():
    from rolecast.workflows.api import literal_call_roles

    async def wf(c, n=2):
        async def helper():
            return await c.call(role="b", messages=[])

        other = object()
        await c.call("a", [])
        await other.call("not_a_role", [])
        return await helper()

    assert sorted(r for r, _ in literal_call_roles(wf)) == ["a", "b"]


def test_a_second_workflow_under_a_taken_name_is_refused(tmp_path):
    """Two workflows claiming one name would silently swap which one a config runs; the second is refused with
    the first's origin, while re-importing the same file (a user's workflow loaded twice) is not a clash."""
    from rolecast.workflows import workflow

    with pytest.raises(ValueError, match=r"workflow 'voting' is already registered \(by rolecast\.workflows\.voting"):

        @workflow("voting", prompts={"solver": ["solve"]})
        async def voting(ctx):
            return None

    assert get_workflow("voting").fn.__module__ == "rolecast.workflows.voting"
    ref = f"{Path(__file__).resolve().parents[1] / 'examples' / 'debate.py'}:debate"
    assert get_workflow(ref).name == get_workflow(ref).name == "debate"
