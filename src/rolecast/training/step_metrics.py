"""The names of the trainer's own metrics (`policy/...`, `role/...`, `time/...`, `rollout/...`, `eval/...`), built
here only; the components' own (`grad/...`, `update/...`, `intervention/...`, `rollback/...`, `warning/...`) come
from their modules. docs/training.md lists them all."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rolecast.core.episode import Episode
from rolecast.core.metric_keys import eval_pass_key, grader_errors_key, policy_key, role_key, rollout_key, time_key
from rolecast.rewards.score import GRADER_ERROR
from rolecast.rollout.engine import RolloutStats
from rolecast.training.loss_step import Tally, tally_means


def policy_metrics(pid: str, stats: Mapping[str, float]) -> dict[str, float]:
    """`policy/{pid}/{stat}`: one policy's update (training/update.py) and the lr it trained with."""
    return {policy_key(pid, k): v for k, v in stats.items()}


def role_metrics(role_tally: Tally) -> dict[str, float]:
    """`role/{role}/{stat}`: per-token means of each role's tally, over every policy the role trains."""
    out: dict[str, float] = {}
    for role, row in sorted(role_tally.items()):
        out.update({role_key(role, k): v for k, v in tally_means(row).items() if k != "tokens"})
    return out


def time_metrics(t0: float, t_rollout: float, t_reward: float, t_update: float) -> dict[str, float]:
    """`time/...`: wall seconds of the step's phases (the only metrics that differ between identical runs)."""
    return {
        time_key("rollout"): t_rollout - t0,
        time_key("reward"): t_reward - t_rollout,
        time_key("update"): t_update - t_reward,
        time_key("step"): t_update - t0,
    }


def rollout_metrics(stats: RolloutStats, episodes: Sequence[Episode], max_prompt_tokens: int | None) -> dict[str, Any]:
    """`rollout/...`: the engine's backend calls and requests, the episodes with a grader error (a text whose scoring
    raised, rolecast.scoring), and with rollout.max_prompt_tokens the share of episodes an over-long prompt ended."""
    out: dict[str, Any] = {rollout_key("backend_calls"): stats.backend_calls, rollout_key("requests"): stats.requests}
    out[grader_errors_key()] = sum(GRADER_ERROR in ep.metadata for ep in episodes)
    if max_prompt_tokens:
        ended = sum(ep.metadata.get("ended") == "max_prompt_tokens" for ep in episodes)
        out[rollout_key("ended_max_prompt_tokens")] = ended / max(len(episodes), 1)
    return out


def eval_metrics(pass_at_1: float, eval_set: str | None = None, tag: str | None = None) -> dict[str, float]:
    """An evaluation's pass@1 under its curve's name and, with a tag (base, final), its own point's too."""
    out = {eval_pass_key(eval_set): pass_at_1}
    if tag is not None:
        out[eval_pass_key(eval_set, tag)] = pass_at_1
    return out
