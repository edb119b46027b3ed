"""The rollout engine: runs every episode coroutine of a batch and generates their calls together.

Episodes advance until each one waits on a role call (or has finished); then all waiting calls of the
whole batch (problems x group samples x parallel agents) go to the backend in one request list, which
the backend batches by policy. Repeat until every episode has returned. The scheduler is a few lines of
coroutine stepping rather than asyncio, so the order of calls, and therefore sampling, is deterministic.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..episode import Episode, FinishReason, Turn
from ..prompts import PromptBook
from ..tasks.base import Problem, Task
from ..workflows.api import CallOp, Context, ForkOp, Messages, WorkflowSpec


@dataclass
class GenRequest:
    policy_id: str
    messages: Messages
    role: str | None = None  # the calling role: the backend looks up its generation cap
    max_new_tokens: int | None = None  # an explicit cap for this request (else the backend's for the role)


@dataclass
class Generation:
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: FinishReason  # "stop" (EOS) or "length" (hit max_new_tokens)


@runtime_checkable
class Backend(Protocol):
    """What the engine, the trainer and evaluation need from a generation backend (`hf.HFBackend`,
    `vllm_backend.VLLMBackend`, `scripted.ScriptedBackend`; tests/test_backend_conformance.py)."""

    # sampling temperature of every later `generate` (0 = greedy); evaluation sets it and restores it
    temperature: float

    def generate(self, requests: Sequence[GenRequest]) -> list[Generation]:
        """One completion per request, in request order."""
        ...

    def reseed(self, seed: int) -> None:
        """Restart sampling from `seed`, so a step's rollouts depend only on (run seed, step)."""
        ...


Router = Callable[[str, str], str]  # (role, instance) -> policy id


@dataclass
class _Task:
    coro: Any
    episode: int
    parent: _Task | None = None
    slot: int = 0
    waiting: int = 0
    results: list[Any] = field(default_factory=list)


async def _await(awaitable: Any) -> Any:
    return await awaitable


@dataclass
class RolloutStats:
    backend_calls: int = 0  # how many times the backend was asked (one per scheduling wave)
    requests: int = 0


def run_episodes(
    spec: WorkflowSpec,
    problems: Sequence[Problem],
    samples: int,
    *,
    task: Task,
    prompts: PromptBook,
    router: Router,
    backend: Backend,
    options: dict[str, Any] | None = None,
    stats: RolloutStats | None = None,
) -> list[Episode]:
    """Run `spec` `samples` times on each problem. Episodes come back problem-major: [p0s0, p0s1, ..., p1s0, ...]."""
    options = options or {}
    episodes: list[Episode] = []
    contexts: list[Context] = []
    runnable: deque[tuple[_Task, Any]] = deque()
    for problem in problems:
        for s in range(samples):
            ctx = Context(problem, task, prompts)
            episodes.append(Episode(problem_id=problem.id, sample=s))
            contexts.append(ctx)
            runnable.append((_Task(spec.fn(ctx, **options), len(episodes) - 1), None))

    def finish(t: _Task, value: Any) -> None:
        if t.parent is None:
            episodes[t.episode].final_text = value
            return
        t.parent.results[t.slot] = value
        t.parent.waiting -= 1
        if t.parent.waiting == 0:
            runnable.append((t.parent, t.parent.results))

    pending: list[tuple[_Task, CallOp]] = []
    while runnable or pending:
        while runnable:
            t, value = runnable.popleft()
            try:
                op = t.coro.send(value)
            except StopIteration as stop:
                finish(t, stop.value)
                continue
            except Exception as e:
                raise RuntimeError(
                    f"workflow {spec.name!r} failed on problem {episodes[t.episode].problem_id}: {e}"
                ) from e
            if isinstance(op, CallOp):
                pending.append((t, op))
            elif isinstance(op, ForkOp):
                if not op.children:
                    runnable.append((t, []))
                    continue
                t.waiting, t.results = len(op.children), [None] * len(op.children)
                for i, child in enumerate(op.children):
                    runnable.append((_Task(_await(child), t.episode, parent=t, slot=i), None))
            else:
                raise TypeError(f"workflow {spec.name!r} awaited {op!r}; await only ctx.call / ctx.gather")
        if pending:
            batch, pending = pending, []
            requests = [GenRequest(router(op.role, op.instance), op.messages, role=op.role) for _, op in batch]
            generations = backend.generate(requests)
            if stats is not None:
                stats.backend_calls += 1
                stats.requests += len(requests)
            for (t, op), req, gen in zip(batch, requests, generations, strict=True):
                ep = episodes[t.episode]
                turn = Turn(
                    role=op.role,
                    instance=op.instance,
                    policy_id=req.policy_id,
                    prompt_ids=gen.prompt_ids,
                    completion_ids=gen.completion_ids,
                    logprobs=gen.logprobs,
                    text=gen.text,
                    finish_reason=gen.finish_reason,
                    index=len(ep.turns),
                )
                ep.turns.append(turn)
                runnable.append((t, turn))

    for ep, ctx in zip(episodes, contexts, strict=True):
        ep.metrics.update(ctx.metrics)
        ep.metadata.update(ctx.metadata)
    return episodes
