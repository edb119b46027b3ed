"""The typed run configuration: `RunConfig` and its sections, pure (no disk, no device, no package check).

Every section rejects unknown keys, so a misspelled field fails with the field's dotted path and the file (or
command-line override) it came from (`parse_config`). Building a `RunConfig` only checks values: what the
config names (tasks, workflows, prompts, registries, devices, paths, packages) is checked by
`rolecast.config.validate`, which `rolecast.config.load.load_config` runs, before any model is loaded.
Defaults follow the reference study (GRPO, group 8, lr 2e-5, no KL, temperature 0.7, LoRA r=64/alpha=32).
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rolecast.config.profiles import ProfileName, rename_former
from rolecast.core.errors import ConfigError, FieldError, yaml_problem
from rolecast.core.registry import closest_name

__all__ = ["ConfigError", "FieldError", "RunConfig", "dump_config", "parse_config", "resume_changes"]

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
DEFAULT_CONFIG = CONFIG_DIR / "testbed.yaml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class LoraSettings(_Strict):
    r: int = Field(64, gt=0)
    alpha: float = Field(32, gt=0)
    dropout: float = Field(0.0, ge=0, lt=1)
    target_modules: str | list[str] = "all-linear"


class ModelSettings(_Strict):
    path: str = "testbed"  # "testbed" / "testbed-large" (embedded), a local directory, or a hub id
    trainable: Literal["lora", "full"] = "lora"
    lora: LoraSettings = LoraSettings()
    # auto: float32 on a CPU, bfloat16 on a GPU (runtime.resolve_dtype). With LoRA the adapters, and so their
    # optimizer state, stay float32 whatever the base's dtype (PEFT upcasts them); full fine-tuning in bf16
    # keeps bf16 weights and AdamW state (docs/training.md, "Devices and precision")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    # cpu, cuda, cuda:N or auto (cuda when torch sees a GPU, else cpu); under torchrun a bare cuda/auto means
    # the process's own GPU, cuda:LOCAL_RANK. Checked by config/validate.py (load_config runs it), not here: a
    # config for a GPU machine builds anywhere; cuda on a machine without CUDA is refused when it is to run.
    device: str = "auto"


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
    backend: Literal["hf", "vllm"] = "hf"  # vllm: rollout/vllm_backend.py (pip install 'rolecast[vllm]', GPU)
    temperature: float = Field(0.7, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_new_tokens: int = Field(1024, gt=0)
    # a generation cap per role (e.g. {aggregator: 512}); roles not named use max_new_tokens
    max_new_tokens_by_role: dict[str, int] = {}
    max_batch: int = Field(256, gt=0)  # sequences per decode batch
    # CPU threads while generating: None (the run's `threads`), a number, or "auto" (one thread when a decode
    # step is small: on a loaded, shared machine OpenMP's threads wait for a free core at every op, see
    # rollout/hf.py and docs/benchmarks.md); the update always uses the run's threads.
    decode_threads: int | Literal["auto"] | None = None
    # LoRA only: a wave holding several adapters decodes as one mixed batch (PEFT adapter_names); False: one
    # pass per adapter, each on the fast decode path (about 2x faster on a CPU, docs/benchmarks.md). auto: the
    # faster per device, one pass per adapter on a CPU and the mixed batch on a GPU
    mixed_adapters: bool | Literal["auto"] = "auto"
    # Each distinct prompt decodes in its own batch, seeded from (step seed, prompt): a row's samples then
    # do not depend on which other rows share its batch, so a run on N processes samples exactly what it
    # samples on one (slower: smaller batches). Off: one seed per step for the whole batch (the default).
    seed_per_prompt: bool = False
    # A cap on a role call's prompt, in tokens (None: none). A longer prompt ends the episode there, as in the
    # reference study (verl's data.max_prompt_length; rllm raises MAX_PROMPT_LENGTH_EXCEEDED): the call is not
    # made, the workflow stops, the turns made so far stay and the episode has no final answer (reward 0).
    max_prompt_tokens: int | None = Field(None, gt=0)
    # the rewards of an episode such a prompt ended: team (the episode's outcome, 0: it has no answer, to every
    # turn it made) or committed (what the reference study's committed trajectories keep: each turn's role-local
    # reward where its workflow had set a claim, else 0; 0 throughout on code tasks, whose study workflows
    # score only after their loop). docs/study_recipe.md
    ended_reward: Literal["team", "committed"] = "team"


class TrainSettings(_Strict):
    steps: int = Field(100, ge=0)
    problems_per_step: int = Field(16, gt=0)
    group_size: int = Field(8, gt=0)
    lr: float = Field(2e-5, gt=0)
    # cosine | constant: rolecast's (warmup (k + 1) / (warmup + 1), cosine flat after train.steps);
    # verl_cosine | verl_constant: verl's, as the reference study trains (warmup k / warmup from lr 0, a cosine
    # not clamped at its end, so it climbs back up past it). training/schedule.py
    lr_schedule: Literal["cosine", "constant", "verl_cosine", "verl_constant"] = "cosine"
    # What advances the schedule. step: each policy's own schedule, once per training step (rolecast's default).
    # role_update: the study's Isolated-Policy behaviour (one verl actor, one scheduler, stepped inside every
    # per-role update call): one clock shared by all policies, advanced once per policy update that has data,
    # so with k isolated policies warmup and cosine run k times faster. Shared-Policy (k = 1): identical.
    lr_clock: Literal["step", "role_update"] = "step"
    warmup_steps: int = Field(0, ge=0)
    min_lr_ratio: float = Field(0.0, ge=0, le=1)
    weight_decay: float = Field(0.0, ge=0)
    betas: tuple[float, float] = (0.9, 0.999)
    # Full fine-tuning of bf16/fp16 weights: AdamW steps float32 master copies (training/master_weights.py), so
    # updates below the weights' rounding step still add up. No effect on float32 weights or LoRA adapters
    # (PEFT keeps those float32). Off: the optimizer steps the low-precision weights themselves.
    fp32_master_weights: bool = True
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
    # random: problems_per_step drawn afresh each step; epoch: each training problem once per epoch, reshuffled
    # every epoch (training/sampling.py). Both are a pure function of (seed, step), so a resumed run sees the same.
    sampling: Literal["random", "epoch"] = "random"
    micro_batch_tokens: int = Field(8192, gt=0)  # gradient accumulation by token budget
    mask_truncated: bool = False  # drop completions that hit max_new_tokens from the loss
    logprob_check_tol: float = Field(0.02, gt=0)  # max mean |sampler - trainer| log-prob gap on step 1
    # The update's fine print (docs/study_recipe.md, "The update's fine print"); each default is rolecast's.
    # old_logprobs: the ratio's denominator. sampler: the log-probs the sampler returned. trainer: recomputed by
    # the trainer before the update (the reference study, verl with rollout correction off; on a GPU vLLM's
    # differ from the trainer's); the sampler-vs-trainer gap is logged as policy/<id>/logprob_gap every step.
    old_logprobs: Literal["sampler", "trainer"] = "sampler"
    # dual-clip PPO (verl's clip_ratio_c, 3 in the study): a negative-advantage token's loss is capped at -A * c
    dual_clip: float | None = Field(None, gt=1)
    # actual: each mini-batch's loss is the mean over its own rows. nominal (verl's use_dynamic_bsz scaling, the
    # study's): times rows / mini_batch_size, so a short last mini-batch takes a proportionally smaller step
    minibatch_scale: Literal["actual", "nominal"] = "actual"
    # a GRPO group of one: zero (no baseline, no signal) or reward (verl's mean 0 / std 1: advantage = reward)
    singleton_advantage: Literal["zero", "reward"] = "zero"
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


class EvalSetSettings(_Strict):
    """One more held-out set, evaluated with the run's workflow and prompts next to task.eval_split and reported on
    its own: eval_<name>.jsonl in the run directory and eval/<name>/pass@1 in metrics.jsonl."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")  # names the file and the metric
    task: str  # a registered task of the same prompt family as task.name, e.g. aime2024 beside dapo_math
    options: dict[str, Any] = {}  # its constructor options, e.g. {grader: rllm}
    split: str = "test"
    size: int | None = Field(None, gt=0)  # problems from the split (None: all of them)


