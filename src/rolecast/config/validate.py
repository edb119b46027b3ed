"""The checks of a run config against what it names, run by `load_config` and before a run starts; building a
`RunConfig` (config/schema.py) checks values only and touches no disk or device.

Two kinds, so a config can be checked where it is written and again where it runs:
- the definition (`check_definition`): the workflow and its options, routing, the task and its options, the
  prompts the workflow declares, the update's registries (advantage estimator, loss aggregation, attribution),
  extra evaluation sets, interventions, rollback signals and precursors. The same on every machine.
- this machine (`check_environment`): the model path (a local path exists, a hub id is cached when the hub is
  off), the device (cuda needs a CUDA GPU here) and the optional packages switched-on features need. A sweep
  lists cells for other machines without them and runs them where a cell is about to run.

Problems with one field raise `FieldError`, so `load_config` can name the file or the override it came from.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rolecast.config.schema import InterventionSettings, RunConfig
from rolecast.core.devices import check_device
from rolecast.core.errors import (
    ConfigError,
    DeviceError,
    FieldError,
    MissingPackageError,
    PromptFileError,
    UserError,
    require,
)
from rolecast.core.registry import Registry
from rolecast.diagnostics.precursors import (
    DERIVED_EACH_STEP,
    MEASURED_EACH_STEP,
    MEASURED_PERIODICALLY,
    resolve_precursor,
)
from rolecast.diagnostics.warnings import GRADIENT_SIGNALS, SIGNALS
from rolecast.objectives.advantages import ADVANTAGES, SINGLETON_REWARD_ESTIMATORS
from rolecast.objectives.losses import AGGREGATIONS
from rolecast.policies.models import PACKAGED_MODELS, model_dir_problem, offline_hub_problem
from rolecast.policies.router import routing_for
from rolecast.policies.shipped import MODEL_NAMES
from rolecast.prompts import PromptBook
from rolecast.scoring import resolve_attribution
from rolecast.tasks import TASKS, Task, make_task
from rolecast.workflows import WorkflowSpec, get_workflow

__all__ = ["OPTIONAL_PACKAGES", "check_definition", "check_environment", "check_model_path", "check_run_config"]


def check_run_config(cfg: RunConfig, *, environment: bool = True) -> None:
    """Everything that can be checked without loading a model; `environment=False` leaves out what depends on
    this machine (device, model path, installed packages). Coerces `workflow.options` to the types the
    workflow's function declares."""
    check_definition(cfg)
    if environment:
        check_environment(cfg)


def check_definition(cfg: RunConfig) -> None:
    """What the config names, checked the same on any machine: `FieldError` (or `PromptFileError` /
    `WorkflowError` naming the file at fault) for the first problem."""
    _check_threads(cfg)
    _check_sampling(cfg)
    spec = _check_workflow(cfg)
    task = _check_task(cfg)
    spec.check_calls()  # a literal ctx.call role the workflow did not declare (WorkflowError, naming its file)
    _check_prompts(cfg, spec, task)
    _check_update(cfg)
    _check_eval_sets(cfg, task.family)
    _check_interventions(cfg.interventions, spec.roles)
    _check_precursors(cfg)
    _check_rollback(cfg)
    _check_backend(cfg)


def _check_backend(cfg: RunConfig) -> None:
    """What the vLLM backend cannot do, said at config load rather than once the model has loaded."""
    if cfg.rollout.backend != "vllm":
        return
    if cfg.model.trainable != "lora":
        raise FieldError(
            "rollout.backend",
            "vllm serves LoRA policies (model.trainable: lora); full fine-tuning would need the trainer's weights "
            "pushed into the engine, which is not implemented: use rollout.backend: hf",
        )
    if cfg.rollout.seed_per_prompt:
        raise FieldError("rollout.seed_per_prompt", "an hf-backend option; vLLM seeds every request itself")


