"""What a task is: a source of problems, the variables its prompts need, and a verifier (whose `Score` lives
with the verifiers, in rewards/)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rolecast.core.registry import Registry
from rolecast.rewards.score import Score


@dataclass(frozen=True)
class Problem:
    id: str
    text: str  # the problem statement as the prompts show it ({{ problem }})
    # What a grader checks a completion against, by task kind: the gold answer string (math, the arithmetic
    # testbed), a `CodeTests` (code datasets: asserts, stdin/stdout or functional tests), the hidden expression
    # (testbed_code, whose tests are in meta["tests"]). Datasets' own "answer" columns are mapped onto it.
    reference: Any
    meta: dict[str, Any] = field(default_factory=dict)


class Task:
    """Base class: subclasses set `name`, `family` (which prompt file) and implement the three methods."""

    name: str = "task"
    family: str = "math"  # prompt family, see rolecast.prompts
    executes_code: bool = False  # scoring runs model-written programs (in the code sandbox)

    def problems(self, split: str) -> Sequence[Problem]:
        """All problems of a split ("train" or "test"), in a deterministic order."""
        raise NotImplementedError

    def extract_answer(self, text: str) -> str | None:
        """The final answer a completion states, or None."""
        raise NotImplementedError

    def score(self, problem: Problem, text: str | None) -> Score:
        raise NotImplementedError

    def score_many(self, problems: Sequence[Problem], texts: Sequence[str | None]) -> list[Score]:
        """Score a batch; tasks with expensive verifiers (the code sandbox) override this to run in parallel."""
        return [self.score(p, t) for p, t in zip(problems, texts, strict=True)]


TaskFactory = Callable[..., Task]
TASKS: Registry[TaskFactory] = Registry("task")


def register_task(name: str) -> Callable[[TaskFactory], TaskFactory]:
    """A decorator: `@register_task("name")` on a Task subclass (or any factory of one)."""
    return TASKS.register(name)


__all__ = ["Problem", "Score", "Task", "TaskFactory", "TASKS", "register_task"]
