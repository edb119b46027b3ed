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


@dataclass(frozen=True)
class Sampling:
    """How one `generate` call samples, passed with the call instead of set on the backend: an evaluation passes
    its own (eval.temperature, eval.top_p). A field left None, or no Sampling at all, is the backend's own
    setting (rollout.temperature, rollout.top_p: what training rollouts sample with)."""

    temperature: float | None = None  # 0 = greedy
    top_p: float | None = None

    def over(self, temperature: float, top_p: float) -> tuple[float, float]:
        """(temperature, top_p) of a call to a backend whose own settings are `temperature` and `top_p`."""
        return (
            temperature if self.temperature is None else self.temperature,
            top_p if self.top_p is None else self.top_p,
        )


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

    # its own sampling temperature (rollout.temperature; 0 = greedy): what a call without a Sampling uses
    temperature: float

    def generate(self, requests: Sequence[GenRequest], sampling: Sampling | None = None) -> list[Generation]:
        """One completion per request, in request order; `sampling` overrides the backend's own settings for
        this call only."""
        ...

    def reseed(self, seed: int) -> None:
        """Restart sampling from `seed`, so a step's rollouts depend only on (run seed, step)."""
        ...


Router = Callable[[str, str], str]  # (role, instance) -> policy id


def step_seed(seed: int, step: int, stream: int) -> int:
    """Independent, reproducible seeds per (run seed, step, purpose): stream 1 a training step's rollouts, 2 its
    evaluation (`evaluation.EVAL_SEED_STREAM`), 3 the update's shuffling."""
    return (seed * 1_000_003 + step * 97 + stream) % (2**63)


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
    sampling: Sampling | None = None,
) -> list[Episode]:
    """Run `spec` `samples` times on each problem. Episodes come back problem-major: [p0s0, p0s1, ..., p1s0, ...].

    `max_prompt_tokens` (rollout.max_prompt_tokens): a call whose prompt is longer ends its episode, as an
    over-long prompt ends the reference study's (rllm's MAX_PROMPT_LENGTH_EXCEEDED): the call is not made (a
    backend without `encode` generates it and the result is dropped), the episode's other pending calls are
    dropped, its workflow stops, the turns it made before stay, it has no final text, and its metadata says
    `ended: max_prompt_tokens`. `sampling`: passed with every `generate` call (None: the backend's own)."""
    run = _Run(spec, backend, router, stats, max_prompt_tokens, sampling)
    for problem in problems:
        for s in range(samples):
            run.start(problem, s, task, prompts, options or {})
    run.until_done()
    return run.episodes


class _Run:
    """The episodes of one `run_episodes` call and their scheduler: advance every runnable coroutine until each
    waits on a call (or has returned), generate the waiting calls together, resume; repeat."""

    def __init__(
        self,
        spec: WorkflowSpec,
        backend: Backend,
        router: Router,
        stats: RolloutStats | None,
        max_prompt_tokens: int | None,
        sampling: Sampling | None,
    ):
        self.spec, self.backend, self.router, self.stats = spec, backend, router, stats
        self.max_prompt_tokens, self.sampling = max_prompt_tokens, sampling
        self.episodes: list[Episode] = []
        self.contexts: list[Context] = []
        self.runnable: deque[tuple[_Task, Any]] = deque()
        self.pending: list[tuple[_Task, CallOp]] = []
        self.ended: set[int] = set()  # episodes ended by an over-long prompt
        self.encode = getattr(backend, "encode", None) if max_prompt_tokens else None

    def start(self, problem: Problem, sample: int, task: Task, prompts: PromptBook, options: dict[str, Any]) -> None:
        ctx = Context(problem, task, prompts)
        self.episodes.append(Episode(problem_id=problem.id, sample=sample))
        self.contexts.append(ctx)
        self.runnable.append((_Task(self.spec.fn(ctx, **options), len(self.episodes) - 1), None))

    def until_done(self) -> None:
        while self.runnable or self.pending:
            self.advance()
            if self.pending and self.max_prompt_tokens:
                self.drop_over_long()
            if self.pending:
                self.generate()
        for ep, ctx in zip(self.episodes, self.contexts, strict=True):
            ep.metrics.update(ctx.metrics)

    def finish(self, t: _Task, value: Any) -> None:
        if t.parent is None:
            self.episodes[t.episode].final_text = value
            return
        t.parent.results[t.slot] = value
        t.parent.waiting -= 1
        if t.parent.waiting == 0:
            self.runnable.append((t.parent, t.parent.results))

    def too_long(self, prompt_ids: Sequence[int]) -> bool:
        return self.max_prompt_tokens is not None and len(prompt_ids) > self.max_prompt_tokens

    def end(self, t: _Task) -> None:
        self.ended.add(t.episode)
        self.episodes[t.episode].metadata["ended"] = "max_prompt_tokens"

    def advance(self) -> None:
        """Step every runnable coroutine until it waits on a call, forks, or returns."""
        while self.runnable:
            t, value = self.runnable.popleft()
            if t.episode in self.ended:
                t.coro.close()
                continue
            try:
                op = t.coro.send(value)
            except StopIteration as stop:
                self.finish(t, stop.value)
                continue
            except UserError:  # its own one-line message (a prompt the prompt files lack) says what to fix
                raise
            except Exception as e:
                raise RuntimeError(
                    f"workflow {self.spec.name!r} failed on problem {self.episodes[t.episode].problem_id}: {e}"
                ) from e
            self.schedule(t, op)

    def schedule(self, t: _Task, op: Any) -> None:
        if isinstance(op, CallOp):
            self.spec.check_call(op.role)  # an undeclared role: one line naming it, before anything is generated
            self.pending.append((t, op))
        elif isinstance(op, ForkOp):
            if not op.children:
                self.runnable.append((t, []))
                return
            t.waiting, t.results = len(op.children), [None] * len(op.children)
            for i, child in enumerate(op.children):
                self.runnable.append((_Task(_await(child), t.episode, parent=t, slot=i), None))
        else:
            raise TypeError(f"workflow {self.spec.name!r} awaited {op!r}; await only ctx.call / ctx.gather")

    def drop_over_long(self) -> None:
        """End the episodes whose pending call's prompt is over max_prompt_tokens, and drop their calls."""
        if self.encode is not None:  # checked before generating: the over-long call is never made
            for t, op in self.pending:
                if t.episode not in self.ended and self.too_long(self.encode(op.messages)):
                    self.end(t)
        for t, _ in self.pending:
            if t.episode in self.ended:
                t.coro.close()
        self.pending = [(t, op) for t, op in self.pending if t.episode not in self.ended]

    def generate(self) -> None:
        """Generate every pending call in one backend request list and resume each caller with its turn."""
        batch, self.pending = self.pending, []
        requests = [GenRequest(self.router(op.role, op.instance), op.messages, role=op.role) for _, op in batch]
        generations = self.backend.generate(requests, self.sampling)
        if self.stats is not None:
            self.stats.backend_calls += 1
            self.stats.requests += len(requests)
        for (t, op), req, gen in zip(batch, requests, generations, strict=True):
            if t.episode not in self.ended and self.too_long(gen.prompt_ids):  # a backend that cannot count first
                self.end(t)
            if t.episode in self.ended:
                t.coro.close()
                continue
            ep = self.episodes[t.episode]
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
            self.runnable.append((t, turn))