STUDY_EVAL_SAMPLES = 4  # eval.protocol study: samples per problem unless eval.n_samples says otherwise


class EvalSettings(_Strict):
    # custom (default): temperature and n_samples as set (their defaults decode greedily, once). greedy:
    # enforces temperature 0 and one sample. study: the reference study's protocol, sampled pass@1 at
    # temperature 0.7, averaged over n_samples samples per problem of the held-out split (default 4). The
    # embedded testbed recipe evaluates by the study's protocol: greedily, Voting's voters write one answer.
    protocol: Literal["custom", "greedy", "study"] = "custom"
    # evaluate every N steps (0 = only at start and end). In a run config the default is "auto", resolved at
    # load (`resolve_auto_eval`): ~10 evaluations on checkpointed steps for runs of >= 20 steps, else 0
    every: int = Field(0, ge=0)
    size: int = Field(200, gt=0)  # problems from the eval split
    n_samples: int = Field(1, gt=0)
    temperature: float = Field(0.0, ge=0)  # 0 = greedy
    # nucleus sampling during evaluation (None: rollout.top_p, as before this field). Top-k is never applied by
    # rolecast's samplers (verl's -1). docs/study_recipe.md: why the study's evaluation is top-p 1, top-k off.
    top_p: float | None = Field(None, gt=0, le=1)
    extra_sets: list[EvalSetSettings] = []  # more held-out sets, each reported separately (e.g. AIME 2024)
    at_start: bool = True
    at_end: bool = True

    @model_validator(mode="before")
    @classmethod
    def _protocol_defaults(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("protocol") == "study":
            data = {"temperature": 0.7, "n_samples": STUDY_EVAL_SAMPLES, **data}
        return data

    @model_validator(mode="after")
    def _protocol_consistent(self) -> EvalSettings:
        if self.protocol == "greedy" and (self.temperature != 0 or self.n_samples != 1):
            raise ValueError(
                f"eval.protocol greedy decodes once at temperature 0 (got temperature "
                f"{self.temperature}, n_samples {self.n_samples}); use protocol: study to sample"
            )
        if self.protocol == "study" and self.temperature != 0.7:
            raise ValueError(
                f"eval.protocol study samples at temperature 0.7 (got {self.temperature}); to choose the "
                f"temperature set eval.protocol: custom (greedy: temperature 0, one sample)"
            )
        return self

    @model_validator(mode="after")
    def _greedy_samples_differ(self) -> EvalSettings:
        if self.n_samples > 1 and self.temperature == 0:
            raise ValueError(
                f"eval.n_samples {self.n_samples} at eval.temperature 0 decodes the same greedy answer "
                f"{self.n_samples} times (pass@1 over them is one greedy decode); sample with eval.temperature > 0 "
                f"(e.g. 0.7, or eval.protocol: study) or set eval.n_samples: 1"
            )
        return self

    def describe(self) -> str:
        """How evaluations sample, for the lines that print an accuracy: "study protocol: T=0.7, pass@1 over 4
        samples"."""
        what = f"{self.protocol} protocol: T={self.temperature:g}"
        if self.temperature == 0:
            what += " (greedy: parallel calls of one role write the same answer)"
        if self.top_p is not None:
            what += f", top-p {self.top_p:g}"
        return what + (f", pass@1 over {self.n_samples} samples" if self.n_samples > 1 else ", one sample")


class LogSettings(_Strict):
    episodes_every: int = Field(1, ge=0)  # write episodes/step_N.jsonl every N steps (0 = never)
    max_episodes: int = Field(64, ge=0)  # episodes written per step
    progress: bool = True
    tensorboard: bool = False
    wandb: bool = False
    wandb_project: str = "rolecast"


class CheckpointSettings(_Strict):
    every: int = Field(10, ge=0)  # 0 = only at the end
    # 1: checkpoints are written atomically (a new one is complete before the old one goes), so the newest is
    # all a resume needs; 2+ keeps older fallbacks at a full checkpoint each (docs/training.md, "Disk use")
    keep_last: int = Field(1, gt=0)
    # also keep (never prune) checkpoints whose step is a multiple of this, so a finished run can be
    # re-evaluated at several points (0 = none). In a run config the default is "auto": the resolved eval.every
    # when a rollback is configured (it goes back to the best evaluated checkpoint), else 0 (keep_last alone)
    keep_every: int = Field(0, ge=0)


class SandboxSettings(_Strict):
    # tasks that run model-written code (code tasks, testbed_code) need bubblewrap for isolation; without it a
    # run stops before loading the model unless this allows the weaker fallback (rlimits + an unprivileged uid,
    # no network or filesystem isolation; see docs/sandbox.md)
    allow_unisolated: bool = False


class GradientDiagnosticsSettings(_Strict):
    # per-role gradient statistics every N training steps (0 = off; docs/training.md, "Gradient diagnostics").
    # On by default every 4th step: measured at 1.02-1.03x a plain step (docs/benchmarks.md)
    every: int = Field(4, ge=0)
    # 0: exact per-instance gradients (one flat copy of the trainable parameters per role instance); d > 0: a
    # count-sketch to d dims instead (inner products unbiased, error ~ sqrt(2/d) |x||y|; for full fine-tuning)
    sketch_dim: int = Field(0, ge=0)
    ema_decay: float = Field(0.9, ge=0, lt=1)  # of each role's past gradients, for direction persistence


class PrecursorUse(_Strict):
    """A further precursor the trainer computes from the metric rows at every step and logs: a name registered
    in diagnostics/precursors.PRECURSORS, or a 'package.module:function' / 'file.py:function' over metric rows
    (a plain function needs its `direction`; one decorated with @register_precursor has its own)."""

    name: str = Field(min_length=1)
    direction: Literal["above", "below"] | None = None


def _named(v: Any) -> Any:
    """A bare name stands for {name: ...} in a list of precursors."""
    return [{"name": x} if isinstance(x, str) else x for x in v] if isinstance(v, list) else v


class PrecursorSettings(_Strict):
    """Precursors of a cliff, computed in the loop (training/precursors.py; docs/analysis.md, "Precursors"): off
    while `every` is 0, and then the training step is what it was without them."""

    # 0: off. N: the probe log-likelihood, KL to the base and the canary every N steps (the update ratios and
    # the derived precursors: every step)
    every: int = Field(0, ge=0)
    probe_size: int = Field(16, gt=0)  # K: known-correct outputs per (policy, role) in its fixed probe set
    # training problems of the one base rollout batch the probes are drawn from (x train.group_size samples)
    probe_problems: int = Field(16, gt=0)
    canary_size: int = Field(16, ge=0)  # held-out problems of task.eval_split, evaluated greedily (0: no canary)
    # precursors computed from the metric rows at every step, besides the built-in entropy_slope
    use: list[PrecursorUse] = []

    @field_validator("use", mode="before")
    @classmethod
    def _bare_names(cls, v: Any) -> Any:
        return _named(v)


class DiagnosticsSettings(_Strict):
    gradients: GradientDiagnosticsSettings = GradientDiagnosticsSettings()
    precursors: PrecursorSettings = PrecursorSettings()


class PrecursorTrigger(_Strict):
    """A precursor as a trigger of the rollback (or lr cut): it fires at a step where its value is strictly past
    `threshold` (above or below, its own direction unless given), for `subject` (a policy, "pid/role", a role,
    "run") or "any" (the most alarming subject), as diagnostics/precursors.score_precursor judges it."""

    name: str = Field(min_length=1)  # a precursor the run computes (diagnostics.precursors)
    threshold: float
    subject: str = "any"
    direction: Literal["above", "below"] | None = None


class RollbackSettings(_Strict):
    """Rollback on early warning (training/rollback.py; docs/training.md): off while `signals` and `precursors`
    are empty."""

    # early-warning signal names (diagnostics/warnings.py SIGNALS) that trigger a rollback to the best checkpoint
    signals: list[str] = []
    # precursors that trigger it too (diagnostics.precursors computes them), each with its threshold
    precursors: list[PrecursorTrigger] = []
    # rollback: restore the best checkpoint and lower the lr; lr_cut: only lower the lr (by lr_factor), in place
    action: Literal["rollback", "lr_cut"] = "rollback"
    lr_factor: float = Field(0.5, gt=0, le=1)  # train.lr is multiplied by this at each rollback
    max_rollbacks: int = Field(1, ge=1)
    patience: int = Field(1, ge=1)  # consecutive steps a configured signal must fire
    cooldown: int = Field(5, ge=0)  # steps after a rollback during which no other one fires


class InterventionSettings(_Strict):
    """Changes to the update aimed at role-level gradient dynamics; every one is off by default."""

    kl_coef_by_role: dict[str, float] = {}  # role -> k3 KL-to-base coefficient (roles not named: train.kl_coef)
    coherence_damping: float = Field(0.0, ge=0, le=1)  # lambda: scale g_r by 1 - lambda * max(0, cos(g_r, EMA g_r))
    coherence_ema: float = Field(0.9, ge=0, lt=1)  # decay of the EMA that damping compares with
    multiplicity_norm: bool = False  # divide a role's loss by its number of instances on the policy
    balance_shares: bool | dict[str, float] = False  # true: equal projection shares; {role: share}: those shares
    rollback: RollbackSettings = RollbackSettings()


class RunConfig(_Strict):
    # a declared set of options filled in where the config does not set them (config/profiles.py): `study` is the
    # reference study's behaviour (configs/study/); the filled-in options are in the run's config.yaml
    profile: ProfileName | None = None
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
    sandbox: SandboxSettings = SandboxSettings()
    diagnostics: DiagnosticsSettings = DiagnosticsSettings()
    interventions: InterventionSettings = InterventionSettings()

    @model_validator(mode="before")
    @classmethod
    def _resolve_auto(cls, data: Any) -> Any:
        return resolve_auto_eval(rename_former(data)) if isinstance(data, dict) else data


AUTO_EVAL_MIN_STEPS = 20  # shorter runs (tests, `--steps 3`) evaluate only at start and end
AUTO_EVAL_POINTS = 10  # about this many periodic evaluations on a long run


def _field(data: dict[str, Any], section: str, name: str) -> Any:
    sec = data.get(section)
    if isinstance(sec, BaseModel):
        return getattr(sec, name, "auto")
    return sec.get(name, "auto") if isinstance(sec, dict) else "auto"


def resolve_auto_eval(data: dict[str, Any]) -> dict[str, Any]:
    """Raw config data with eval.every / checkpoint.keep_every "auto" (or absent) replaced by numbers, so the
    typed fields stay plain ints and the resolved config.yaml holds the numbers.

    eval.every "auto": 0 when train.steps < AUTO_EVAL_MIN_STEPS; else the smallest multiple of checkpoint.every
    that is >= steps / AUTO_EVAL_POINTS (so every evaluated step has a checkpoint), or max(5, ceil(steps / 10))
    when checkpoint.every is 0. checkpoint.keep_every "auto": the resolved eval.every when
    interventions.rollback.signals or .precursors is set and its action is a rollback (it goes back to the best
    evaluated checkpoint, so those are kept), else 0: checkpoint.keep_last alone decides what stays on disk (the
    latest is all a resume needs).
    Values that are neither "auto" nor absent are left for field validation."""
    every, keep = _field(data, "eval", "every"), _field(data, "checkpoint", "keep_every")
    if every != "auto" and keep != "auto":
        return data
    steps = _field(data, "train", "steps")
    steps = TrainSettings.model_fields["steps"].default if steps == "auto" else steps
    ck = _field(data, "checkpoint", "every")
    ck = CheckpointSettings.model_fields["every"].default if ck == "auto" else ck
    data = dict(data)
    if every == "auto":
        if not isinstance(steps, int) or not isinstance(ck, int) or steps < AUTO_EVAL_MIN_STEPS:
            every = 0  # (a malformed steps / checkpoint.every is reported by its own field)
        elif ck > 0:
            every = ck * max(1, -(-steps // (AUTO_EVAL_POINTS * ck)))
        else:
            every = max(5, -(-steps // AUTO_EVAL_POINTS))
        if _is_section(data.get("eval")):
            data["eval"] = _with(data.get("eval"), "every", every)
    if keep == "auto" and _is_section(data.get("checkpoint")):
        kept = every if isinstance(every, int) and _rollback_configured(data) else 0
        data["checkpoint"] = _with(data.get("checkpoint"), "keep_every", kept)
    return data


def _rollback_configured(data: dict[str, Any]) -> bool:
    """Raw config data with interventions.rollback.signals or .precursors set (non-empty), and its action a
    rollback (an lr cut goes back to no checkpoint)."""
    rollback: Any = data
    for name in ("interventions", "rollback"):
        rollback = _member(rollback, name)
    if _member(rollback, "action") == "lr_cut":
        return False
    return bool(_member(rollback, "signals")) or bool(_member(rollback, "precursors"))


def _member(node: Any, name: str) -> Any:
    if isinstance(node, BaseModel):
        return getattr(node, name, None)
    return node.get(name) if isinstance(node, dict) else None  # absent, or malformed (reported by its own field)


def _is_section(section: Any) -> bool:
    """Absent or a mapping: a malformed section is left for validation to report."""
    return section is None or isinstance(section, (dict, BaseModel))


def _with(section: Any, name: str, value: Any) -> Any:
    if isinstance(section, BaseModel):
        return section.model_copy(update={name: value})
    return {**(section if isinstance(section, dict) else {}), name: value}


# ---------------------------------------------------------------------------------------------------------
# Parsing: raw data -> RunConfig, with errors that name the field and where it was set


def yaml_mapping(text: str, source: str | Path) -> dict[str, Any]:
    """The sections of a config file's text (an empty file: none); ConfigError naming `source` otherwise."""
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise ConfigError(yaml_problem(e, source)) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of sections")
    return data


def field_origin(field: str, source: str | Path, labels: dict[str, str]) -> str:
    """The override that set `field` (or a section above or a field below it), else the config file."""
    best = ""
    for key in labels:
        if (key == field or key.startswith(field + ".") or field.startswith(key + ".")) and len(key) > len(best):
            best = key
    return labels[best] if best else str(source)


def _did_you_mean(loc: tuple[int | str, ...]) -> str:
    """The message "unknown field; did you mean train.lr?" for an unknown field at `loc` (("train", "lrr")): the
    closest field name of the section it is in, by difflib's ratio; "" when nothing is close."""
    model: Any = RunConfig
    for key in loc[:-1]:
        if isinstance(key, int):  # an item of a list section (eval.extra_sets.0.name): the model is its items'
            continue
        fields = getattr(model, "model_fields", {})
        if key not in fields:
            return ""
        annotation = fields[key].annotation
        if typing.get_origin(annotation) is list:
            annotation = typing.get_args(annotation)[0]
        model = annotation
    close = closest_name(str(loc[-1]), list(getattr(model, "model_fields", {})))
    return f"unknown field; did you mean {'.'.join([*(str(k) for k in loc[:-1]), close])}?" if close else ""


def _error_line(err: Any, source: str | Path, labels: dict[str, str]) -> str:
    """One of pydantic's errors as "<file or override>: <field>: <what is wrong>"."""
    cause = (err.get("ctx") or {}).get("error")
    if err["type"] == "value_error" and isinstance(cause, FieldError):  # a validator naming another field
        loc, msg = cause.field, cause.detail
    elif err["type"] == "value_error" and not err["loc"] and cause is not None:
        return f"{source}: {cause}"
    else:
        loc = ".".join(str(x) for x in err["loc"]) or "(top level)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = _did_you_mean(err["loc"]) or "unknown field (misspelled?)"
        elif not isinstance(err["input"], dict):
            msg += f" (got {err['input']!r})"
    return f"{field_origin(loc, source, labels)}: {loc}: {msg}"


def parse_config(
    data: dict[str, Any], source: str | Path = "<config>", labels: dict[str, str] | None = None
) -> RunConfig:
    """The typed config of raw data (a config file's sections with the overrides applied); every field's type and
    range checked, nothing else (`rolecast.config.validate` checks what the fields name). `labels` maps a
    dotted field to the override that set it, so an error names that override rather than the file."""
    labels = labels or {}
    try:
        return RunConfig.model_validate(data)
    except ValidationError as e:
        lines = [_error_line(err, source, labels) for err in e.errors()]
        if len(lines) == 1:
            raise ConfigError(lines[0]) from None
        raise ConfigError("invalid config:\n  " + "\n  ".join(lines)) from None


def dump_config(cfg: RunConfig) -> str:
    """The config as YAML (a run's config.yaml): every field, defaults included, "auto" values resolved."""
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)


# ---------------------------------------------------------------------------------------------------------
# Resuming with a changed configuration

# Fields (or sections, ending in ".") a resumed run may change: they steer how long and how verbosely a run
# goes on, not what it is. Each change applies from the resume on and is recorded in the run's
# resumes.jsonl. Every other field defines the run (task, workflow, routing, model, seed, sampling, the
# loss and its batches) and must match the run's config.yaml. Documented in docs/training.md.
RESUME_CHANGEABLE = (
    "train.steps",
    "train.lr",
    "train.logprob_check_tol",
    "train.micro_batch_tokens",
    "train.max_skipped_updates",
    "train.max_weight_growth",
    "train.max_entropy_steps",
    "train.max_entropy_tol",
    "eval.",
    "logging.",
    "checkpoint.",
    "threads",
    "model.device",
    "rollout.decode_threads",
    "run_dir",
    "profile",  # a name only: what it set is in the fields it filled, which are compared one by one
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
    refused = [
        k for k in changes if not any(k == f or (f.endswith(".") and k.startswith(f)) for f in RESUME_CHANGEABLE)
    ]
    if refused:
        lines = [f"{k}: {changes[k][0]!r} -> {changes[k][1]!r}" for k in refused]
        raise ConfigError(
            f"cannot resume with a changed {', '.join(refused)}: it defines the run in {source} "
            f"({'; '.join(lines)}). Only these may change on resume: "
            f"{', '.join(k.rstrip('.') + ('.*' if k.endswith('.') else '') for k in RESUME_CHANGEABLE)}"
        )
    return {k: v for k, v in changes.items() if k not in ("run_dir", "profile")}