def check_environment(cfg: RunConfig) -> None:
    """What this machine must provide for the run: the model path, the device and the optional packages."""
    check_model_path(cfg.model.path)
    _check_device(cfg.model.device)
    _check_optional_packages(cfg)


# ---------------------------------------------------------------------------------------------------------
# The definition


def _check_threads(cfg: RunConfig) -> None:
    """A thread count is a positive number; 0 used to be accepted and recorded, and torch ran on its default."""
    for field, value in (("threads", cfg.threads), ("rollout.decode_threads", cfg.rollout.decode_threads)):
        if isinstance(value, int) and value < 1:
            raise FieldError(field, f"must be at least 1 (got {value}); leave it out for torch's default")


def _check_sampling(cfg: RunConfig) -> None:
    if cfg.rollout.temperature == 0 and cfg.train.steps > 0:
        raise FieldError(
            "rollout.temperature",
            "0 (greedy) cannot train: every completion of a GRPO group would be "
            "the same, so every advantage is 0 and nothing is learned. Sample with a temperature > 0 "
            "(e.g. 0.7 or 1.0); greedy evaluation is eval.protocol: greedy",
        )


def _check_workflow(cfg: RunConfig) -> WorkflowSpec:
    """The workflow's spec, its options coerced in place, its roles checked against routing and the role caps."""
    try:
        spec = get_workflow(cfg.workflow.name)
    except FieldError:
        raise
    except ValueError as e:
        raise FieldError("workflow.name", str(e)) from None
    # typed and range-checked from the workflow function's signature; coerced values replace the raw ones
    cfg.workflow.options = spec.check_options(cfg.workflow.options)
    routing_for(spec.roles, cfg.routing)  # as the runtime builds it (FieldError "routing: ...")
    unknown_roles = set(cfg.rollout.max_new_tokens_by_role) - set(spec.roles)
    if unknown_roles:
        raise FieldError(
            "rollout.max_new_tokens_by_role",
            f"workflow {spec.name!r} has no role(s) {sorted(unknown_roles)}; its roles are {spec.roles}",
        )
    bad_caps = {r: n for r, n in cfg.rollout.max_new_tokens_by_role.items() if not isinstance(n, int) or n <= 0}
    if bad_caps:
        raise FieldError("rollout.max_new_tokens_by_role", f"caps must be positive integers, got {bad_caps}")
    return spec


def _check_task(cfg: RunConfig) -> Task:
    """The run's task, built with its options (which is how a bad option or a missing data file shows)."""
    _check_name("task.name", cfg.task.name, TASKS)
    return _build_task("task", cfg.task.name, cfg.task.options)


def _build_task(field: str, name: str, options: dict[str, Any]) -> Task:
    try:
        return make_task(name, **options)
    except UserError:
        raise
    except (TypeError, ValueError) as e:  # an option the task does not take, or a bad value for one
        raise FieldError(f"{field}.options", f"task {name!r}: {e}") from None


def _check_prompts(cfg: RunConfig, spec: WorkflowSpec, task: Task) -> None:
    book = PromptBook(task.family, cfg.task.prompts)
    for role, names in spec.prompts.items():
        missing = [n for n in names if not book.has(n)]
        if missing:  # the prompt file lacks them, not the config: PromptFileError names the file(s)
            raise PromptFileError(
                f"{book.describe_files()}: no prompt(s) {missing}, which workflow {spec.name!r} declares for role "
                f"{role!r} (task {cfg.task.name!r}, prompt family {task.family!r}); add them to a task.prompts file"
            )


