"""Task registry. Importing this package registers every shipped task."""

from __future__ import annotations

from rolecast.tasks.base import TASKS, Problem, Score, Task, register_task


def _register_builtin() -> None:
    # Each module registers its tasks on import; a missing optional module must not break the others.
    from rolecast.tasks import testbed  # noqa: F401

    try:
        from rolecast.tasks import datasets  # noqa: F401
    except ImportError:
        pass


def make_task(name: str, **options) -> Task:
    _register_builtin()
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; known tasks: {sorted(TASKS)}")
    return TASKS[name](**options)


def task_names() -> list[str]:
    _register_builtin()
    return sorted(TASKS)


__all__ = ["Problem", "Score", "Task", "TASKS", "register_task", "make_task", "task_names"]
