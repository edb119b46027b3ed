"""A custom attribution for tests on random-weight models, whose answers are never correct: each turn is
rewarded by the share of even token ids in its own completion, so rewards vary within a group, advantages are
non-zero and every step has a gradient (`train.attribution: token_rewards:even_tokens`)."""

from __future__ import annotations

from rolecast.core.episode import Episode


def even_tokens(ep: Episode) -> list[float]:
    return [
        sum(1 for i in t.completion_ids if i % 2 == 0) / len(t.completion_ids) if t.completion_ids else 0.0
        for t in ep.turns
    ]
