"""Task registry. Importing this package registers every shipped task."""

from __future__ import annotations

# registration imports: each module registers its tasks on import (a broken one fails here, loudly)
from rolecast.tasks import datasets, testbed  # noqa: F401
from rolecast.tasks.base import TASKS, Problem, Score, Task, register_task


def make_task(name: str, **options) -> Task:
    """The registered task `name` built with `options`; an unknown name is a `ConfigError` naming the known ones
    and the closest."""
    return TASKS.resolve(name)(**options)


def task_names() -> list[str]:
    return TASKS.names()


__all__ = ["Problem", "Score", "Task", "TASKS", "register_task", "make_task", "task_names"]
