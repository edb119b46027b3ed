"""The workflow API: a workflow is an `async def` that reads like the algorithm it implements.

    @workflow("voting", prompts={"generator": ["solve"], "aggregator": ["aggregate"]})
    async def voting(ctx, n: int = 3):
        sols = await ctx.gather(*(ctx.call("generator", ctx.prompt("solve"), instance=i) for i in range(n)))
        pick = await ctx.call("aggregator", ctx.prompt("aggregate", solutions=[s.text for s in sols]))
        return sols[parse_choice(pick.text, n)].text

`ctx.call` suspends the episode until the rollout engine has generated the call's completion; the engine
runs every episode of the batch until all of them wait, then generates every waiting call together.
Workflows never import training code: they return the final text, and may set a turn's `claim` (what it
asserted: `AnswerClaim`, `VerdictClaim`, `PickClaim`) and `ctx.log` numbers for metrics.

Options (`workflow.options` in a config) are the function's keyword parameters. They are validated at config
load from the signature: the annotation is the type, and `Annotated[int, Field(ge=1)]` adds a range, so
`n: 0` fails with `workflow.options.n: ...` before any model loads.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import typing
from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from rolecast.core.episode import Turn
from rolecast.core.errors import ConfigError, FieldError, WorkflowError
from rolecast.core.registry import Registry, load_callable

if TYPE_CHECKING:  # a Context is handed these; the workflows import only core (pyproject.toml's contracts)
    from rolecast.prompts import PromptBook
    from rolecast.tasks.base import Problem, Task

Messages = list[dict[str, str]]


def undeclared_role_message(spec_name: str, role: str, declared: Sequence[str], where: str = "") -> str:
    at = f" ({where})" if where else ""
    return (
        f"workflow {spec_name!r}{at} calls role {role!r}, which it does not declare; its declared roles are "
        f"{list(declared)} (declare every role in @workflow(..., prompts={{role: [prompt names]}}))"
    )


@dataclass
class CallOp:
    """A role call waiting for generation. The engine fills in `turn`."""

    role: str
    instance: str
    messages: Messages


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

    @property
    def family(self) -> str:
        return self.task.family

    def prompt(self, name: str, **variables: Any) -> Messages:
        return self.prompts.render(name, problem=self.problem.text, **variables)

    def call(self, role: str, messages: Messages, *, instance: int | str | None = None) -> Awaitable[Turn]:
        """Ask `role` (agent instance `instance` when several run in parallel); resumes with the Turn."""
        inst = role if instance is None else f"{role}/{instance}"
        return _Suspend(CallOp(role=role, instance=inst, messages=messages))

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
    defaults: dict[str, Any] = field(default_factory=dict)  # option -> default value (None: required)
    options_model: type[BaseModel] | None = None  # built from the signature; validates `workflow.options`

    @property
    def roles(self) -> list[str]:
        return list(self.prompts)

    def check_calls(self) -> None:
        """Raise `WorkflowError` for the first `ctx.call("role", ...)` with a literal role the workflow did not
        declare, found in its source before anything runs. A role computed at run time is checked by the rollout
        engine at its first call (`check_call`)."""
        for role, where in literal_call_roles(self.fn):
            if role not in self.prompts:
                raise WorkflowError(undeclared_role_message(self.name, role, self.roles, where))

    def check_call(self, role: str) -> None:
        """`role`, called at run time, is one the workflow declared (else `WorkflowError`, before generating)."""
        if role not in self.prompts:
            raise WorkflowError(undeclared_role_message(self.name, role, self.roles))

    def check_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """The options as the function will get them (typed per its annotations), or a `FieldError` naming
        `workflow.options.<name>` for the first bad one."""
        if self.options_model is None:
            return dict(options)
        try:
            validated = self.options_model.model_validate(options)
        except ValidationError as e:
            err = e.errors()[0]
            name = ".".join(str(x) for x in err["loc"])
            if err["type"] == "extra_forbidden":
                msg = f"workflow {self.name!r} has no option {name!r}; its options are {sorted(self.defaults)}"
            elif err["type"] == "missing":
                msg = f"workflow {self.name!r} needs this option (its function has no default for it)"
            else:
                msg = f"{err['msg']} (got {err['input']!r})"
            raise FieldError(f"workflow.options.{name}", msg) from None
        return validated.model_dump(exclude_unset=True)


def literal_call_roles(fn: Callable[..., Any]) -> list[tuple[str, str]]:
    """(role, "file:line") of every `ctx.call("role", ...)` in `fn`'s source (nested functions included) whose role
    is a string literal, `ctx` being `fn`'s first parameter; [] when the source cannot be read."""
    try:
        lines, first = inspect.getsourcelines(fn)
        tree = ast.parse(textwrap.dedent("".join(lines)))
        source = inspect.getsourcefile(fn) or "<workflow>"
    except (OSError, TypeError, SyntaxError):
        return []
    node = tree.body[0] if tree.body else None
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or not node.args.args:
        return []
    ctx = node.args.args[0].arg
    found = []
    for call in ast.walk(node):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "call"):
            continue
        if not (isinstance(call.func.value, ast.Name) and call.func.value.id == ctx):
            continue
        role = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "role"), None)
        if isinstance(role, ast.Constant) and isinstance(role.value, str):
            found.append((role.value, f"{source}:{first + call.lineno - 1}"))
    return found


