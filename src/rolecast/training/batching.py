"""Turning turns into tensors: the padded batch layout, token-budget micro-batches and their order.

A batch is `[left-padded prompt | right-padded completion]`: completions occupy the last L columns, so the model
only projects the last L + 1 hidden states onto the vocabulary (training/logprobs.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import torch

from rolecast.config.schema import RunConfig
from rolecast.core.episode import Turn, distinct_rows

Batch = dict[str, torch.Tensor]
X = TypeVar("X")


def collate(turns: list[Turn], pad_id: int, share_prompts: bool = True) -> Batch:
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


def padded_rows(rows: list[torch.Tensor], width: int) -> torch.Tensor:
    """1-D rows right-padded with 0 to `[len(rows), width]` (collate's layout of completion positions)."""
    out = torch.zeros(len(rows), width)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def generation_caps(cfg: RunConfig, turns: list[Turn]) -> int | torch.Tensor:
    """The generation cap that normalises a length-normalised loss (seq-mean-token-sum): the run's
    max_new_tokens, or with per-role caps each row's own role cap."""
    by_role = cfg.rollout.max_new_tokens_by_role
    if not by_role:
        return cfg.rollout.max_new_tokens
    return torch.tensor([by_role.get(t.role, cfg.rollout.max_new_tokens) for t in turns], dtype=torch.float32)


def to_device(x: X, device: torch.device) -> X:
    """A tensor, or each tensor of a dict, on `device` (unchanged where it already is: the CPU path copies nothing)."""
    if isinstance(x, dict):
        return {k: to_device(v, device) for k, v in x.items()}  # type: ignore[return-value]
    return x.to(device) if isinstance(x, torch.Tensor) and x.device != device else x  # type: ignore[return-value]


# The fixed cost of one more micro-batch (its forward, backward and Python work beyond its positions), in positions:
# on the testbed model a position costs ~0.2 ms forward + backward on one thread and a micro-batch ~40-60 ms of
# fixed work, so a split must save a few hundred padded positions to pay.
MICRO_BATCH_COST = 256


def plan_micro_batches(turns: Sequence[Turn], token_budget: int) -> list[list[Turn]]:
    """The rows of one (mini-)batch as micro-batches, each within `token_budget` positions where a single prompt
    group allows it (a group larger than the budget is a micro-batch of its own, as `micro_batches` makes it).

    A prompt's rows stay together (its prompt still runs once), the groups are sorted by their longest completion,
    then prompt length, and the cut points minimise `sum(U x P + B x L + MICRO_BATCH_COST)` within the budget (`U`
    distinct prompts padded to the longest prompt `P`, `B` rows padded to the longest completion `L`: the positions
    `collate` + `completion_hidden_states` run). When one policy plays roles whose completions differ in length
    (Voting shared: voters write ~5 tokens, the aggregator ~28), consecutive chunks of the prompt-sorted order pad a
    voter's row to the aggregator's length: 9,328 completion positions for 2,783 real tokens on the testbed. The same
    rows are trained on with the same normalisers, so the loss and gradient are equal up to float32 summation order;
    where the best plan is one micro-batch the rows keep `batching_order` exactly (bit for bit as before)."""
    ordered = batching_order(list(turns))
    groups: dict[tuple[int, ...], list[Turn]] = {}
    for t in ordered:  # rows of one prompt, in the order batching_order gave them
        groups.setdefault(tuple(t.prompt_ids), []).append(t)
    items = sorted(
        groups.values(), key=lambda g: (max(len(t.completion_ids) for t in g), len(g[0].prompt_ids), g[0].prompt_ids)
    )
    n = len(items)
    if n == 0:
        return []
    lens_p = [len(g[0].prompt_ids) for g in items]
    lens_c = [max(len(t.completion_ids) for t in g) for g in items]
    rows = [len(g) for g in items]
    # best[j]: least cost of the first j groups; cut[j]: where its last micro-batch starts
    inf = float("inf")
    best, cut = [0.0] + [inf] * n, [0] * (n + 1)
    for j in range(1, n + 1):
        u = b = p = c = 0
        for i in range(j - 1, -1, -1):  # the last micro-batch is groups i..j-1
            u, b, p, c = u + 1, b + rows[i], max(p, lens_p[i]), max(c, lens_c[i])
            cost = u * p + b * c
            if cost > token_budget and i < j - 1:
                break  # c is the last group's (sorted), u, b and p only grow as i falls: so does the cost
            total = best[i] + cost + MICRO_BATCH_COST
            if total < best[j]:
                best[j], cut[j] = total, i
    bounds, j = [], n
    while j > 0:
        bounds.append((cut[j], j))
        j = cut[j]
    if len(bounds) == 1:
        return [ordered]
    return [[t for g in items[i:j] for t in g] for i, j in reversed(bounds)]
