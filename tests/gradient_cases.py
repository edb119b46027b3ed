"""Shared by test_gradients.py and test_interventions.py: Voting-shaped turns on a tiny real model, and each
role's (or instance's) gradient computed the slow, independent way: its own forward over the full
[prompt | completion] rows (no shared-prompt forward) and its own backward, with the mini-batch's normalisers."""

from __future__ import annotations

import random

import torch

from rolecast.config.load import load_config
from rolecast.core.episode import Turn
from rolecast.diagnostics.gradients import flat_grad, flat_params
from rolecast.objectives.losses import clipped_surrogate
from rolecast.policies.models import PolicySet, load_tokenizer
from rolecast.training.batching import collate
from rolecast.training.logprobs import completion_logprobs
from rolecast.training.update import update_policy


def config(model_dir: str, **overrides):
    base = {
        "model.path": model_dir,
        "rollout.temperature": 1.0,
        "rollout.max_new_tokens": 8,
        "train.epochs": 1,
        "train.update_schedule": "per_step",
        "train.max_grad_norm": 1e9,
        "workflow.name": "voting",
    }
    return load_config(None, {**base, **overrides})


def voting_turns(tok, pid: str = "shared", problems: int = 2, samples: int = 2, seed: int = 0) -> list[Turn]:
    """3 generator instances answering the same prompt per problem, and an aggregator with its own prompt."""
    g = torch.Generator().manual_seed(seed)
    rand = random.Random(seed)
    out = []
    for _ in range(problems):
        solve = torch.randint(3, len(tok), (rand.randint(4, 7),), generator=g).tolist()
        pick = torch.randint(3, len(tok), (rand.randint(5, 9),), generator=g).tolist()
        for _ in range(samples):
            for inst, prompt, role in [
                ("generator/0", solve, "generator"),
                ("generator/1", solve, "generator"),
                ("generator/2", solve, "generator"),
                ("aggregator", pick, "aggregator"),
            ]:
                completion = torch.randint(3, len(tok), (rand.randint(2, 5),), generator=g).tolist()
                t = Turn(role, inst, pid, prompt, completion, [0.0] * len(completion), "", "stop")
                t.advantage = rand.choice([-1.5, -0.5, 0.5, 1.0, 2.0])
                out.append(t)
    return out


def on_policy(turns: list[Turn], policies: PolicySet, pid: str, pad_id: int) -> list[Turn]:
    """Record the current model's log-probs as the sampler's (ratio 1, as on a fresh step)."""
    batch = collate(turns, pad_id, share_prompts=False)
    with torch.no_grad(), policies.training(pid) as model:
        logp, _ = completion_logprobs(model, batch, 1.0)
    for i, t in enumerate(turns):
        t.logprobs = logp[i, : len(t.completion_ids)].tolist()
    return turns


def reference_grad(
    policies: PolicySet,
    pid: str,
    rows: list[Turn],
    all_rows: list[Turn],
    cfg,
    pad_id: int,
    *,
    kl_coef: float = 0.0,
    weight: float = 1.0,
) -> torch.Tensor:
    """d/dtheta of `rows`' part of the mini-batch loss (normalised over `all_rows`), by its own backward."""
    tc = cfg.train
    norms = {
        "total_tokens": sum(len(t.completion_ids) for t in all_rows),
        "total_seqs": sum(1 for t in all_rows if t.completion_ids),
    }
    batch = collate(rows, pad_id, share_prompts=False)
    params = policies.parameters(pid)
    with policies.training(pid) as model:
        for p in params:
            p.grad = None
        logp, _ = completion_logprobs(model, batch, cfg.rollout.temperature)
        ref = None
        if kl_coef:
            with torch.no_grad(), policies.reference_model() as r:
                ref, _ = completion_logprobs(r, batch, cfg.rollout.temperature)
        loss, _ = clipped_surrogate(
            logp,
            batch["old_logp"],
            batch["advantages"],
            batch["mask"],
            tc.clip_low,
            tc.clip_high,
            tc.loss_agg,
            ref_logp=ref,
            kl_coef=kl_coef,
            max_len=cfg.rollout.max_new_tokens,
            **norms,
        )
        (loss * weight).backward()
        g = flat_grad(params)
        for p in params:
            p.grad = None
    return g


def sgd_update(
    policies: PolicySet, pid: str, turns: list[Turn], cfg, pad_id: int, **kwargs
) -> tuple[torch.Tensor, dict]:
    """Run update_policy with SGD(lr=1) and no clipping: returns (the gradient it applied, its stats)."""
    params = policies.parameters(pid)
    before = flat_params(params)
    opt = torch.optim.SGD(params, lr=1.0)
    stats = update_policy(
        pid,
        turns,
        cfg=cfg,
        policies=policies,
        optimizer=opt,
        pad_id=pad_id,
        rng=random.Random(0),
        check_logprobs=False,
        **kwargs,
    ).stats
    return before - flat_params(params), stats


def setup(model_dir: str, pids: tuple[str, ...] = ("shared",), mode: str = "lora"):
    """A tokenizer and policies whose LoRA B matrices are random (at PEFT's init B = 0, so A has no gradient
    and the policy equals the base model: no KL gradient either)."""
    tok = load_tokenizer(model_dir)
    policies = PolicySet(model_dir, list(pids), mode=mode, lora={"r": 4, "alpha": 8})
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for pid in pids:
            for name, p in policies.models[pid].named_parameters():
                if "lora_B" in name and f".{pid}." in name:
                    p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    return tok, policies
