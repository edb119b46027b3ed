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

from rolecast.core.episode import Episode, FinishReason, Turn
from rolecast.core.errors import UserError
from rolecast.prompts import PromptBook
from rolecast.tasks.base import Problem, Task
from rolecast.workflows.api import CallOp, Context, ForkOp, Messages, WorkflowSpec


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
    max_prompt_tokens: int | None = None,
) -> list[Episode]:
    """Run `spec` `samples` times on each problem. Episodes come back problem-major: [p0s0, p0s1, ..., p1s0, ...].

    `max_prompt_tokens` (rollout.max_prompt_tokens): a call whose prompt is longer ends its episode, as an
    over-long prompt ends the reference study's (rllm's MAX_PROMPT_LENGTH_EXCEEDED): the call is not made (a
    backend without `encode` generates it and the result is dropped), the episode's other pending calls are
    dropped, its workflow stops, the turns it made before stay, it has no final text, and its metadata says
    `ended: max_prompt_tokens`."""
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

    ended: set[int] = set()  # episodes ended by an over-long prompt
    encode = getattr(backend, "encode", None) if max_prompt_tokens else None

    def too_long(prompt_ids: Sequence[int]) -> bool:
        return max_prompt_tokens is not None and len(prompt_ids) > max_prompt_tokens

    def end(t: _Task) -> None:
        ended.add(t.episode)
        episodes[t.episode].metadata["ended"] = "max_prompt_tokens"

    pending: list[tuple[_Task, CallOp]] = []
    while runnable or pending:
        while runnable:
            t, value = runnable.popleft()
            if t.episode in ended:
                t.coro.close()
                continue
            try:
                op = t.coro.send(value)
            except StopIteration as stop:
                finish(t, stop.value)
                continue
            except UserError:  # its own one-line message (a prompt the prompt files lack) says what to fix
                raise
            except Exception as e:
                raise RuntimeError(
                    f"workflow {spec.name!r} failed on problem {episodes[t.episode].problem_id}: {e}"
                ) from e
            if isinstance(op, CallOp):
                spec.check_call(op.role)  # an undeclared role: one line naming it, before anything is generated
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
        if pending and max_prompt_tokens:
            if encode is not None:  # checked before generating: the over-long call is never made
                for t, op in pending:
                    if t.episode not in ended and too_long(encode(op.messages)):
                        end(t)
            for t, _ in pending:
                if t.episode in ended:
                    t.coro.close()
            pending = [(t, op) for t, op in pending if t.episode not in ended]
        if pending:
            batch, pending = pending, []
            requests = [GenRequest(router(op.role, op.instance), op.messages, role=op.role) for _, op in batch]
            generations = backend.generate(requests)
            if stats is not None:
                stats.backend_calls += 1
                stats.requests += len(requests)
            for (t, op), req, gen in zip(batch, requests, generations, strict=True):
                if t.episode not in ended and too_long(gen.prompt_ids):  # a backend that cannot count first
                    end(t)
                if t.episode in ended:
                    t.coro.close()
                    continue
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
