"""Typed run configuration: YAML file -> CLI overrides -> validated `RunConfig`.

Every section rejects unknown keys, so a misspelled field fails at load time with the field's dotted
path and the file it came from. Cross-section checks (workflow roles vs routing vs prompt files vs
registries) also run here, before any model is loaded.
Defaults follow the reference study (GRPO, group 8, lr 2e-5, no KL, temperature 0.7, LoRA r=64/alpha=32).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

CONFIG_DIR = Path(__file__).parent / "configs"
DEFAULT_CONFIG = CONFIG_DIR / "testbed.yaml"


class ConfigError(ValueError):
    """A configuration problem, with the field and file named."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class LoraSettings(_Strict):
    r: int = Field(64, gt=0)
    alpha: float = Field(32, gt=0)
    dropout: float = Field(0.0, ge=0, lt=1)
    target_modules: str | list[str] = "all-linear"


class ModelSettings(_Strict):
    path: str = "testbed"  # "testbed" (embedded), a local directory, or a hub id
    trainable: Literal["lora", "full"] = "lora"
    lora: LoraSettings = LoraSettings()
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"


class TaskSettings(_Strict):
    name: str = "testbed"
    options: dict[str, Any] = {}  # passed to the task's constructor (path=, seed=, column mapping, ...)
    prompts: str | None = None  # a YAML file merged over the shipped prompts of the task's family
    train_split: str = "train"
    eval_split: str = "test"


class WorkflowSettings(_Strict):
    name: str = "single"  # a registered workflow or "package.module:function"
    options: dict[str, Any] = {}  # e.g. {n: 3} for voting, {max_rounds: 3} for eval_opt, {k: 3} for orch_workers


class RoutingSettings(_Strict):
    sharing: Literal["shared", "isolated", "map"] = "shared"
    map: dict[str, str] | None = None  # role or "role/i" -> policy id (sharing: map)
    policies: list[str] | None = None  # optional: the policy ids that exist (catches typos in the map)


