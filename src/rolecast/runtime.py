"""Assemble what a run needs from a validated config: workflow, routing, task, prompts, model, backend."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .config import RunConfig
from .policies import PolicySet, Routing, build_routing, load_tokenizer
from .prompts import PromptBook
from .tasks import Task, make_task
from .workflows import WorkflowSpec, get_workflow


@dataclass
class Runtime:
    spec: WorkflowSpec
    routing: Routing
    task: Task
    prompts: PromptBook
    tokenizer: Any
    policies: PolicySet
    backend: Any


def make_backend(cfg: RunConfig, policies: PolicySet, tokenizer):
    from .rollout.hf import HFBackend

    return HFBackend(policies, tokenizer, max_new_tokens=cfg.rollout.max_new_tokens,
                     temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p,
                     max_batch=cfg.rollout.max_batch, seed=cfg.seed, decode_threads=cfg.rollout.decode_threads,
                     max_new_tokens_by_role=cfg.rollout.max_new_tokens_by_role)


def build_runtime(cfg: RunConfig) -> Runtime:
    import torch

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    spec = get_workflow(cfg.workflow.name)
    routing = build_routing(spec.roles, cfg.routing.sharing, cfg.routing.map, cfg.routing.policies)
    task = make_task(cfg.task.name, **cfg.task.options)
    prompts = PromptBook(task.family, cfg.task.prompts)
    tokenizer = load_tokenizer(cfg.model.path)
    policies = PolicySet(cfg.model.path, routing.policy_ids, mode=cfg.model.trainable,
                         lora=cfg.model.lora.model_dump(), dtype=cfg.model.dtype, seed=cfg.seed,
                         mixed_adapters=cfg.rollout.mixed_adapters)
    return Runtime(spec, routing, task, prompts, tokenizer, policies, make_backend(cfg, policies, tokenizer))