def _check_update(cfg: RunConfig) -> None:
    """The update's registered names and the combinations of its settings that have no meaning."""
    t = cfg.train
    _check_name("train.advantage", t.advantage, ADVANTAGES)
    _check_name("train.loss_agg", t.loss_agg, AGGREGATIONS)
    if t.singleton_advantage == "reward" and t.advantage not in SINGLETON_REWARD_ESTIMATORS:
        raise FieldError(
            "train.singleton_advantage",
            f"'reward' is verl's rule for {list(SINGLETON_REWARD_ESTIMATORS)}, not train.advantage {t.advantage!r}",
        )
    if t.minibatch_scale == "nominal" and t.update_schedule != "per_minibatch":
        raise FieldError(
            "train.minibatch_scale", "'nominal' scales mini-batches: it needs train.update_schedule: per_minibatch"
        )
    try:  # a registered name, or a user's function, which must load now rather than at the first step
        resolve_attribution(t.attribution, "train.attribution")
    except FieldError:
        raise
    except ConfigError as e:  # its message starts with the field; a FieldError carries it apart (for the origin)
        raise FieldError("train.attribution", str(e).removeprefix("train.attribution: ")) from None


def _check_name(field: str, name: str, registry: Registry[Any]) -> None:
    """`name` is registered, else a `FieldError` in the registry's words: the known names and the closest one."""
    if name not in registry:
        raise FieldError(field, str(registry.unknown(name)))


def _check_eval_sets(cfg: RunConfig, family: str) -> None:
    """Each extra evaluation set: a known task of the run's prompt family, a unique name."""
    names = [s.name for s in cfg.eval.extra_sets]
    for i, s in enumerate(cfg.eval.extra_sets):
        field = f"eval.extra_sets.{i}"
        if names.count(s.name) > 1:
            raise FieldError(f"{field}.name", f"{s.name!r} names two sets")
        _check_name(f"{field}.task", s.task, TASKS)
        extra = _build_task(field, s.task, s.options)
        if extra.family != family:
            raise FieldError(
                f"{field}.task", f"{s.task!r} is a {extra.family!r} task; the run's prompts are for {family!r} tasks"
            )


def _check_interventions(iv: InterventionSettings, roles: list[str]) -> None:
    for field, table in (
        ("kl_coef_by_role", iv.kl_coef_by_role),
        ("balance_shares", iv.balance_shares if isinstance(iv.balance_shares, dict) else {}),
    ):
        for role, value in table.items():
            if role not in roles:
                raise FieldError(f"interventions.{field}", f"{role!r} is not a role of this workflow; roles: {roles}")
            if not value >= 0 or (field == "balance_shares" and not value > 0):
                raise FieldError(
                    f"interventions.{field}.{role}",
                    f"must be {'> 0' if field == 'balance_shares' else '>= 0'}, got {value}",
                )


def _check_rollback(cfg: RunConfig) -> None:
    rb = cfg.interventions.rollback
    unknown = [s for s in rb.signals if s not in SIGNALS]
    if unknown:
        raise FieldError("interventions.rollback.signals", f"unknown signal(s) {unknown}; known: {list(SIGNALS)}")
    if (rb.signals or rb.precursors) and rb.action == "rollback" and cfg.checkpoint.every == 0:
        field = "interventions.rollback." + ("signals" if rb.signals else "precursors")
        raise FieldError(field, "a rollback needs checkpoints to go back to; set checkpoint.every > 0")
    needs_grads = [s for s in rb.signals if s in GRADIENT_SIGNALS and s != "grad_spike"]
    if needs_grads and cfg.diagnostics.gradients.every == 0:
        raise FieldError(
            "interventions.rollback.signals",
            f"{needs_grads} come from gradient diagnostics, which are off; set diagnostics.gradients.every > 0",
        )


