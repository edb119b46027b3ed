"""Console output: a progress bar with step, reward and ETA on a terminal, one plain line per step without one (a
batch job's log). The trainer's own copy, with the metric sinks, is train/sinks.py; this one goes once sweep/cell.py
and bench/gpu_check.py import that."""

from __future__ import annotations

from typing import Any

from rich.console import Console as RichConsole
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class _Bar:
    def __init__(self, progress: Progress | None, task_id: TaskID | None):
        self._progress, self._task = progress, task_id

    def advance(self, step: int, reward: float, metrics: dict[str, Any] | None = None) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, completed=step, reward=reward)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()


class _Lines(_Bar):
    """Without a terminal: one line per step (a log has no use for a redrawn bar)."""

    def __init__(self, console: Console, total: int):
        super().__init__(None, None)
        self._console, self._total = console, total

    def advance(self, step: int, reward: float, metrics: dict[str, Any] | None = None) -> None:
        m = metrics or {}
        line = f"step {step}/{self._total}  reward {reward:.3f}"
        if isinstance(m.get("accuracy"), float):
            line += f"  accuracy {m['accuracy']:.3f}"
        if isinstance(m.get("time/step"), float):
            line += f"  {m['time/step']:.1f} s/step"
        self._console.print(line)


class Console:
    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self.rich = RichConsole(highlight=False, soft_wrap=True)  # a log keeps each message on one line

    def print(self, msg: str) -> None:
        self.rich.print(msg)

    def progress(self, total: int, start: int = 0) -> _Bar:
        if not self.enabled or total <= start:
            return _Bar(None, None)
        if not self.rich.is_terminal:
            return _Lines(self, total)
        p = Progress(
            TextColumn("step"),
            MofNCompleteColumn(),
            BarColumn(),
            TextColumn("reward {task.fields[reward]:.3f}"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=self.rich,
            transient=False,
        )
        task = p.add_task("train", total=total, completed=start, reward=float("nan"))
        p.start()
        return _Bar(p, task)
