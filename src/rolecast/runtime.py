"""Assemble what a run needs from a validated config: workflow, routing, task, prompts, model, backend."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import torch

from rolecast.config import RunConfig
from rolecast.core.allocator import keep_freed_memory
from rolecast.core.devices import resolve_device, resolve_dtype, resolve_mixed_adapters
from rolecast.core.episode import Episode
from rolecast.core.errors import ConfigError, DatasetError, SandboxUnavailable, UserError
from rolecast.evaluation import EvalPlan, EvalResult, evaluate
from rolecast.policies.models import PolicySet, load_tokenizer
from rolecast.policies.router import Routing, routing_for
from rolecast.prompts import PromptBook
from rolecast.rollout.engine import Backend, RolloutStats, run_episodes
from rolecast.rollout.hf import HFBackend
from rolecast.rollout.vllm_backend import VLLMBackend
from rolecast.sandbox import UNISOLATED_HELP, sandbox_status
from rolecast.tasks import Task, make_task
from rolecast.tasks.base import Problem
from rolecast.workflows import WorkflowSpec, get_workflow

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    spec: WorkflowSpec
    routing: Routing
    task: Task
    prompts: PromptBook
    tokenizer: Any
    policies: PolicySet
    backend: Backend

    def rollouts(
        self,
        problems: Sequence[Problem],
        samples: int,
        *,
        seed: int,
        options: dict[str, Any],
        max_prompt_tokens: int | None,
        stats: RolloutStats | None = None,
    ) -> list[Episode]:
        """This runtime's workflow `samples` times on each problem at the backend's own sampling, the backend
        reseeded with `seed` first (a training step's rollouts, the precursors' probe batch); `rollout.engine.
        run_episodes` says the rest."""
        self.backend.reseed(seed)
        return run_episodes(
            self.spec,
            problems,
            samples,
            task=self.task,
            prompts=self.prompts,
            router=self.routing,
            backend=self.backend,
            options=options,
            stats=stats,
            max_prompt_tokens=max_prompt_tokens,
        )

    def evaluate(
        self,
        problems: Sequence[Problem],
        plan: EvalPlan,
        *,
        options: dict[str, Any],
        task: Task | None = None,
    ) -> EvalResult:
        """This runtime's workflow on `problems` as `plan` says (`evaluation.eval_plan`: samples, pass@k, sampling
        parameters and seed, passed per call; the backend is not changed); `task` scores them instead of the
        runtime's own (a further held-out set, eval.extra_sets)."""
        return evaluate(
            self.spec,
            problems,
            plan,
            task=task or self.task,
            prompts=self.prompts,
            router=self.routing,
            backend=self.backend,
            options=options,
        )


class _Sampling(TypedDict):
    """What every backend takes from the config: its generation caps, sampling defaults and seed."""

    max_new_tokens: int
    max_new_tokens_by_role: dict[str, int]
    temperature: float
    top_p: float
    seed: int


def make_backend(cfg: RunConfig, policies: PolicySet, tokenizer: Any) -> Backend:
    """The rollout backend `rollout.backend` names, built from the config."""
    r = cfg.rollout
    sampling = _Sampling(
        max_new_tokens=r.max_new_tokens,
        max_new_tokens_by_role=r.max_new_tokens_by_role,
        temperature=r.temperature,
        top_p=r.top_p,
        seed=cfg.seed,
    )
    if r.backend == "vllm":
        if r.seed_per_prompt:
            raise ConfigError("rollout.seed_per_prompt is an hf-backend option; vLLM seeds every request itself")
        return VLLMBackend(policies, tokenizer, model_path=cfg.model.path, **sampling)
    return HFBackend(
        policies,
        tokenizer,
        max_batch=r.max_batch,
        decode_threads=r.decode_threads,
        seed_per_prompt=r.seed_per_prompt,
        **sampling,
    )


def check_code_isolation(cfg: RunConfig, task: Task) -> None:
    """Refuse to run a code-executing task in the unisolated fallback unless `sandbox.allow_unisolated`."""
    if not task.executes_code:
        return
    mode, why = sandbox_status()
    if mode == "bwrap":
        return
    if cfg.sandbox.allow_unisolated:
        log.warning(
            "task %r runs model-written code WITHOUT isolation (%s; sandbox.allow_unisolated is set)",
            cfg.task.name,
            why,
        )
        return
    raise SandboxUnavailable(
        f"task {cfg.task.name!r} runs model-written code, but the sandbox cannot isolate it: "
        f"{why}.\n  To fix: {UNISOLATED_HELP}."
    )


def build_runtime(cfg: RunConfig, data_splits: Sequence[str] | None = None) -> Runtime:
    """`data_splits` (default: the train and eval splits) are read before the model loads, so a bad dataset
    file fails in a second, not after a model download. The task caches them for later `problems` calls."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    keep_freed_memory()  # malloc reuses freed tensors' memory instead of faulting fresh pages in (core/allocator.py)
    spec = get_workflow(cfg.workflow.name)
    routing = routing_for(spec.roles, cfg.routing)
    task = make_task(cfg.task.name, **cfg.task.options)
    prompts = PromptBook(task.family, cfg.task.prompts)
    check_code_isolation(cfg, task)  # before the model loads: minutes earlier than the first scoring
    for split in (cfg.task.train_split, cfg.task.eval_split) if data_splits is None else data_splits:
        try:
            task.problems(split)
        except UserError:
            raise
        except ValueError as e:  # e.g. a split the task does not have
            field = "task.train_split" if split == cfg.task.train_split else "task.eval_split"
            raise DatasetError(f"{field} {split!r}: {e}") from e
    tokenizer = load_tokenizer(cfg.model.path)
    device = resolve_device(cfg.model.device)
    policies = PolicySet(
        cfg.model.path,
        routing.policy_ids,
        mode=cfg.model.trainable,
        lora=cfg.model.lora.model_dump(),
        dtype=resolve_dtype(cfg.model.dtype, device),
        seed=cfg.seed,
        mixed_adapters=resolve_mixed_adapters(cfg.rollout.mixed_adapters, device),
        device=device,
    )
    return Runtime(spec, routing, task, prompts, tokenizer, policies, make_backend(cfg, policies, tokenizer))