def _check_precursors(cfg: RunConfig) -> None:
    """diagnostics.precursors.use: each precursor known (or a loadable function with its direction), named once
    and not one the loop computes anyway; interventions.rollback.precursors: each one this run computes."""
    pre, triggers = cfg.diagnostics.precursors, cfg.interventions.rollback.precursors
    # the built-in precursors (the logged ones are the measured ones: tests/test_precursors.py)
    computed = set(MEASURED_PERIODICALLY) | set(MEASURED_EACH_STEP) | set(DERIVED_EACH_STEP)
    for i, u in enumerate(pre.use):
        field = f"diagnostics.precursors.use[{i}]"
        if u.name in computed:
            raise FieldError(field, f"{u.name!r} is computed by the loop anyway (remove it from use)")
        try:
            p = resolve_precursor(u.name, u.direction)
        except ValueError as e:
            raise FieldError(field, str(e)) from None
        except ConfigError as e:
            raise FieldError(field, str(e).removeprefix("precursor: ")) from None
        if "/" in p.name or p.name in computed:
            raise FieldError(field, f"its name {p.name!r} must be one path segment and not a built-in precursor's")
    names = [u.name for u in pre.use]
    if len(set(names)) < len(names):
        raise FieldError("diagnostics.precursors.use", f"a precursor is named twice: {names}")
    if not triggers:
        return
    field = "interventions.rollback.precursors"
    if not pre.every:
        raise FieldError(field, "precursors are computed only with diagnostics.precursors.every > 0")
    for t in triggers:
        if t.name not in computed and t.name not in names:
            raise FieldError(
                field,
                f"{t.name!r} is not a precursor this run computes: {sorted(computed)} or one of "
                f"diagnostics.precursors.use",
            )
        if t.name in SIGNALS:
            raise FieldError(field, f"{t.name!r} is also an early-warning signal's name; list it under signals")
        if t.name == "head_update_ratio" and cfg.model.trainable == "lora":
            raise FieldError(field, "head_update_ratio is not logged with LoRA (the adapter leaves the head as it is)")
        if t.name in MEASURED_PERIODICALLY and pre.every > 1 and cfg.interventions.rollback.patience > 1:
            raise FieldError(
                field,
                f"{t.name} is measured every {pre.every} steps, so it cannot fire on "
                f"{cfg.interventions.rollback.patience} consecutive steps (interventions.rollback.patience)",
            )


# ---------------------------------------------------------------------------------------------------------
# This machine


def check_model_path(path: str) -> None:
    """A path that is plainly local must exist; a hub id ("org/name") must be in the local cache when the hub
    is switched off (HF_HUB_OFFLINE); whether it exists online can only be checked when loading."""
    if path in MODEL_NAMES or path in PACKAGED_MODELS:
        return
    looks_local = path.startswith(("/", "./", "../", "~")) or path.endswith(".gguf") or path.count("/") != 1
    if looks_local and not Path(path).expanduser().exists():
        raise FieldError(
            "model.path", f"{path!r} does not exist (a local path), and it is not a hub id of the form 'org/name'"
        )
    problem = model_dir_problem(path)  # a local directory that is empty or lacks a part
    if problem:
        raise FieldError("model.path", problem)
    if not looks_local and not Path(path).exists():
        problem = offline_hub_problem(path)
        if problem:
            raise FieldError("model.path", problem)


def _check_device(device: str) -> None:
    """cpu, auto, cuda or cuda:N, and a cuda device must exist on this machine (the message names the field)."""
    try:
        check_device(device)
    except DeviceError as e:
        raise FieldError("model.device", str(e)) from None


# Settings that need an optional package: (field, is it on, package import name, pyproject extra).
OPTIONAL_PACKAGES: tuple[tuple[str, Callable[[RunConfig], bool], str, str], ...] = (
    ("logging.tensorboard", lambda c: c.logging.tensorboard, "tensorboard", "tensorboard"),
    ("logging.wandb", lambda c: c.logging.wandb, "wandb", "wandb"),
    ("task.options.hub", lambda c: bool(c.task.options.get("hub")), "datasets", "hub"),
    ("rollout.backend", lambda c: c.rollout.backend == "vllm", "vllm", "vllm"),
)


def _check_optional_packages(cfg: RunConfig) -> None:
    """A switched-on feature whose package is missing fails here, before any model loads, not mid-run."""
    for field, enabled, package, extra in OPTIONAL_PACKAGES:
        if enabled(cfg):
            try:
                require(package, extra, load=False)
            except MissingPackageError:
                raise FieldError(
                    field, f"needs the {package} package, which is not installed: pip install 'rolecast[{extra}]'"
                ) from None
