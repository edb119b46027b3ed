"""The workflow API: a workflow is an `async def` that reads like the algorithm it implements.

    @workflow("voting", prompts={"generator": ["solve"], "aggregator": ["aggregate"]})
    async def voting(ctx, n: int = 3):
        sols = await ctx.gather(*(ctx.call("generator", ctx.prompt("solve"), instance=i) for i in range(n)))
        pick = await ctx.call("aggregator", ctx.prompt("aggregate", solutions=[s.text for s in sols]))
        return sols[parse_choice(pick.text, n)].text

`ctx.call` suspends the episode until the rollout engine has generated the call's completion; the engine
runs every episode of the batch until all of them wait, then generates every waiting call together.
Workflows never import training code: they return the final text, and may attach a `claim` (what a
turn asserted) and `ctx.log` numbers for metrics.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..episode import Turn
from ..prompts import PromptBook
from ..tasks.base import Problem, Task

Messages = list[dict[str, str]]


@dataclass
class CallOp:
    """A role call waiting for generation. The engine fills in `turn`."""

    role: str
    instance: str
    messages: Messages
    claim: dict[str, Any] | None = None


@dataclass
class ForkOp:
    """Run several awaitables concurrently (within one episode) and resume with their results."""

    children: list[Any]


class _Suspend:
    """The one awaitable the engine understands: it yields an op and resumes with its result."""

    def __init__(self, op: CallOp | ForkOp):
        self.op = op

    def __await__(self) -> Generator[Any, Any, Any]:
        return (yield self.op)


class Context:
    """What a workflow sees: the problem, its prompts, the task's answer extractor, and `call`."""

    def __init__(self, problem: Problem, task: Task, prompts: PromptBook):
        self.problem = problem
        self.task = task
        self.prompts = prompts
        self.metrics: dict[str, float] = {}
        self.metadata: dict[str, Any] = {}

    @property
    def family(self) -> str:
        return self.task.family

    def prompt(self, name: str, **variables: Any) -> Messages:
        return self.prompts.render(name, problem=self.problem.text, **variables)

    def call(self, role: str, messages: Messages, *, instance: int | str | None = None,
             claim: dict[str, Any] | None = None) -> Awaitable[Turn]:
        """Ask `role` (agent instance `instance` when several run in parallel); resumes with the Turn."""
        inst = role if instance is None else f"{role}/{instance}"
        return _Suspend(CallOp(role=role, instance=inst, messages=messages, claim=claim))

    def gather(self, *awaitables: Awaitable[Any]) -> Awaitable[list[Any]]:
        """Concurrent calls, like asyncio.gather: all are generated in the same batch."""
        return _Suspend(ForkOp(children=list(awaitables)))

    def extract(self, text: str | None) -> str | None:
        return self.task.extract_answer(text) if text is not None else None

    def log(self, name: str, value: float) -> None:
        """A workflow-specific number for this episode; averaged per step as `wf/<name>`."""
        self.metrics[name] = float(value)


WorkflowFn = Callable[..., Awaitable[str | None]]


@dataclass(frozen=True)
class WorkflowSpec:
    name: str
    fn: WorkflowFn
    prompts: dict[str, list[str]]  # role -> prompt names that role is called with
    defaults: dict[str, Any] = field(default_factory=dict)  # option -> default value

    @property
    def roles(self) -> list[str]:
        return list(self.prompts)

    def check_options(self, options: dict[str, Any]) -> None:
        unknown = set(options) - set(self.defaults)
        if unknown:
            raise ValueError(
                f"workflow {self.name!r} has no option(s) {sorted(unknown)}; its options are {sorted(self.defaults)}"
            )


WORKFLOWS: dict[str, WorkflowSpec] = {}


def workflow(name: str, *, prompts: dict[str, Sequence[str]]) -> Callable[[WorkflowFn], WorkflowFn]:
    """Register an async workflow function. `prompts` declares each role and the prompts it uses, so a
    config can be checked (routing, prompt files) before any model is loaded."""

    def deco(fn: WorkflowFn) -> WorkflowFn:
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(f"workflow {name!r} must be an async function")
        params = list(inspect.signature(fn).parameters.values())[1:]  # skip ctx
        defaults = {p.name: (None if p.default is inspect.Parameter.empty else p.default) for p in params}
        WORKFLOWS[name] = WorkflowSpec(name, fn, {r: list(p) for r, p in prompts.items()}, defaults)
        return fn

    return deco


def get_workflow(name: str) -> WorkflowSpec:
    from . import builtin  # noqa: F401  (registers the shipped workflows)

    if name not in WORKFLOWS and ":" in name:
        # "package.module:function" or "path/to/file.py:function" loads a user's workflow; the decorator registers it.
        fn = _load_user_function(name)
        for spec in WORKFLOWS.values():
            if spec.fn is fn:
                return spec
        raise ValueError(f"{name}: {name.rpartition(':')[2]!r} is not decorated with @rolecast.workflows.workflow")
    if name not in WORKFLOWS:
        raise ValueError(f"unknown workflow {name!r}; known: {sorted(WORKFLOWS)} (or 'module:function')")
    return WORKFLOWS[name]


def _load_user_function(ref: str) -> Callable[..., Any]:
    import importlib
    import importlib.util
    from pathlib import Path

    module, _, attr = ref.rpartition(":")
    if module.endswith(".py"):
        path = Path(module)
        if not path.exists():
            raise ValueError(f"workflow file {path} does not exist")
        mod_spec = importlib.util.spec_from_file_location(f"rolecast_user_{path.stem}", path)
        mod = importlib.util.module_from_spec(mod_spec)
        mod_spec.loader.exec_module(mod)  # type: ignore[union-attr]
    else:
        mod = importlib.import_module(module)
    if not hasattr(mod, attr):
        raise ValueError(f"{ref}: {module} has no function {attr!r}")
    return getattr(mod, attr)
