"""Profiles: one config field, `profile: NAME`, that sets a declared list of options.

A profile is the one place that says what a mode of running changes. `profile: study` (every file of
configs/study/) sets each option in which the reference study's code (XHMY/marl-llm-workflows) behaves otherwise
than rolecast's defaults: its graders, its problem texts and prompts, its parsers, its Eval-Opt conversation, its
groups, its schedule and clock, its update's fine print, its evaluation. Each is an ordinary option of the config,
typed where it lives (a field of config/schema.py; a task option, typed by the task's constructor; a workflow
option, typed by the workflow's signature), and read by its layer like any other: no layer knows the profile.

A profile only fills in: an option the config file or an override sets keeps that value (so each is overridable),
and `rolecast config show` prints the result with the options the profile set. An option applies where its scope
says (a task family, a task, a workflow); a task option applies to `task.options` and to each
`eval.extra_sets` entry whose task is in scope. Filling in needs the task's prompt family, so it runs where the
config is loaded (`config.load.validate_config`); a run directory's config.yaml holds the filled-in values.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["PROFILES", "STUDY", "ProfileName", "Profile", "ProfileOption", "Scope", "apply_profile", "rename_former"]

ProfileName = Literal["study"]
TASK_OPTION = "task.options."


@dataclass(frozen=True)
class Scope:
    """Where an option applies; an empty tuple: anywhere."""

    families: tuple[str, ...] = ()  # the task's prompt family (math, code, testbed)
    tasks: tuple[str, ...] = ()  # the task's name
    workflows: tuple[str, ...] = ()  # the workflow's name

    def covers(self, family: str | None, task: str | None, workflow: str | None) -> bool:
        return (
            (not self.families or family in self.families)
            and (not self.tasks or task in self.tasks)
            and (not self.workflows or workflow in self.workflows)
        )


@dataclass(frozen=True)
class ProfileOption:
    field: str  # a dotted config field, e.g. "workflow.options.parsers"
    value: Any
    switches: str  # the behaviour it selects, and the module that reads it
    scope: Scope = Scope()
    # set where the profile keeps rolecast's value on purpose: the reference's value and why not (the docs' row)
    kept: str = ""


@dataclass(frozen=True)
class Profile:
    name: str
    about: str
    options: tuple[ProfileOption, ...]

    def for_run(self, family: str | None, task: str | None, workflow: str | None) -> list[ProfileOption]:
        """The options that apply to a run of `task` (of prompt `family`) with `workflow`: the first in scope for
        each field."""
        out: dict[str, ProfileOption] = {}
        for opt in self.options:
            if opt.field not in out and opt.scope.covers(family, task, workflow):
                out[opt.field] = opt
        return list(out.values())


_MATH, _CODE = ("math",), ("code",)
_PARSING_WORKFLOWS = ("voting", "eval_opt", "orch_workers")

STUDY = Profile(
    "study",
    "the reference study's code (XHMY/marl-llm-workflows, rLLM v0.2.1 with verl); docs/study_recipe.md",
    (
        # tasks: grading and the problem text
        ProfileOption(
            "task.options.grader",
            "rllm",
            "rLLM's graders, rule for rule: math rewards/math_study.py (last \\boxed{} only, compared as written), "
            "code rewards/code_study.py (its LiveCodeBench runner, in the sandbox); read by tasks/datasets.py",
            Scope(families=_MATH + _CODE),
        ),
        ProfileOption(
            "task.options.reliability_guard",
            False,
            "the runner's reliability_guard (quit() and some os functions None); read by rewards/code.py",
            Scope(families=_CODE),
            kept="the study applies it: quit() fails there, a defect not reproduced (docs/study_recipe.md)",
        ),
        ProfileOption(
            "task.options.function_call_tests",
            "stdin",
            "PrimeIntellect's function-call tests run as stdin programs, as the runner reads them; tasks/datasets.py",
            Scope(tasks=("deepcoder",)),
        ),
        ProfileOption(
            "task.options.problem_format",
            "livecodebench",
            "each problem wrapped in LiveCodeBench's prompt, byte for byte; tasks/datasets.py",
            Scope(tasks=("deepcoder",)),
        ),
        ProfileOption(
            "task.options.instruction",
            "keep",
            "DAPO's 'Answer:' instruction kept in the problem text; tasks/datasets.py",
            Scope(tasks=("dapo_math",)),
        ),
        # prompts (the first in scope wins: the single agent's math prompt is its own)
        ProfileOption(
            "task.prompts",
            "study/math_single.yaml",
            "the study's single-agent math prompt (prompt.json multi_agent_math_prompts); prompts/",
            Scope(families=_MATH, workflows=("single",)),
        ),
        ProfileOption(
            "task.prompts",
            "study/math.yaml",
            "the study's math prompts (prompt.json); prompts/",
            Scope(families=_MATH),
        ),
        ProfileOption(
            "task.prompts", "study/code.yaml", "the study's code prompts (prompt.json); prompts/", Scope(families=_CODE)
        ),
        # workflows
        ProfileOption(
            "workflow.options.parsers",
            "first_match",
            "the study's parsers of picks, verdicts and strategies (the first match decides); workflows/parsing.py",
            Scope(workflows=_PARSING_WORKFLOWS),
        ),
        ProfileOption(
            "workflow.options.conversation",
            "replies",
            "Eval-Opt's shared history without its evaluate/refine prompts; workflows/eval_opt.py",
            Scope(workflows=("eval_opt",)),
        ),
        # rollout and rewards
        ProfileOption(
            "rollout.ended_reward",
            "committed",
            "turns of an episode a prompt cap ended keep the rewards they were committed with; scoring.py",
        ),
        # the schedule, the clock, the data order, the groups
        ProfileOption(
            "train.lr_schedule", "verl_cosine", "verl's warmup from 0 and unclamped cosine; training/schedule.py"
        ),
        ProfileOption(
            "train.lr_clock",
            "step",
            "each policy's own lr clock; training/optimizer.py",
            kept="the study very likely shares one clock over the roles (role_update); docs/study_recipe.md (8)",
        ),
        ProfileOption(
            "train.update_schedule", "per_minibatch", "one optimizer step per mini-batch per role; training/update.py"
        ),
        ProfileOption("train.sampling", "epoch", "a shuffled pass over the training set; training/sampling.py"),
        ProfileOption(
            "train.group_by",
            "instance",
            "each voter position its own GRPO group (math Voting names its voters generator0..2); core/episode.py",
            Scope(families=_MATH, workflows=("voting",)),
        ),
        # the update's fine print, as verl runs it
        ProfileOption("train.loss_agg", "seq-mean-token-mean", "verl's loss_agg_mode; objectives/losses.py"),
        ProfileOption(
            "train.old_logprobs", "trainer", "old log-probs recomputed before the update; training/old_logprobs.py"
        ),
        ProfileOption("train.dual_clip", 3.0, "verl's clip_ratio_c; objectives/losses.py"),
        ProfileOption(
            "train.minibatch_scale", "nominal", "a mini-batch's loss x rows / mini_batch_size; training/update.py"
        ),
        ProfileOption(
            "train.singleton_advantage", "reward", "a group of one: verl's mean 0, std 1; objectives/advantages.py"
        ),
        # evaluation
        ProfileOption("eval.protocol", "study", "sampled pass@1 at temperature 0.7; config/schema.py, evaluation.py"),
        ProfileOption("eval.top_p", 1.0, "val_kwargs top-p 1.0, sent with every request; evaluation.py"),
    ),
)

PROFILES: dict[str, Profile] = {p.name: p for p in (STUDY,)}

# Values that were named after the study before its profile existed: a config or a run directory's config.yaml
# written then still loads, each read as the value that now names the same behaviour.
FORMER_VALUES: dict[str, dict[Any, Any]] = {
    "task.options.grader": {"study": "rllm"},
    "workflow.options.parsers": {"study": "first_match"},
    "workflow.options.conversation": {"study": "replies"},
    "rollout.ended_reward": {"study": "committed"},
}


def _node(data: dict[str, Any], dotted: str, create: bool) -> tuple[dict[str, Any] | None, str]:
    """The mapping that holds `dotted`'s last key (created on the way when `create`), and that key; None when a
    section on the way is absent or not a mapping (malformed: left to validation to report)."""
    keys = dotted.split(".")
    node: Any = data
    for k in keys[:-1]:
        if not isinstance(node, dict):
            return None, keys[-1]
        if k not in node and create:
            node[k] = {}
        node = node.get(k)
    return (node if isinstance(node, dict) else None), keys[-1]


def _option_homes(data: dict[str, Any]) -> list[tuple[Any, dict[str, Any]]]:
    """(task name, its options mapping) of the run's task and of each extra evaluation set, where present."""
    homes = []
    task = data.get("task")
    if isinstance(task, dict) and isinstance(task.get("options"), dict):
        homes.append((task.get("name"), task["options"]))
    sets = data.get("eval", {}).get("extra_sets") if isinstance(data.get("eval"), dict) else None
    for s in sets if isinstance(sets, list) else []:
        if isinstance(s, dict) and isinstance(s.get("options"), dict):
            homes.append((s.get("task"), s["options"]))
    return homes