def _options_model(name: str, fn: WorkflowFn) -> type[BaseModel] | None:
    """A pydantic model of `fn`'s keyword options (every parameter after ctx): annotation = type (Any where
    missing), default = default (required where missing). `**kwargs` allows unknown options."""
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:  # noqa: BLE001 - an annotation that cannot be resolved: check the names only
        hints = {}
    fields: dict[str, Any] = {}
    extra: Literal["forbid", "allow"] = "forbid"
    for p in list(inspect.signature(fn).parameters.values())[1:]:
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            extra = "allow"
        elif p.kind is not inspect.Parameter.VAR_POSITIONAL:
            fields[p.name] = (hints.get(p.name, Any), ... if p.default is inspect.Parameter.empty else p.default)
    config = ConfigDict(extra=extra, arbitrary_types_allowed=True)
    return create_model(f"{name}_options", __config__=config, **fields)


# the shipped workflows register when the package is imported (rolecast/workflows/__init__.py imports builtin)
WORKFLOWS: Registry[WorkflowSpec] = Registry("workflow")
FIELD = "workflow.name"  # the config field every lookup error names


def workflow(name: str, *, prompts: dict[str, Sequence[str]]) -> Callable[[WorkflowFn], WorkflowFn]:
    """Register an async workflow function. `prompts` declares each role and the prompts it uses, so a
    config can be checked (routing, prompt files, option values) before any model is loaded."""

    def deco(fn: WorkflowFn) -> WorkflowFn:
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(f"workflow {name!r} must be an async function")
        params = list(inspect.signature(fn).parameters.values())[1:]  # skip ctx
        defaults = {
            p.name: (None if p.default is inspect.Parameter.empty else p.default)
            for p in params
            if p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        }
        spec = WorkflowSpec(name, fn, {r: list(p) for r, p in prompts.items()}, defaults, _options_model(name, fn))
        WORKFLOWS.add(name, spec)
        return fn

    return deco


def get_workflow(name: str) -> WorkflowSpec:
    """A registered workflow, or a user's as "package.module:function" / "path/to/file.py:function" (importing it
    registers it). Every failure is a `FieldError` on workflow.name that names what is missing."""
    spec = WORKFLOWS.get(name)
    if spec is not None:
        return spec
    if ":" not in name:
        raise FieldError(FIELD, str(WORKFLOWS.unknown(name, references=True)))
    try:
        fn = load_callable(name, FIELD)
    except FieldError:
        raise
    except ConfigError as e:  # load_callable's message starts with the field; FieldError carries it apart
        raise FieldError(FIELD, str(e).removeprefix(f"{FIELD}: ")) from e
    for spec in WORKFLOWS.values():
        if spec.fn is fn:
            return spec
    raise FieldError(FIELD, f"{name}: {name.rpartition(':')[2]!r} is not decorated with @rolecast.workflows.workflow")
