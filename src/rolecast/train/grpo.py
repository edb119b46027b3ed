"""The GRPO training loop, top to bottom in one file.

One training step:
  1. sample problems (deterministic in (seed, step), so a resumed run sees the same data);
  2. run the workflow G times per problem -> episodes (the rollout engine batches every role call);
  3. score final answers and claims; attribute rewards to turns (team | role | custom);
  4. group turns by (problem, role) and compute group-relative advantages;
  5. for each policy: recompute log-probs under the current weights, clipped surrogate (+ optional KL),
     micro-batched backward, gradient clipping, optimizer step (skipped and logged if not finite);
  6. log metrics / episodes, evaluate, checkpoint atomically.
The loop never branches on which workflow ran: it only sees episodes, turns, roles and policy ids.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.utils.checkpoint
from transformers import DynamicCache

from rolecast.config import RunConfig, dump_config, resume_changes
from rolecast.core.devices import resolve_device
from rolecast.core.episode import Episode, Turn, distinct_rows, group_turns, turns_by_policy
from rolecast.core.errors import ConfigError, TrainingDiverged
from rolecast.diagnostics.gradients import GradientMonitor, InstanceGradients, flat_params, instance_segments, norm64
from rolecast.diagnostics.metrics import episode_metrics
from rolecast.diagnostics.warnings import EarlyWarning, metric_entries
from rolecast.evaluation import append_eval_row, eval_key
from rolecast.policies import PolicySet
from rolecast.policies.models import cache_keyword
from rolecast.rollout.engine import RolloutStats, run_episodes
from rolecast.runtime import Runtime, build_runtime
from rolecast.scoring import attribute, score_episodes, study_ended_rewards
from rolecast.tasks.base import Problem
from rolecast.train import distributed
from rolecast.train.advantages import episode_turn_advantages
from rolecast.train.checkpoint import (
    capture_rng_state,
    latest_step,
    load_checkpoint,
    load_latest_intact,
    restore_rng_state,
    restore_trainer_state,
    save_checkpoint,
    trainer_state,
)
from rolecast.train.distributed import Dist
from rolecast.train.interrupt import StopRequest, TrainingInterrupted
from rolecast.train.interventions import Interventions
from rolecast.train.losses import (
    clipped_surrogate,
    clipped_tokens,
    k3_kl,
    linear_logprobs,
    token_entropy,
    token_logprobs,
)
from rolecast.train.master_weights import MasterWeightAdamW, needs_master
from rolecast.train.rollback import Rollback, RollbackEvent
from rolecast.train.run_dir import check_resume_dir, cut_back_jsonl, discard_new_run, prepare_new_run_dir, read_jsonl
from rolecast.train.sampling import step_problems
from rolecast.train.schedule import build as build_schedule
from rolecast.train.schedule import seek

log = logging.getLogger("rolecast.train")


def _step_seed(seed: int, step: int, stream: int) -> int:
    """Independent, reproducible seeds per (run seed, step, purpose)."""
    return (seed * 1_000_003 + step * 97 + stream) % (2**63)


def default_run_dir(cfg: RunConfig) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return (
        Path("runs") / f"{cfg.task.name}-{Path(cfg.workflow.name).name.replace(':', '.')}-{cfg.routing.sharing}-{stamp}"
    )


# ---------------------------------------------------------------------------------------------------------
# Turning turns into tensors


def collate(turns: list[Turn], pad_id: int, share_prompts: bool = True) -> dict[str, torch.Tensor]:
    """[left-padded prompt | right-padded completion]: completions occupy the last L columns, so the
    model only has to project the last L+1 hidden states onto the vocabulary.

    `share_prompts`: when rows repeat a prompt (a GRPO group samples one prompt G times; parallel agents of a
    role often share theirs), `prompt_rows [U]` picks one row per distinct prompt and `prompt_of_row [B]`
    maps every row to it, so `completion_logprobs` runs each distinct prompt through the model once."""
    P = max(len(t.prompt_ids) for t in turns)
    L = max(len(t.completion_ids) for t in turns)
    B = len(turns)
    ids = torch.full((B, P + L), pad_id, dtype=torch.long)
    attn = torch.zeros((B, P + L), dtype=torch.long)
    old = torch.zeros((B, L))
    for i, t in enumerate(turns):
        p, c = len(t.prompt_ids), len(t.completion_ids)
        ids[i, P - p : P] = torch.tensor(t.prompt_ids)
        ids[i, P : P + c] = torch.tensor(t.completion_ids)
        attn[i, P - p : P + c] = 1
        old[i, :c] = torch.tensor(t.logprobs)
    positions = (attn.cumsum(-1) - 1).clamp(min=0)  # left padding needs explicit positions
    batch = {
        "input_ids": ids,
        "attention_mask": attn,
        "position_ids": positions,
        "targets": ids[:, P:],
        "mask": attn[:, P:].float(),
        "old_logp": old,
        "advantages": torch.tensor([t.advantage for t in turns], dtype=torch.float32),
        "L": torch.tensor(L),
    }
    first, of_row = distinct_rows(tuple(t.prompt_ids) for t in turns)
    if share_prompts and len(first) < B:
        batch["prompt_rows"] = torch.tensor(first, dtype=torch.long)
        batch["prompt_of_row"] = torch.tensor(of_row, dtype=torch.long)
    return batch


def micro_batches(turns: list[Turn], token_budget: int) -> list[list[Turn]]:
    """Consecutive chunks whose forward size stays within the budget: distinct prompts x longest prompt plus
    rows x longest completion (what `collate` + `completion_hidden_states` run; every distinct prompt once)."""
    out: list[list[Turn]] = []
    cur: list[Turn] = []
    prompts: set[tuple[int, ...]] = set()
    longest_p = longest_c = 0
    for t in turns:
        key = tuple(t.prompt_ids)
        p, c = max(longest_p, len(key)), max(longest_c, len(t.completion_ids))
        if cur and (len(prompts | {key})) * p + (len(cur) + 1) * c > token_budget:
            out.append(cur)
            cur, prompts, p, c = [], set(), len(key), len(t.completion_ids)
        cur.append(t)
        prompts.add(key)
        longest_p, longest_c = p, c
    if cur:
        out.append(cur)
    return out


def batching_order(turns: list[Turn]) -> list[Turn]:
    """Rows of one prompt next to each other (so micro-batches share prompts), prompts of similar length
    together and completions by length within a prompt (less padding)."""
    return sorted(turns, key=lambda t: (len(t.prompt_ids), t.prompt_ids, len(t.completion_ids)))


def completion_hidden_states(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The decoder's last hidden states at the positions that predict each completion token, `[B, L, H]`.

    With `prompt_rows` in the batch (rows repeat prompts), each distinct prompt runs through the decoder once;
    its key/value cache, indexed per row, is the context the completions attend to. Autograd sums every
    row's gradient into its prompt's keys and values, so log-probs and gradients equal those of the full
    `[B, P + L]` forward (tests/test_trainer.py checks both), at the cost of U x P + B x L positions instead of
    B x (P + L): a quarter less work for 8 samples of a 76-token prompt with 192-token completions."""
    decoder, L = model.get_decoder(), int(batch["L"])
    if "prompt_rows" not in batch:
        hidden = decoder(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            position_ids=batch["position_ids"],
            use_cache=False,
        ).last_hidden_state
        return hidden[:, -L - 1 : -1]
    P = batch["input_ids"].shape[1] - L
    first, of_row = batch["prompt_rows"], batch["prompt_of_row"]
    prompt_cache = DynamicCache()
    prompts = decoder(
        input_ids=batch["input_ids"][first, :P],
        attention_mask=batch["attention_mask"][first, :P],
        position_ids=batch["position_ids"][first, :P],
        use_cache=True,
        **{cache_keyword(model): prompt_cache},
    ).last_hidden_state
    row_cache = DynamicCache()
    layers: list[Any] = list(prompt_cache.layers)  # full-attention layers: keys and values are tensors
    for i, layer in enumerate(layers):
        row_cache.update(layer.keys[of_row], layer.values[of_row], i)
    completions = decoder(
        input_ids=batch["input_ids"][:, P:],
        attention_mask=batch["attention_mask"],
        position_ids=batch["position_ids"][:, P:],
        use_cache=True,
        **{cache_keyword(model): row_cache},
    ).last_hidden_state
    # the last prompt position (column P - 1 for every left-padded prompt) predicts the first completion token
    return torch.cat([prompts[of_row, -1:], completions[:, :-1]], dim=1)


