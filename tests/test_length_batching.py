"""Length-aware micro-batches (training/batching.py plan_micro_batches): same rows, a prompt's rows together, less padding."""

from __future__ import annotations

from rolecast.core.episode import Turn
from rolecast.training import batching
from rolecast.training.batching import batching_order, micro_batches, plan_micro_batches


def _turn(prompt: list[int], n: int, role: str = "r") -> Turn:
    return Turn(role, role, "p", prompt, [2] * n, [0.0] * n, "", "stop")


def _padded(chunks: list[list[Turn]]) -> int:
    return sum(
        len({tuple(t.prompt_ids) for t in c}) * max(len(t.prompt_ids) for t in c)
        + len(c) * max(len(t.completion_ids) for t in c)
        for c in chunks
    )


def test_short_and_long_completions_go_to_separate_micro_batches(monkeypatch) -> None:
    """Voting shared in miniature: 3 voters x 8 samples of one prompt write 2 tokens, 8 aggregator rows (own
    prompts) write 60: the prompt-sorted chunks pad every voter row to 60, the plan does not."""
    monkeypatch.setattr(batching, "MICRO_BATCH_COST", 16)
    voters = [_turn([1] * 10, 2, "generator") for _ in range(24)]
    aggregators = [_turn([3, i] + [1] * 10, 60, "aggregator") for i in range(8)]
    turns = voters + aggregators
    old = micro_batches(batching_order(turns), 10_000)
    new = plan_micro_batches(turns, 10_000)
    assert len(old) == 1 and _padded(old) == 9 * 12 + 32 * 60  # 9 prompts padded to 12
    assert sorted(map(id, (t for c in new for t in c))) == sorted(map(id, turns))  # the same rows, once each
    assert [len(c) for c in new] == [24, 8] and _padded(new) == (10 + 24 * 2) + (8 * 12 + 8 * 60)
    # a prompt's rows stay in one micro-batch (its prompt runs once)
    for c in new:
        for t in c:
            assert all(u in c for u in turns if u.prompt_ids == t.prompt_ids)


def test_one_micro_batch_keeps_the_old_order_and_the_budget_holds() -> None:
    turns = [_turn([5, 6], 3), _turn([7], 1), _turn([5, 6], 1), _turn([7], 4), _turn([4, 4], 1)]
    assert plan_micro_batches(turns, 10_000) == [batching_order(turns)]
    assert plan_micro_batches([], 100) == []
    # a tight budget: every micro-batch within it
    many = [_turn([i] * (i % 5 + 1), i % 7 + 1) for i in range(40)]
    plan = plan_micro_batches(many, 20)
    assert all(_padded([c]) <= 20 for c in plan)
    assert sorted(map(id, (t for c in plan for t in c))) == sorted(map(id, many))
