"""Loading a run config: a YAML file (default: the embedded testbed recipe), dotted overrides (`--set`, flags),
the typed schema (config/schema.py), then the checks of what it names (config/validate.py).

Every error names the file or the override a field came from: "--set train.lrr=1e-4: train.lrr: unknown
field; did you mean train.lr?".
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import yaml

from rolecast.config.profiles import PROFILES, apply_profile
from rolecast.config.schema import DEFAULT_CONFIG, RunConfig, field_origin, parse_config, yaml_mapping
from rolecast.config.validate import check_run_config
from rolecast.core.errors import ConfigError, FieldError
from rolecast.tasks import TASKS

__all__ = ["load_config", "parse_override", "profile_lines", "validate_config"]

log = logging.getLogger(__name__)


def parse_override(item: str) -> tuple[str, Any]:
    """'train.lr=1e-4' -> ('train.lr', 0.0001); values are parsed as YAML."""
    if "=" not in item:
        raise ConfigError(f"--set {item}: must look like section.field=value")
    key, _, raw = item.partition("=")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as e:
        raise ConfigError(f"--set {item}: the value is not valid YAML ({' '.join(str(e).split())})") from None
    return key.strip(), value


def _set_path(data: dict, dotted: str, value: Any, origin: str) -> None:
    keys = dotted.split(".")
    if not all(keys):
        raise ConfigError(f"{origin}: {dotted!r} is not a field path like section.field")
    node = data
    for i, k in enumerate(keys[:-1]):
        node = node.setdefault(k, {})
        if not isinstance(node, dict):
            raise ConfigError(
                f"{origin}: {'.'.join(keys[: i + 1])} is a value ({node!r}), not a section, so it "
                f"has no field {keys[i + 1]!r}"
            )
    node[keys[-1]] = value


def load_config(
    path: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
    origins: dict[str, str] | None = None,
    *,
    environment: bool = True,
) -> RunConfig:
    """Load a YAML config (default: the embedded testbed recipe), apply dotted overrides, validate.

    `origins` names where each override came from (the CLI passes "--set train.lr=abc" or "--steps 5"), so an
    error in an override names the override, not the file it overrode. `environment=False` leaves out the checks
    of this machine (device, model path, packages): for a config that is to run elsewhere (a sweep's cells)."""
    source = Path(path) if path else DEFAULT_CONFIG
    if not source.exists():
        raise ConfigError(f"config file {source} does not exist")
    data = yaml_mapping(source.read_text(), source)
    labels: dict[str, str] = {}
    _task_options_follow_the_task(data, overrides or {}, (origins or {}).get("task.name"), source)
    for key, value in (overrides or {}).items():
        labels[key] = (origins or {}).get(key) or f"override {key}={value!r}"
        _set_path(data, key, value, labels[key])
    return validate_config(data, source, labels, environment=environment)


def _task_options_follow_the_task(
    data: dict[str, Any], overrides: dict[str, Any], origin: str | None, source: Path
) -> None:
    """An override that changes the task (`--task gsm8k` on a recipe written for dapo_math) drops the file's
    `task.options`: they were written for the file's task (its data files, grader, split), and kept they fail on
    the new one ("unexpected keyword argument 'instruction'") or change it unasked. Options for the new task are
    set with `--set task.options.NAME=VALUE`, which applies after. Said in one line (logged as a warning)."""
    task = data.get("task")
    if "task.name" not in overrides or not isinstance(task, dict) or not task.get("options"):
        return
    old, new = task.get("name", RunConfig.model_fields["task"].default.name), overrides["task.name"]
    if new == old:
        return
    dropped = ", ".join(f"{k}={v!r}" for k, v in task["options"].items())
    task["options"] = {}
    log.warning(
        "%s: task.options of %s were for task %s and are not carried over (%s); set options for %s with "
        "--set task.options.NAME=VALUE",
        origin or f"task.name={new!r}",
        source,
        old,
        dropped,
        new,
    )


def _run_names(data: dict[str, Any]) -> tuple[str, str]:
    """The task's and the workflow's names in raw config data (the schema's defaults where absent)."""
    defaults = RunConfig()
    task, workflow = data.get("task"), data.get("workflow")
    return (
        task.get("name", defaults.task.name) if isinstance(task, dict) else defaults.task.name,
        workflow.get("name", defaults.workflow.name) if isinstance(workflow, dict) else defaults.workflow.name,
    )


def _task_family(name: str) -> str | None:
    """A task's prompt family, None when `name` is no registered task (the task check says so, naming the field)."""
    family = getattr(TASKS.get(name), "family", None) if isinstance(name, str) else None
    return family if isinstance(family, str) else None


def profile_lines(cfg: RunConfig) -> list[str]:
    """What the config's profile set for this run, one comment line per option (`rolecast config show` prints
    them under the config): its value and what it switches, or the value the config holds instead."""
    profile = PROFILES.get(cfg.profile) if cfg.profile else None
    if profile is None:
        return []
    dump = cfg.model_dump(mode="json")
    lines = [f"# profile {profile.name}: {profile.about}"]
    for opt in profile.for_run(_task_family(cfg.task.name), cfg.task.name, cfg.workflow.name):
        node: Any = dump
        for key in opt.field.split("."):
            node = node.get(key) if isinstance(node, dict) else None
        value = yaml.safe_dump(opt.value, default_flow_style=True).strip().removesuffix("...").strip()
        said = f"{opt.field}: {value}"
        if node != opt.value:
            said += f" -> {node!r} here (set by the config)"
        lines.append(f"#   {said}  ({opt.switches}{'; kept: ' + opt.kept if opt.kept else ''})")
    return lines


def validate_config(
    data: dict[str, Any],
    source: str | Path = "<config>",
    labels: dict[str, str] | None = None,
    *,
    environment: bool = True,
) -> RunConfig:
    """The typed config of raw data, checked against what it names (config/validate.py); every error is a
    `ConfigError` naming `source` or the override in `labels` that set the field, except a prompt file or a
    workflow at fault (`PromptFileError`, `WorkflowError`), which name their own files. A `profile` is filled in
    first (config/profiles.py), where the task's prompt family is known."""
    labels = labels or {}
    data, _ = apply_profile(data, *_run_names(data), _task_family)
    cfg = parse_config(data, source, labels)
    try:
        check_run_config(cfg, environment=environment)
    except FieldError as e:
        raise ConfigError(f"{field_origin(e.field, source, labels)}: {e}") from None
    except ValueError as e:  # any other config problem (a dataset a task cannot read, ...): named by the file
        raise ConfigError(f"{source}: {e}") from None
    return cfg