def completion_logprobs(
    model, batch: dict[str, torch.Tensor], temperature: float, chunk_tokens: int | None = None, fused_head: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs of the completion tokens under softmax(logits / T) (the sampler's distribution), and the
    per-token entropy (detached), both `[B, L]`.

    The `[B, L, V]` logits never exist at once (1.9 GB in fp32 for 16 x 193 positions of Qwen3's 151,936-token
    vocabulary): a plain linear head goes through `losses.linear_logprobs` (projection, log-prob and entropy
    in one pass per chunk of positions, logits recomputed in backward); any other head module runs per chunk
    under activation checkpointing (`fused_head=False` forces that path, for tests and debugging)."""
    L = int(batch["L"])
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    hidden = completion_hidden_states(base, batch)
    head = base.get_output_embeddings()
    scale = 1.0 / temperature if temperature > 0 else 1.0
    B, _, H = hidden.shape
    flat_h, flat_t = hidden.reshape(B * L, H), batch["targets"].reshape(B * L)
    if fused_head and type(head) is torch.nn.Linear:
        logp, entropy = linear_logprobs(flat_h, head.weight, head.bias, flat_t, scale, chunk_tokens)
        return logp.float().reshape(B, L), entropy.float().reshape(B, L)

    def chunk_logp(h: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return token_logprobs((head(h).float() * scale)[None], t[None])[0]

    chunk_tokens = chunk_tokens or 1024
    logps, entropies = [], []
    for s in range(0, B * L, chunk_tokens):
        h, t = flat_h[s : s + chunk_tokens], flat_t[s : s + chunk_tokens]
        if torch.is_grad_enabled() and h.requires_grad:
            logps.append(torch.utils.checkpoint.checkpoint(chunk_logp, h, t, use_reentrant=False))
        else:
            logps.append(chunk_logp(h, t))
        with torch.no_grad():
            entropies.append(token_entropy((head(h.detach()).float() * scale)[None])[0])
    return torch.cat(logps).reshape(B, L), torch.cat(entropies).reshape(B, L)


# ---------------------------------------------------------------------------------------------------------
# One policy's update


TALLY_KEYS = ("tokens", "entropy", "clip_fraction", "approx_kl", "kl")


def generation_caps(cfg: RunConfig, turns: list[Turn]) -> int | torch.Tensor:
    """The generation cap that normalises a length-normalised loss (seq-mean-token-sum): the run's
    max_new_tokens, or with per-role caps each row's own role cap."""
    by_role = cfg.rollout.max_new_tokens_by_role
    if not by_role:
        return cfg.rollout.max_new_tokens
    return torch.tensor([by_role.get(t.role, cfg.rollout.max_new_tokens) for t in turns], dtype=torch.float32)


class NonFiniteUpdate(RuntimeError):
    """An optimizer step that could not produce finite weights (the run cannot go on from its state)."""


def update_policy(
    pid: str,
    turns: list[Turn],
    *,
    cfg: RunConfig,
    policies: PolicySet,
    optimizer,
    pad_id: int,
    rng: random.Random,
    check_logprobs: bool,
    monitor: GradientMonitor | None = None,
    interventions: Interventions | None = None,
    dist: Dist | None = None,
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Update one policy on its turns. Returns the policy's stats and per-role token tallies (summed over
    tokens, so the caller can merge roles that span several policies).

    `monitor` (only on steps where gradient diagnostics run) receives per-instance gradients of the first pass
    over the data and each optimizer step's size. `interventions` defaults to the config's (None when all are
    off). Per-instance gradients need each mini-batch's rows grouped by agent instance before micro-batching,
    which changes the summation order of the accumulated gradient (equal to float tolerance, not bit for
    bit); without a monitor and without a rescaling intervention the rows are batched exactly as before.

    `dist` (a data-parallel run, train/distributed.py): `turns` are this process's share; counts, gradients,
    losses and tallies are summed over processes, so the step equals one process's on all the turns."""
    tc = cfg.train
    dist = dist or Dist()
    if interventions is None:
        interventions = Interventions.from_config(cfg)
    instance_counts: dict[str, int] = {}  # a role's parallel instances on this policy (multiplicity_norm)
    for role, _ in {(t.role, t.instance) for t in turns}:
        instance_counts[role] = instance_counts.get(role, 0) + 1
    turns = [t for t in turns if t.completion_ids]  # an empty completion carries no token to learn from
    if tc.mask_truncated:
        turns = [t for t in turns if t.finish_reason != "length"]
    # skipped_in_a_row: skipped updates since the last good one (train() adds it up across steps and pops it)
    stats = {"optimizer_steps": 0.0, "skipped_nan": 0.0, "loss": 0.0, "skipped_in_a_row": 0.0}
    tally: dict[str, dict[str, float]] = {}
    if not dist.total(len(turns))[0]:
        if monitor is not None:
            monitor.finish_policy(pid, turns, policies.parameters(pid))
        return stats, tally
    grad_norms: list[float] = []
    params = policies.parameters(pid)
    temperature = cfg.rollout.temperature
    rescale = interventions is not None and interventions.rescales
    # train.old_logprobs trainer: the ratio's denominator is the trainer's log-prob before this update, computed
    # up front (verl's compute_log_prob) unless the update is one mini-batch in one pass, where verl takes the
    # forward's own, detached; gap: |sampler - trainer| summed over tokens, and the tokens
    recomputed: dict[int, torch.Tensor] | None = None
    on_policy, gap = False, [0.0, 0.0]
    if tc.old_logprobs == "trainer":
        n_all = int(dist.total(len(turns))[0])
        on_policy = tc.epochs == 1 and (tc.update_schedule == "per_step" or n_all <= tc.mini_batch_size)
        if not on_policy:
            with policies.training(pid) as model:
                recomputed = trainer_logprobs(model, turns, pad_id, policies.device, temperature, tc.micro_batch_tokens)
            for t in turns:
                gap[0] += float((torch.tensor(t.logprobs) - recomputed[id(t)]).abs().sum())
                gap[1] += len(t.completion_ids)
    for epoch in range(tc.epochs):
        if tc.update_schedule == "per_step":
            minibatches = [turns]
        else:  # one shuffle of the global batch, so several processes take the same mini-batches as one
            minibatches = dist.minibatches(turns, rng, tc.mini_batch_size)
        for mb in minibatches:
            optimizer.zero_grad(set_to_none=True)
            # the whole mini-batch's counts normalise every micro-batch, so accumulation equals one big batch
            tokens, seqs = dist.total(sum(len(t.completion_ids) for t in mb), sum(1 for t in mb if t.completion_ids))
            norms = {"total_tokens": int(tokens), "total_seqs": int(seqs)}
            if tc.minibatch_scale == "nominal":  # a short (last) mini-batch takes a proportionally smaller step
                mb_scale = dist.total(len(mb))[0] / tc.mini_batch_size
            finite, loss_sum = True, 0.0
            mb_tally: dict[str, dict[str, float]] = {}
            diagnose = monitor is not None and epoch == 0
            per_instance = diagnose or rescale
            # per-instance gradients: each agent instance's rows form their own micro-batches (diagnostics.gradients)
            segments = instance_segments(mb) if per_instance else [mb]
            grads = (
                InstanceGradients(params, sketch=monitor.sketch if diagnose and monitor else None, keep_roles=rescale)
                if per_instance
                else None
            )
            with policies.training(pid) as model:
                # the loss is normalised over the whole mini-batch, so any split into micro-batches is exact
                for segment in segments:
                    for micro in micro_batches(batching_order(segment), tc.micro_batch_tokens):
                        batch = to_device(collate(micro, pad_id), policies.device)
                        logp, entropy = completion_logprobs(model, batch, temperature)
                        mask, old, adv = batch["mask"], batch["old_logp"], batch["advantages"]
                        if on_policy:
                            gap[0] += float(((logp.detach() - old).abs() * mask).sum())
                            gap[1] += float(mask.sum())
                            old = logp.detach()
                        elif recomputed is not None:
                            old = padded_rows([recomputed[id(t)] for t in micro], old.shape[1]).to(old.device)
                        roles = [t.role for t in micro]
                        kl_coef: float | torch.Tensor = tc.kl_coef
                        row_kl = interventions.kl_coefs(roles) if interventions is not None else None
                        if row_kl is not None:
                            kl_coef = row_kl.to(logp.device)
                        ref_logp = None
                        if tc.kl_coef > 0 or (row_kl is not None and bool((row_kl > 0).any())):
                            with torch.no_grad(), policies.reference_model() as ref:
                                ref_logp, _ = completion_logprobs(ref, batch, temperature)
                        if check_logprobs and tc.old_logprobs == "sampler":  # trainer: the gap is logged
                            gap_ = float(((logp.detach() - old).abs() * mask).sum() / mask.sum().clamp(min=1))
                            if gap_ > tc.logprob_check_tol:
                                raise RuntimeError(
                                    f"policy {pid!r}: trainer log-probs differ from the sampler's by {gap_:.4f} per "
                                    f"token (tolerance {tc.logprob_check_tol}); generation and training do not "
                                    f"compute the same distribution (temperature, padding/position ids, dropout or "
                                    f"dtype mismatch)"
                                )
                            check_logprobs = False
                        weights = (
                            interventions.row_weights(roles, instance_counts) if interventions is not None else None
                        )
                        loss, _ = clipped_surrogate(
                            logp,
                            old,
                            adv,
                            mask,
                            tc.clip_low,
                            tc.clip_high,
                            tc.loss_agg,
                            ref_logp=ref_logp,
                            kl_coef=kl_coef,
                            max_len=to_device(generation_caps(cfg, micro), logp.device),
                            row_weights=to_device(weights, logp.device),
                            dual_clip=tc.dual_clip,
                            **norms,
                        )
                        if tc.minibatch_scale == "nominal":  # verl: each micro-batch x its rows / mini-batch size
                            loss = loss * mb_scale
                        if not torch.isfinite(loss):
                            finite = False
                            break
                        loss.backward()
                        loss_sum += float(loss.detach())
                        with torch.no_grad():  # per-sequence sums, attributed to each turn's role
                            lp = logp.detach()
                            per_seq = {
                                "tokens": mask.sum(-1),
                                "entropy": (entropy * mask).sum(-1),
                                "clip_fraction": (clipped_tokens(lp, old, adv, tc.clip_low, tc.clip_high) * mask).sum(
                                    -1
                                ),
                                "approx_kl": ((old - lp) * mask).sum(-1),
                                "kl": (
                                    (k3_kl(lp, ref_logp) * mask).sum(-1)
                                    if ref_logp is not None
                                    else torch.zeros(len(micro), device=lp.device)
                                ),
                            }
                        seq_values = {k: v.tolist() for k, v in per_seq.items()}  # one device sync, not one per row
                        for i, t in enumerate(micro):
                            row = mb_tally.setdefault(t.role, dict.fromkeys(TALLY_KEYS, 0.0))
                            for k in TALLY_KEYS:
                                row[k] += seq_values[k][i]
                    if not finite:
                        break
                    if grads is not None:
                        grads.capture(segment[0].role, segment[0].instance)
            finite = dist.all_true(finite)  # every process skips a non-finite step, or none does
            if finite and grads is not None:
                grads.all_reduce(dist)  # per-instance gradients of the global batch
                if diagnose and monitor is not None:
                    monitor.add_gradients(pid, grads)  # the raw role gradients, before any intervention
                coefs = (
                    interventions.role_coefficients(pid, grads.role_vectors()) if rescale and interventions else None
                )
                grads.write_back(coefs)
            elif finite:
                dist.sum_gradients(params)
            grad_norm = (
                torch.nn.utils.clip_grad_norm_(params, tc.max_grad_norm) if finite else torch.tensor(float("nan"))
            )
            if not finite or not torch.isfinite(grad_norm):
                # Never train on a NaN/inf step: drop its gradients, count it, say so.
                optimizer.zero_grad(set_to_none=True)
                stats["skipped_nan"] += 1
                stats["skipped_in_a_row"] += 1
                log.warning("policy %s: non-finite loss or gradient; optimizer step skipped", pid)
                continue
            before = flat_params(params) if monitor is not None else None
            try:
                optimizer.step()
            except RuntimeError as e:  # AdamW raises when lr x update overflows float32 (e.g. lr 1e38)
                if "overflow" not in str(e):
                    raise
                raise NonFiniteUpdate(f"policy {pid!r}: the optimizer step overflowed ({e})") from None
            stats["skipped_in_a_row"] = 0.0
            if monitor is not None and before is not None:
                roles = dist.concat(sorted({t.role for t in mb}))
                monitor.add_update(pid, norm64(flat_params(params) - before), roles)
            stats["optimizer_steps"] += 1
            stats["loss"] += dist.total(loss_sum)[0]
            grad_norms.append(float(grad_norm))
            merge_tallies(tally, dist.merge_tallies(mb_tally))
    stats["loss"] /= max(stats["optimizer_steps"], 1)
    if tc.old_logprobs == "trainer":  # mean |sampler - trainer| log-prob per token, before this update
        gap_sum, gap_tokens = dist.total(*gap)
        stats["logprob_gap"] = gap_sum / gap_tokens if gap_tokens else float("nan")
    stats["grad_norm"] = sum(grad_norms) / len(grad_norms) if grad_norms else float("nan")
    stats.update(tally_means({k: sum(row[k] for row in tally.values()) for k in TALLY_KEYS}))
    if monitor is not None:
        monitor.finish_policy(pid, dist.concat(turns), params)
    return stats, tally


def trainer_logprobs(
    model, turns: list[Turn], pad_id: int, device: torch.device, temperature: float, token_budget: int
) -> dict[int, torch.Tensor]:
    """Each turn's completion log-probs under the model as it is (no gradient), keyed by `id(turn)`, float32 on
    the CPU: train.old_logprobs trainer's denominator, computed before the update as verl's compute_log_prob."""
    out: dict[int, torch.Tensor] = {}
    with torch.no_grad():
        for micro in micro_batches(batching_order(turns), token_budget):
            logp, _ = completion_logprobs(model, to_device(collate(micro, pad_id), device), temperature)
            for i, t in enumerate(micro):
                out[id(t)] = logp[i, : len(t.completion_ids)].float().cpu()
    return out


def padded_rows(rows: list[torch.Tensor], width: int) -> torch.Tensor:
    """1-D rows right-padded with 0 to `[len(rows), width]` (collate's layout of completion positions)."""
    out = torch.zeros(len(rows), width)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def to_device(x: Any, device: torch.device) -> Any:
    """A tensor, or each tensor of a dict, on `device` (unchanged where it already is: the CPU path copies nothing)."""
    if isinstance(x, dict):
        return {k: to_device(v, device) for k, v in x.items()}
    return x.to(device) if isinstance(x, torch.Tensor) and x.device != device else x


def merge_tallies(into: dict[str, dict[str, float]], tally: dict[str, dict[str, float]]) -> dict:
    """Add per-role token sums ({role: {key: sum}}) into `into`."""
    for role, row in tally.items():
        dst = into.setdefault(role, dict.fromkeys(TALLY_KEYS, 0.0))
        for k, v in row.items():
            dst[k] += v
    return into


def tally_means(row: dict[str, float]) -> dict[str, float]:
    n = row.get("tokens", 0.0)
    out = {"tokens": n}
    out.update({k: (row.get(k, 0.0) / n if n else float("nan")) for k in TALLY_KEYS if k != "tokens"})
    return out


# ---------------------------------------------------------------------------------------------------------
# The run


def train(
    cfg: RunConfig,
    *,
    resume: str | Path | None = None,
    stop_after: int | None = None,
    overwrite: bool = False,
    console: Any = None,
    stop: StopRequest | None = None,
) -> dict[str, Any]:
    """Train per `cfg`; `stop_after` ends this session after that many steps (as a pre-empted job would),
    leaving a checkpoint to `resume` from. `resume`: the run directory to continue; `cfg` may differ from its
    config.yaml only in the fields of `config.RESUME_CHANGEABLE`. A new run refuses a directory that already
    holds one unless `overwrite`. Raises TrainingDiverged when training diverges (docs/training.md).

    `stop` (the command line's Ctrl-C handling, train/interrupt.py): a requested stop checkpoints the step just
    finished and raises TrainingInterrupted; so does any KeyboardInterrupt, naming the newest checkpoint."""
    from rolecast.report.console import Console

    # one process, or this process's place in a torchrun launch (train/distributed.py)
    dist = distributed.from_env(resolve_device(cfg.model.device))
    console = console if dist.is_main and console else Console(enabled=cfg.logging.progress and dist.is_main)
    # --- the run directory, checked before anything is loaded or written ---
    changes: dict[str, tuple[Any, Any]] = {}
    created: list[Path] = []
    if resume:
        run_dir = Path(resume)
        changes = resume_changes(check_resume_dir(run_dir), cfg, run_dir / "config.yaml")
        newest = latest_step(run_dir)
        if newest is not None and cfg.train.steps < newest:
            raise ConfigError(f"train.steps: {cfg.train.steps} is below the step {newest} {run_dir} has reached")
    else:
        # rank 0 names (a default name holds the time) and prepares the directory; the others wait for it
        run_dir = dist.gather(Path(cfg.run_dir) if cfg.run_dir else default_run_dir(cfg))[0]
        created = prepare_new_run_dir(run_dir, overwrite) if dist.is_main else []
        dist.barrier()
    session: _Session | None = None
    try:
        try:
            session = _Session.open(cfg, run_dir, resume=bool(resume), changes=changes, console=console, dist=dist)
        except BaseException:
            if not resume and dist.is_main:
                discard_new_run(run_dir, created)
            raise
        return session.run(stop_after, discard_on_early_failure=None if resume else created, stop=stop)
    except KeyboardInterrupt as e:
        if stop is None or isinstance(e, TrainingInterrupted):
            raise
        kept = run_dir.is_dir()
        newest = latest_step(run_dir) if kept else None
        # a stop while a checkpoint was being finished (pruning the old ones) has that step's checkpoint complete
        reached = max(session.reached if session is not None else 0, newest or 0)
        raise TrainingInterrupted(run_dir, reached, cfg.train.steps, newest, at_once=True, kept=kept) from None
    finally:
        dist.close()


def _apply_lr(
    cfg: RunConfig,
    schedulers: dict[str, Any],
    scale: float = 1.0,
    last_epoch: int | None = None,
) -> None:
    """After restoring optimizer and scheduler state, make a changed train.lr (or train.steps, which moves
    the cosine schedule) take effect: the restored state carries the old base lr and the lr it last set.
    `scale`: the rollbacks' multiplier on train.lr; `last_epoch`: move the schedule to that position (a
    rollback restores an earlier scheduler state, but the run goes on from the step it reached)."""
    for sched in schedulers.values():
        seek(sched, sched.last_epoch if last_epoch is None else last_epoch, base_lr=cfg.train.lr * scale)


@dataclass
class _Session:
    """One process's share of a run: built by `open` (model, optimizers, restored state, run files), then
    `run` trains from the restored step."""

    cfg: RunConfig
    run_dir: Path
    rt: Runtime
    train_pool: list[Problem]
    eval_set: list[Problem]
    optimizers: dict[str, torch.optim.Optimizer]
    schedulers: dict[str, Any]
    start: int
    guard: DivergenceGuard
    console: Any
    loggers: Any
    monitor: GradientMonitor | None  # per-role gradient diagnostics (None when off)
    interventions: Interventions | None  # None when all are off
    warn: EarlyWarning
    dist: Dist  # one process, or this one's place in a data-parallel run; only rank 0 writes run files
    rollback: Rollback | None  # rollback on early warning (None when off)
    # train.lr_clock role_update: policy updates made so far, the position of the one schedule they share
    # (a rollback keeps it: the run goes on from the updates it reached); unused under the step clock
    lr_clock: int = 0
    # eval.extra_sets: (name, task, problems) of each further held-out set, and the pass@1 each last measured
    extra_evals: tuple[tuple[str, Any, list[Problem]], ...] = ()
    extra_pass: dict[str, float] = field(default_factory=dict)
    reached: int = 0  # the last step completed (in this session or before it)

    @classmethod
    def open(
        cls,
        cfg: RunConfig,
        run_dir: Path,
        *,
        resume: bool,
        changes: dict[str, tuple[Any, Any]],
        console: Any,
        dist: Dist | None = None,
    ) -> _Session:
        from rolecast.report.console import MetricLoggers

        # --- what to run and what to train (all checked at config load) ---
        rt = build_runtime(cfg)
        train_pool = list(rt.task.problems(cfg.task.train_split))
        eval_set = list(rt.task.problems(cfg.task.eval_split))[: cfg.eval.size]
        extra_evals = _extra_eval_sets(cfg)
        if not train_pool:
            raise ConfigError(f"task {cfg.task.name!r} has no problems in split {cfg.task.train_split!r}")

        # one optimizer and lr schedule per policy: an update of one policy never touches another's parameters
        optimizers: dict[str, torch.optim.Optimizer] = {}
        schedulers: dict[str, Any] = {}
        for pid in rt.routing.policy_ids:
            params = list(rt.policies.parameters(pid))
            adamw = MasterWeightAdamW if cfg.train.fp32_master_weights and needs_master(params) else torch.optim.AdamW
            optimizers[pid] = adamw(params, lr=cfg.train.lr, betas=cfg.train.betas, weight_decay=cfg.train.weight_decay)
            schedulers[pid] = build_schedule(
                optimizers[pid],
                cfg.train.lr_schedule,
                cfg.train.warmup_steps,
                max(cfg.train.steps, 1),
                cfg.train.min_lr_ratio,
            )

        # gradient diagnostics and interventions (None when off); built before a checkpoint is loaded, so the
        # monitor's copy of the starting weights (for drift) is the initialisation, not the resumed weights
        monitor = GradientMonitor.from_config(cfg, rt.policies, rt.routing.policy_ids)
        interventions = Interventions.from_config(cfg)
        warn = EarlyWarning(extract=rt.task.extract_answer)
        rollback = Rollback.from_config(cfg)

        start, damaged, lr_clock = 0, list[str](), 0
        guard = DivergenceGuard(cfg.train, rt.policies.vocab_size)
        if resume and latest_step(run_dir) is not None:
            start, state, damaged = load_latest_intact(run_dir)
            if cfg.train.steps < start:
                raise ConfigError(f"train.steps: {cfg.train.steps} is below the step {start} {run_dir} has reached")
            guard.counts = restore_trainer_state(state, rt.policies, optimizers, schedulers).get("guard", {})
            if monitor is not None:
                monitor.load_state_dict(state.get("diagnostics/gradients"))
            if interventions is not None:
                interventions.load_state_dict(state.get("interventions"))
            if "early_warning" in state:
                warn.load_state_dict(state["early_warning"])
            if rollback is not None:
                rollback.load_state_dict(state.get("rollback"))
            lr_clock = int(state.get("lr_clock", 0))
            if "train.lr" in changes or "train.steps" in changes:
                _apply_lr(cfg, schedulers, scale=rollback.lr_scale if rollback else 1.0)

        # --- from here on the run directory is written (by rank 0 alone) ---
        dist = dist or Dist()
        if dist.is_main:
            (run_dir / "episodes").mkdir(exist_ok=True)
            (run_dir / "config.yaml").write_text(dump_config(cfg))
            # forget what was logged after the checkpoint we resume from (it is redone); rows of `rolecast eval`
            # (tag "checkpoint") are not the trainer's to cut
            cut_back_jsonl(run_dir / "metrics.jsonl", lambda r: 0 < r.get("step", 0) <= start)
            cut_back_jsonl(
                run_dir / "eval.jsonl",
                lambda r: r.get("tag") not in _TRAINER_EVAL_TAGS or (start > 0 and r.get("step", 0) <= start),
            )
            for name, _, _ in extra_evals:
                cut_back_jsonl(run_dir / f"eval_{name}.jsonl", lambda r: start > 0 and r.get("step", 0) <= start)
            if resume:
                note = {
                    "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "step": start,
                    "changed": {k: list(v) for k, v in changes.items()},
                    "damaged_checkpoints": damaged,
                }
                with open(run_dir / "resumes.jsonl", "a") as f:
                    f.write(json.dumps(note) + "\n")
                what = "; ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in changes.items())
                console.print(f"resumed from {run_dir} at step {start}" + (f" (changed: {what})" if what else ""))
        extras = {} if dist.is_main else {"tensorboard": False, "wandb": False}
        loggers = MetricLoggers(cfg.logging.model_copy(update=extras), run_dir)
        return cls(
            cfg=cfg,
            run_dir=run_dir,
            rt=rt,
            train_pool=train_pool,
            eval_set=eval_set,
            optimizers=optimizers,
            schedulers=schedulers,
            start=start,
            guard=guard,
            console=console,
            loggers=loggers,
            monitor=monitor,
            interventions=interventions,
            warn=warn,
            dist=dist,
            rollback=rollback,
            lr_clock=lr_clock,
            extra_evals=extra_evals,
        )

    def run_eval(self, step: int, tag: str) -> dict[str, Any]:
        cfg, rt = self.cfg, self.rt
        backend: Any = rt.backend
        backend.temperature, saved = cfg.eval.temperature, backend.temperature
        # eval.top_p: the evaluation's own nucleus (None: the rollout's, unchanged); backends without one ignore it
        top_p = getattr(backend, "top_p", None) if cfg.eval.top_p is not None else None
        if top_p is not None:
            backend.top_p = cfg.eval.top_p
        backend.reseed(_step_seed(cfg.seed, step, 2))
        try:
            res = rt.evaluate(
                self.eval_set, n_samples=cfg.eval.n_samples, options=cfg.workflow.options, ks=(1, cfg.eval.n_samples)
            )
            extra = []
            for name, task, problems in self.extra_evals:  # each further set from the same seed as the first
                backend.reseed(_step_seed(cfg.seed, step, 2))
                extra_res = rt.evaluate(
                    problems,
                    task=task,
                    n_samples=cfg.eval.n_samples,
                    options=cfg.workflow.options,
                    ks=(1, cfg.eval.n_samples),
                )
                extra.append((name, task, extra_res))
        finally:
            backend.temperature = saved
            if top_p is not None:
                backend.top_p = top_p
        key = eval_key(cfg, run=str(self.run_dir), step=step, tag=tag, workflow=rt.spec.name)
        self.extra_pass = {}
        for name, task, extra_res in extra:
            extra_key = {
                **key,
                "task": task.name,
                "split": next(s.split for s in cfg.eval.extra_sets if s.name == name),
            }
            row = append_eval_row(self.run_dir / f"eval_{name}.jsonl", {**extra_key, "eval_set": name}, extra_res)
            self.extra_pass[name] = row["pass@1"]
            if tag != "periodic":  # periodic ones go with the step's metrics
                self.loggers.log(
                    {f"eval/{name}/pass@1": row["pass@1"], f"eval/{name}/{tag}/pass@1": row["pass@1"]}, step
                )
            self.console.print(
                f"{name} accuracy ({row['n_problems']} problems, step {step}): {row['pass@1']:.3f} ± {row['stderr']:.3f}"
            )
        row = append_eval_row(self.run_dir / "eval.jsonl", key, res)
        if tag != "periodic":  # TensorBoard / W&B: the base (step 0) and final points of the eval/pass@1 curve
            self.loggers.log({"eval/pass@1": row["pass@1"], f"eval/{tag}/pass@1": row["pass@1"]}, step)
        return row

    def run(
        self, stop_after: int | None, discard_on_early_failure: list[Path] | None, stop: StopRequest | None = None
    ) -> dict[str, Any]:
        cfg, run_dir, start = self.cfg, self.run_dir, self.start
        summary: dict[str, Any] = {"run_dir": str(run_dir)}
        total_steps = cfg.train.steps
        end = total_steps if stop_after is None else min(total_steps, start + stop_after)
        self.reached = start
        if discard_on_early_failure is not None and self.dist.is_main:  # a new run (a resume says where it is)
            self.console.print(f"run directory: {run_dir}")
        training = stop.training if stop is not None else contextlib.nullcontext
        progress = self.console.progress(total_steps, start)
        try:
            try:
                try:
                    if cfg.eval.at_start and start == 0 and self.eval_set and self.dist.is_main:
                        row = self.run_eval(0, "base")
                        summary["base_accuracy"] = row["pass@1"]
                        self.console.print(
                            f"base accuracy ({cfg.task.eval_split}, {len(self.eval_set)} problems; "
                            f"{cfg.eval.describe()}): {row['pass@1']:.3f} ± {row['stderr']:.3f}"
                        )
                    if start < end:
                        with training():
                            self.step(start, end, progress)
                            self.stop_if_requested(stop, start)
                except BaseException:
                    # a new run that failed before logging its first step leaves nothing; one that stopped after
                    # (diverged on step 1) keeps its logs, which show why
                    first = not (run_dir / "metrics.jsonl").exists()
                    if discard_on_early_failure is not None and self.dist.is_main and first:
                        self.loggers.close()
                        discard_new_run(run_dir, discard_on_early_failure)
                    raise
                with training():
                    for step in range(start + 1, end):
                        self.step(step, end, progress)
                        self.stop_if_requested(stop, step)
            finally:
                progress.close()

            # the final evaluation also runs when a resumed run finds its last step done but no final row (killed
            # during that evaluation)
            rows = read_jsonl(run_dir / "eval.jsonl")
            done = any(r.get("tag") == "final" and r.get("step") == total_steps for r in rows)
            if cfg.eval.at_end and self.eval_set and end == total_steps and not done and self.dist.is_main:
                row = self.run_eval(total_steps, "final")
                summary["final_accuracy"] = row["pass@1"]
                self.console.print(
                    f"final accuracy ({cfg.task.eval_split}, {len(self.eval_set)} problems; "
                    f"{cfg.eval.describe()}): {row['pass@1']:.3f} ± {row['stderr']:.3f}"
                )
        finally:
            self.loggers.close()
        summary["policies"] = self.rt.routing.policy_ids
        summary["eval_protocol"] = cfg.eval.describe()
        return summary

    def stop_if_requested(self, stop: StopRequest | None, step: int) -> None:
        """After step `step` (0-based) completed: on a requested stop, checkpoint it (unless that is done) and
        raise TrainingInterrupted."""
        self.reached = step + 1
        if stop is None or not stop.requested:
            return
        if self.dist.is_main and latest_step(self.run_dir) != step + 1:
            self.save(step)
        raise TrainingInterrupted(
            self.run_dir, step + 1, self.cfg.train.steps, latest_step(self.run_dir), at_once=False
        )

    def step(self, step: int, end: int, progress: Any) -> None:
        cfg, rt, run_dir = self.cfg, self.rt, self.run_dir
        spec, routing, task, prompts, backend = rt.spec, rt.routing, rt.task, rt.prompts, rt.backend
        policies, monitor, interventions = rt.policies, self.monitor, self.interventions
        total_steps = cfg.train.steps
        t0 = time.perf_counter()
        # 1. problems for this step: a pure function of (seed, step), so resuming needs no data cursor
        problems = step_problems(
            self.train_pool, seed=cfg.seed, step=step, per_step=cfg.train.problems_per_step, mode=cfg.train.sampling
        )
        # 2. rollouts (in a data-parallel run, of this process's share of the problems: whole groups)
        dist = self.dist
        # each process samples its share from its own stream, unless every prompt seeds its own samples
        backend.reseed(_step_seed(cfg.seed + (0 if cfg.rollout.seed_per_prompt else 7919 * dist.rank), step, 1))
        rstats = RolloutStats()
        episodes = run_episodes(
            spec,
            dist.shard(problems),
            cfg.train.group_size,
            task=task,
            prompts=prompts,
            router=routing,
            backend=backend,
            options=cfg.workflow.options,
            stats=rstats,
            max_prompt_tokens=cfg.rollout.max_prompt_tokens,
        )
        t_rollout = time.perf_counter()
        # 3. rewards
        score_episodes(episodes, {p.id: p for p in problems}, task)
        attribute(episodes, cfg.train.attribution)
        if cfg.rollout.max_prompt_tokens and cfg.rollout.ended_reward == "study":
            study_ended_rewards(episodes, task.family)
        t_reward = time.perf_counter()
        # 4. advantages within groups of turns
        episode_turn_advantages(
            group_turns(episodes, cfg.train.group_by), cfg.train.advantage, singleton=cfg.train.singleton_advantage
        )
        # 5. one update per policy, each touching only its own parameters
        by_policy = turns_by_policy(episodes, routing.policy_ids)
        update_rng = random.Random(_step_seed(cfg.seed, step, 3))
        policy_stats: dict[str, dict[str, float]] = {}
        role_tally: dict[str, dict[str, float]] = {}
        norms_before = {pid: _weight_norm(policies.parameters(pid)) for pid in by_policy}
        shared_clock = cfg.train.lr_clock == "role_update"
        for pid, turns in by_policy.items():
            if shared_clock and turns:  # as the study's trainer, which skips a role with no samples
                seek(self.schedulers[pid], self.lr_clock)
            lr = self.schedulers[pid].get_last_lr()[0]  # the lr this step trains with
            try:
                policy_stats[pid], tally = update_policy(
                    pid,
                    turns,
                    cfg=cfg,
                    policies=policies,
                    optimizer=self.optimizers[pid],
                    pad_id=rt.tokenizer.pad_token_id,
                    rng=update_rng,
                    check_logprobs=(step == self.start),
                    monitor=monitor if monitor and monitor.due(step) else None,
                    interventions=self.interventions,
                    dist=dist,
                )
            except NonFiniteUpdate as e:
                raise self.diverged(step + 1, str(e)) from None
            policy_stats[pid]["lr"] = lr
            merge_tallies(role_tally, tally)
            if not shared_clock:
                self.schedulers[pid].step()
            elif turns:
                self.lr_clock += 1
        t_update = time.perf_counter()

        # 6. metrics, samples, evaluation, checkpoint (over every process's episodes; rank 0 writes)
        if dist.active:
            episodes = dist.concat(episodes)
            by_policy = turns_by_policy(episodes, routing.policy_ids)
        metrics: dict[str, Any] = {"step": step + 1, **episode_metrics(episodes)}
        for pid, st in policy_stats.items():
            skipped = st.pop("skipped_in_a_row")
            metrics.update({f"policy/{pid}/{k}": v for k, v in st.items()})
            # a cheap forward on one of the step's prompts catches weights blown up to huge finite values
            probe = next((t.prompt_ids[:32] for t in by_policy[pid] if t.prompt_ids), None)
            finite = not st["optimizer_steps"] or probe is None or policies.outputs_finite(pid, probe)
            self.guard.update(
                pid,
                st,
                skipped,
                outputs_finite=finite,
                norms=(norms_before[pid], _weight_norm(policies.parameters(pid))),
            )
        for role, row in sorted(role_tally.items()):
            metrics.update({f"role/{role}/{k}": v for k, v in tally_means(row).items() if k != "tokens"})
        if monitor is not None:
            metrics.update(monitor.pop_metrics())  # grad/... and update/... (docs/training.md)
        if interventions is not None:
            metrics.update(interventions.pop_metrics())
        metrics.update(
            {
                "time/rollout": t_rollout - t0,
                "time/reward": t_reward - t_rollout,
                "time/update": t_update - t_reward,
                "time/step": t_update - t0,
                "rollout/backend_calls": rstats.backend_calls,
                "rollout/requests": rstats.requests,
            }
        )
        if cfg.rollout.max_prompt_tokens:  # the share of episodes an over-long prompt ended
            ended = sum(ep.metadata.get("ended") == "max_prompt_tokens" for ep in episodes)
            metrics["rollout/ended_max_prompt_tokens"] = ended / max(len(episodes), 1)
        if all(t.finish_reason == "length" for ep in episodes for t in ep.turns):
            log.warning(
                "step %d: no completion ended with an end-of-sequence token within %d tokens; check the "
                "tokenizer's eos token / chat template or raise rollout.max_new_tokens",
                step + 1,
                cfg.rollout.max_new_tokens,
            )
        # early warning: the failure signatures and gradient signals that crossed their thresholds this step
        alerts = self.warn.check(step + 1, metrics, episodes)
        metrics.update(metric_entries(alerts))
        for a in alerts:
            log.info("step %d: early warning %s (%s)", step + 1, a.name, a.subject)
        stop = self.guard.reason(step + 1)
        if self.rollback is not None and not stop:
            event = self.rollback.decide(step + 1, alerts, run_dir)
            if event is not None:
                self.roll_back(event)
                metrics.update(event.metrics())
                log.warning("%s", event.message(self.rollback.max_rollbacks))
                self.console.print(event.message(self.rollback.max_rollbacks))
        due_eval = cfg.eval.every and (step + 1) % cfg.eval.every == 0 and step + 1 < total_steps
        if not stop and due_eval and dist.is_main:
            row = self.run_eval(step + 1, "periodic")
            metrics["eval/pass@1"] = row["pass@1"]
            metrics.update({f"eval/{name}/pass@1": v for name, v in self.extra_pass.items()})
            self.console.print(
                f"eval at step {step + 1} ({len(self.eval_set)} problems; {cfg.eval.describe()}): "
                f"{row['pass@1']:.3f} ± {row['stderr']:.3f}"
            )
        if dist.is_main:
            with open(run_dir / "metrics.jsonl", "a") as f:
                f.write(json.dumps(_finite_or_none(metrics)) + "\n")
        if cfg.logging.episodes_every and (step + 1) % cfg.logging.episodes_every == 0 and dist.is_main:
            _write_episodes(run_dir / "episodes" / f"step_{step + 1}.jsonl", episodes[: cfg.logging.max_episodes])
        self.loggers.log(metrics, step + 1)
        progress.advance(step + 1, metrics["reward"], metrics)
        if stop:
            raise self.diverged(step + 1, stop)
        # A policy on a streak towards a stop is suspect: its weights are not checkpointed, except at the end of
        # this session (a run not declared diverged must stay resumable).
        suspect = self.guard.suspect()
        due = (cfg.checkpoint.every and (step + 1) % cfg.checkpoint.every == 0 and not suspect) or step + 1 == end
        if due and dist.is_main:
            self.save(step)
        self.reached = step + 1

    def save(self, step: int) -> None:
        """Checkpoint the run as it stands after step `step` (0-based): weights, optimizer, scheduler and RNG
        state, and every counter a resume needs (train/checkpoint.py)."""
        cfg, monitor, interventions = self.cfg, self.monitor, self.interventions
        state = trainer_state(step + 1, self.rt.policies, self.optimizers, self.schedulers, guard=self.guard.counts)
        state["early_warning"] = self.warn.state_dict()
        if monitor is not None and monitor.state_dict():
            state["diagnostics/gradients"] = monitor.state_dict()
        if interventions is not None and interventions.state_dict():
            state["interventions"] = interventions.state_dict()
        if self.rollback is not None:
            state["rollback"] = self.rollback.state_dict()
        if cfg.train.lr_clock == "role_update":
            state["lr_clock"] = self.lr_clock
        save_checkpoint(
            self.run_dir, step + 1, state, keep_last=cfg.checkpoint.keep_last, keep_every=cfg.checkpoint.keep_every
        )

    def roll_back(self, event: RollbackEvent) -> None:
        """Restore checkpoint `event.to_step` (weights, optimizer and scheduler state, the divergence streaks, the
        diagnostics' and interventions' state, all of one checkpoint), keep the schedule at the step reached and
        lower the lr to `event.lr_scale` x train.lr. The early warning and the random streams go on (every
        step reseeds its own streams from (seed, step))."""
        _, state = load_checkpoint(self.run_dir, event.to_step)
        rng = capture_rng_state()
        self.guard.counts = restore_trainer_state(state, self.rt.policies, self.optimizers, self.schedulers).get(
            "guard", {}
        )
        restore_rng_state(rng)
        if self.monitor is not None:
            self.monitor.load_state_dict(state.get("diagnostics/gradients"))
        if self.interventions is not None:
            self.interventions.load_state_dict(state.get("interventions"))
        _apply_lr(self.cfg, self.schedulers, scale=event.lr_scale, last_epoch=event.step)

    def diverged(self, step: int, why: str) -> TrainingDiverged:
        ckpt = latest_step(self.run_dir)
        kept = (
            f"the last good checkpoint, {self.run_dir / 'checkpoints' / f'step_{ckpt}'}, is kept"
            if ckpt is not None
            else "no checkpoint was written"
        )
        return TrainingDiverged(f"training diverged and stopped at step {step}: {why}; {kept}")


_TRAINER_EVAL_TAGS = ("base", "periodic", "final")


def _extra_eval_sets(cfg: RunConfig) -> tuple[tuple[str, Any, list[Problem]], ...]:
    """eval.extra_sets as (name, task, its first `size` problems of the split)."""
    from rolecast.tasks import make_task

    out = []
    for s in cfg.eval.extra_sets:
        task = make_task(s.task, **s.options)
        out.append((s.name, task, list(task.problems(s.split))[: s.size]))
    return tuple(out)


class DivergenceGuard:
    """Per-policy signs that training diverged, counted across steps (and carried in checkpoints, so a resume
    continues a streak). `reason` says why the run must stop, or None:
    - an update left weights whose outputs are not finite, or grew their norm more than `max_weight_growth`
      times: at once;
    - `max_skipped_updates` optimizer updates in a row skipped for a non-finite loss or gradient;
    - the mean token entropy within `max_entropy_tol` x log|V| of its maximum log|V| (the policy samples
      uniformly at random) for `max_entropy_steps` steps in a row. Only for a policy that started below
      that: a random-weight model starts there, and training did not drive it there."""

    def __init__(self, settings: Any, vocab_size: int):
        self.settings = settings
        self.max_entropy = math.log(vocab_size)
        self.counts: dict[str, dict[str, Any]] = {}

    def _at_max(self, entropy: float) -> bool:
        return entropy >= (1 - self.settings.max_entropy_tol) * self.max_entropy

    def update(
        self,
        pid: str,
        stats: dict[str, float],
        skipped_in_a_row: float,
        *,
        outputs_finite: bool,
        norms: tuple[float, float] | None = None,
    ) -> None:
        """Count one step of `pid`: its update stats, whether its outputs are finite after the update, and its
        weight norm (before, after)."""
        c = self.counts
        growth = self.settings.max_weight_growth
        if norms is not None and growth and not (norms[1] <= growth * norms[0]):
            c.setdefault("blown_up", {})[pid] = list(norms)
        skips = c.setdefault("skipped_in_a_row", {})
        # no successful update this step: the streak goes on from earlier steps
        skips[pid] = skipped_in_a_row + (skips.get(pid, 0) if not stats["optimizer_steps"] else 0)
        entropy = stats.get("entropy", float("nan"))
        if math.isfinite(entropy):
            start = c.setdefault("entropy_start", {}).setdefault(pid, entropy)
            at_max = c.setdefault("entropy_at_max", {})
            at_max[pid] = at_max.get(pid, 0) + 1 if self._at_max(entropy) and not self._at_max(start) else 0
        if not outputs_finite:
            c.setdefault("non_finite", {})[pid] = True

    def suspect(self) -> bool:
        """A policy on a streak towards a stop (its weights are not worth a checkpoint)."""
        return any(n > 0 for n in self.counts.get("entropy_at_max", {}).values())

    def reason(self, step: int) -> str | None:
        tc = self.settings
        for pid in self.counts.get("non_finite", {}):
            return (
                f"policy {pid!r}: its weights give non-finite outputs after the update of step {step} "
                f"(train.lr {tc.lr:g} too large?)"
            )
        for pid, (before, after) in self.counts.get("blown_up", {}).items():
            return (
                f"policy {pid!r}: the update of step {step} grew its weight norm from {before:.4g} to {after:.4g} "
                f"(more than train.max_weight_growth {tc.max_weight_growth:g}x; train.lr {tc.lr:g} too large?)"
            )
        for pid, n in self.counts.get("skipped_in_a_row", {}).items():
            if tc.max_skipped_updates and n >= tc.max_skipped_updates:
                return (
                    f"policy {pid!r}: {int(n)} optimizer updates in a row skipped for a non-finite loss or "
                    f"gradient (train.max_skipped_updates {tc.max_skipped_updates})"
                )
        for pid, n in self.counts.get("entropy_at_max", {}).items():
            if tc.max_entropy_steps and n >= tc.max_entropy_steps:
                return (
                    f"policy {pid!r}: token entropy at its maximum log|V| = {self.max_entropy:.3f} (within "
                    f"train.max_entropy_tol {tc.max_entropy_tol:g}) for {n} steps in a row "
                    f"(train.max_entropy_steps {tc.max_entropy_steps}): it samples uniformly at random"
                )
        return None


def _weight_norm(params: list[torch.nn.Parameter]) -> float:
    with torch.no_grad():
        return math.sqrt(sum(float(p.double().pow(2).sum()) for p in params))


def _finite_or_none(metrics: dict[str, Any]) -> dict[str, Any]:
    """JSON has no NaN: an undefined statistic (e.g. accuracy of a role with no claims) is written as null."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in metrics.items()}


def _write_episodes(path: Path, episodes: list[Episode]) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        for ep in episodes:
            f.write(json.dumps(asdict(ep), ensure_ascii=False) + "\n")
    tmp.replace(path)