class RolloutSettings(_Strict):
    backend: Literal["hf"] = "hf"  # a vLLM backend is planned, not yet available
    temperature: float = Field(0.7, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_new_tokens: int = Field(1024, gt=0)
    max_batch: int = Field(256, gt=0)  # sequences per decode batch
    # CPU threads while generating: None (the run's `threads`), a number, or "auto" (one thread when a decode
    # step is small: on a loaded, shared machine OpenMP's threads wait for a free core at every op, see
    # rollout/hf.py and docs/benchmarks.md); the update always uses the run's threads.
    decode_threads: int | Literal["auto"] | None = None
    # LoRA only: a wave holding several adapters decodes as one mixed batch (PEFT adapter_names, the default);
    # False: one pass per adapter, each on the fast decode path (about 2x faster on a CPU, docs/benchmarks.md)
    mixed_adapters: bool = True


class TrainSettings(_Strict):
    steps: int = Field(100, ge=0)
    problems_per_step: int = Field(16, gt=0)
    group_size: int = Field(8, gt=0)
    lr: float = Field(2e-5, gt=0)
    lr_schedule: Literal["cosine", "constant"] = "cosine"
    warmup_steps: int = Field(0, ge=0)
    min_lr_ratio: float = Field(0.0, ge=0, le=1)
    weight_decay: float = Field(0.0, ge=0)
    betas: tuple[float, float] = (0.9, 0.999)
    max_grad_norm: float = Field(1.0, gt=0)
    advantage: str = "grpo"
    loss_agg: str = "token-mean"
    clip_low: float = Field(0.2, ge=0)
    clip_high: float = Field(0.28, ge=0)
    kl_coef: float = Field(0.0, ge=0)
    attribution: str = "team"  # team | role | "package.module:function"
    group_by: Literal["role", "instance", "turn"] = "role"
    # per_step: one optimizer step per policy per training step. per_minibatch: one per `mini_batch_size`
    # turns of that policy (the reference implementation), so a role with 3 parallel copies gets ~3x the steps.
    update_schedule: Literal["per_step", "per_minibatch"] = "per_step"
    mini_batch_size: int = Field(64, gt=0)
    epochs: int = Field(1, gt=0)  # passes over each step's batch
    micro_batch_tokens: int = Field(8192, gt=0)  # gradient accumulation by token budget
    mask_truncated: bool = False  # drop completions that hit max_new_tokens from the loss
    logprob_check_tol: float = Field(0.02, gt=0)  # max mean |sampler - trainer| log-prob gap on step 1
    # Divergence stops (docs/training.md): the run stops, keeping its last good checkpoint, when one policy's
    # optimizer updates were skipped as non-finite this many times in a row, or when one policy's mean token
    # entropy stays within max_entropy_tol x log|V| of its maximum log|V| for max_entropy_steps steps in a row
    # (0 turns either check off). Weights whose outputs are no longer finite stop the run at once.
    # An update that grows a policy's weight norm by more than this factor blew the weights up (lr far too
    # large); the run stops at once, before checkpointing them (0 = off).
    max_weight_growth: float = Field(2.0, ge=0)
    max_skipped_updates: int = Field(3, ge=0)
    max_entropy_steps: int = Field(3, ge=0)
    max_entropy_tol: float = Field(0.01, gt=0, lt=1)


class EvalSettings(_Strict):
    every: int = Field(0, ge=0)  # evaluate every N steps (0 = only at start and end)
    size: int = Field(200, gt=0)  # problems from the eval split
    n_samples: int = Field(1, gt=0)
    temperature: float = Field(0.0, ge=0)  # 0 = greedy
    at_start: bool = True
    at_end: bool = True


class LogSettings(_Strict):
    episodes_every: int = Field(1, ge=0)  # write episodes/step_N.jsonl every N steps (0 = never)
    max_episodes: int = Field(64, ge=0)  # episodes written per step
    progress: bool = True
    tensorboard: bool = False
    wandb: bool = False
    wandb_project: str = "rolecast"


class CheckpointSettings(_Strict):
    every: int = Field(10, ge=0)  # 0 = only at the end
    keep_last: int = Field(2, gt=0)


class RunConfig(_Strict):
    seed: int = 0
    run_dir: str | None = None  # default: runs/<task>-<workflow>-<sharing>-<timestamp>
    threads: int | None = None  # torch CPU threads (None = torch default)
    model: ModelSettings = ModelSettings()
    task: TaskSettings = TaskSettings()
    workflow: WorkflowSettings = WorkflowSettings()
    routing: RoutingSettings = RoutingSettings()
    rollout: RolloutSettings = RolloutSettings()
    train: TrainSettings = TrainSettings()
    eval: EvalSettings = EvalSettings()
    logging: LogSettings = LogSettings()
    checkpoint: CheckpointSettings = CheckpointSettings()

    @model_validator(mode="after")
    def _cross_checks(self) -> RunConfig:
        check_run_config(self)
        return self


def check_run_config(cfg: RunConfig) -> None:
    """Everything that can be checked without loading a model."""
    if cfg.rollout.temperature == 0 and cfg.train.steps > 0:
        raise ValueError("rollout.temperature: 0 (greedy) cannot train: every completion of a GRPO group would be "
                         "the same, so every advantage is 0 and nothing is learned. Sample with a temperature > 0 "
                         "(e.g. 0.7 or 1.0); greedy evaluation is eval.temperature: 0")
    from .policies.router import build_routing
    from .prompts import PromptBook
    from .tasks import make_task
    from .train.advantages import ADVANTAGES
    from .train.attribution import ATTRIBUTIONS
    from .train.losses import AGGREGATIONS
    from .workflows import get_workflow

    spec = get_workflow(cfg.workflow.name)
    spec.check_options(cfg.workflow.options)
    build_routing(spec.roles, cfg.routing.sharing, cfg.routing.map, cfg.routing.policies)
    task = make_task(cfg.task.name, **cfg.task.options)
    book = PromptBook(task.family, cfg.task.prompts)
    for role, names in spec.prompts.items():
        missing = [n for n in names if not book.has(n)]
        if missing:
            raise ValueError(f"workflow {spec.name!r} role {role!r} needs prompt(s) {missing}, which the "
                             f"{task.family!r} prompt family lacks (task {cfg.task.name!r})")
    if cfg.train.advantage not in ADVANTAGES:
        raise ValueError(f"train.advantage: unknown estimator {cfg.train.advantage!r}; known: {sorted(ADVANTAGES)}")
    if cfg.train.loss_agg not in AGGREGATIONS:
        raise ValueError(f"train.loss_agg: unknown mode {cfg.train.loss_agg!r}; known: {sorted(AGGREGATIONS)}")
    _check_model_path(cfg.model.path)
    if cfg.train.attribution not in ATTRIBUTIONS and ":" not in cfg.train.attribution:
        raise ValueError(f"train.attribution: unknown mode {cfg.train.attribution!r}; known: {sorted(ATTRIBUTIONS)} "
                         f"or 'package.module:function'")


def _check_model_path(path: str) -> None:
    """A path that is plainly local must exist; a hub id ("org/name") can only be checked when loading."""
    from .policies.models import PACKAGED_MODELS

    if path == "testbed" or path in PACKAGED_MODELS:
        return
    looks_local = path.startswith(("/", "./", "../", "~")) or path.endswith(".gguf") or path.count("/") != 1
    if looks_local and not Path(path).expanduser().exists():
        raise ValueError(f"model.path: {path!r} does not exist (a local path), and it is not a hub id of the "
                         f"form 'org/name'")


def _set_path(data: dict, dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    node = data
    for k in keys[:-1]:
        node = node.setdefault(k, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override {dotted}: {k} is not a section")
    node[keys[-1]] = value


def parse_override(item: str) -> tuple[str, Any]:
    """'train.lr=1e-4' -> ('train.lr', 0.0001); values are parsed as YAML."""
    if "=" not in item:
        raise ConfigError(f"override {item!r} must look like section.field=value")
    key, _, raw = item.partition("=")
    return key.strip(), yaml.safe_load(raw) if raw.strip() else None


def load_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> RunConfig:
    """Load a YAML config (default: the embedded testbed recipe), apply dotted overrides, validate."""
    source = Path(path) if path else DEFAULT_CONFIG
    if not source.exists():
        raise ConfigError(f"config file {source} does not exist")
    try:
        data = yaml.safe_load(source.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: not valid YAML: {e}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of sections")
    for key, value in (overrides or {}).items():
        _set_path(data, key, value)
    return validate_config(data, source)


def validate_config(data: dict[str, Any], source: str | Path = "<config>") -> RunConfig:
    try:
        return RunConfig.model_validate(data)
    except ValidationError as e:
        lines = []
        for err in e.errors():
            loc = ".".join(str(x) for x in err["loc"]) or "(top level)"
            msg = err["msg"]
            if err["type"] == "extra_forbidden":
                msg = "unknown field (misspelled?)"
            lines.append(f"{source}: {loc}: {msg}" + (f" (got {err['input']!r})" if err["type"] != "extra_forbidden"
                                                          and not isinstance(err["input"], dict) else ""))
        raise ConfigError("invalid config:\n  " + "\n  ".join(lines)) from None
    except ValueError as e:  # cross-section checks
        raise ConfigError(f"{source}: {e}") from None


def dump_config(cfg: RunConfig) -> str:
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)


# ---------------------------------------------------------------------------------------------------------
# Resuming with a changed configuration

# Fields (or sections, ending in ".") a resumed run may change: they steer how long and how verbosely a run
# goes on, not what it is. Each change applies from the resume on and is recorded in the run's
# resumes.jsonl. Every other field defines the run (task, workflow, routing, model, seed, sampling, the
# loss and its batches) and must match the run's config.yaml. Documented in docs/training.md.
RESUME_CHANGEABLE = (
    "train.steps", "train.lr", "train.logprob_check_tol", "train.micro_batch_tokens", "train.max_skipped_updates",
    "train.max_weight_growth",
    "train.max_entropy_steps", "train.max_entropy_tol", "eval.", "logging.", "checkpoint.", "threads",
    "rollout.decode_threads", "run_dir",
)


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict) and data:
        out: dict[str, Any] = {}
        for k, v in data.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: data}


def config_changes(old: RunConfig, new: RunConfig) -> dict[str, tuple[Any, Any]]:
    """{dotted field: (old value, new value)} for every field that differs."""
    a, b = _flatten(old.model_dump(mode="json")), _flatten(new.model_dump(mode="json"))
    return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


def resume_changes(old: RunConfig, new: RunConfig, source: str | Path = "config.yaml") -> dict[str, tuple[Any, Any]]:
    """The changes a resume applies; ConfigError naming every field that defines the run and differs."""
    changes = config_changes(old, new)
    refused = [k for k in changes if not any(k == f or (f.endswith(".") and k.startswith(f)) for f in RESUME_CHANGEABLE)]
    if refused:
        lines = [f"{k}: {changes[k][0]!r} -> {changes[k][1]!r}" for k in refused]
        raise ConfigError(f"cannot resume with a changed {', '.join(refused)}: it defines the run in {source} "
                          f"({'; '.join(lines)}). Only these may change on resume: "
                          f"{', '.join(k.rstrip('.') + ('.*' if k.endswith('.') else '') for k in RESUME_CHANGEABLE)}")
    return {k: v for k, v in changes.items() if k != "run_dir"}