def rename_former(data: dict[str, Any]) -> dict[str, Any]:
    """Raw config data with every value of `FORMER_VALUES` replaced by its present name (a copy when one is)."""
    if not any(_former_at(data)):
        return data
    data = copy.deepcopy(data)
    for node, key, present in _former_at(data):
        node[key] = present
    return data


def _former_at(data: dict[str, Any]) -> list[tuple[dict[str, Any], str, Any]]:
    """(the mapping, its key, the present name) of each former value in `data`."""
    found = []
    for field, renames in FORMER_VALUES.items():
        if field.startswith(TASK_OPTION):
            places = [(home, field[len(TASK_OPTION) :]) for _, home in _option_homes(data)]
        else:
            node, key = _node(data, field, create=False)
            places = [] if node is None else [(node, key)]
        found += [(node, key, renames[node[key]]) for node, key in places if _renamed(node.get(key), renames)]
    return found


def _renamed(value: Any, renames: dict[Any, Any]) -> bool:
    return isinstance(value, str) and value in renames


def apply_profile(
    data: dict[str, Any], task_name: str, workflow_name: str, family_of: Callable[[str], str | None]
) -> tuple[dict[str, Any], list[str]]:
    """Raw config data with its profile's options filled in where the data does not set them, and the dotted
    fields filled. `task_name` / `workflow_name`: the run's (the data's, or the schema's defaults); `family_of`
    gives a task name's prompt family (None when the name is not a task: the task check reports it). Data without a
    profile is returned as it is; an unknown profile is left to the schema to report."""
    name = data.get("profile")
    profile = PROFILES.get(name) if isinstance(name, str) else None
    if profile is None:
        return data, []
    data = copy.deepcopy(data)
    filled = []
    for opt in profile.for_run(family_of(task_name), task_name, workflow_name):
        node, key = _node(data, opt.field, create=True)
        if node is not None and key not in node:
            node[key] = copy.deepcopy(opt.value)
            filled.append(opt.field)
    _fill_extra_sets(data, profile, family_of, workflow_name)
    return data, filled


def _fill_extra_sets(
    data: dict[str, Any], profile: Profile, family_of: Callable[[str], str | None], workflow: str
) -> None:
    """The profile's task options on each extra evaluation set whose task is in their scope."""
    sets = data.get("eval", {}).get("extra_sets") if isinstance(data.get("eval"), dict) else None
    for s in sets if isinstance(sets, list) else []:
        if not isinstance(s, dict) or not isinstance(s.get("task"), str):
            continue
        options = s.setdefault("options", {})
        if not isinstance(options, dict):
            continue
        for opt in profile.for_run(family_of(s["task"]), s["task"], workflow):
            if opt.field.startswith(TASK_OPTION):
                options.setdefault(opt.field[len(TASK_OPTION) :], copy.deepcopy(opt.value))
