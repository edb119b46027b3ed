"""Where the trainer's metrics and messages go: the console (a progress bar with step, reward and ETA on a terminal,
one plain line per step without one: a batch job's log), the run directory's metrics.jsonl and episode samples,
and the optional TensorBoard / W&B sinks."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
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

from rolecast.config.schema import LogSettings
from rolecast.core.episode import Episode
from rolecast.core.errors import require
from rolecast.core.metric_keys import time_key
from rolecast.core.rundir import append_jsonl, write_atomic


def accuracy_text(pass1: float, stderr: float) -> str:
    """An evaluation's pass@1 with its standard error, labelled: "0.557 ± 0.029 (± 1 SE)" (not a 95% interval,
    which would be ± 1.96 SE)."""
    return f"{pass1:.3f} ± {stderr:.3f} (± 1 SE)"


class ProgressBar:
    """A rich progress bar (or nothing, when the console is off). Its text field says what the run is doing: the
    last step's reward, "evaluating ..." while an evaluation runs, "starting" before the first step."""

    def __init__(self, progress: Progress | None, task_id: TaskID | None, status: str = ""):
        self._progress, self._task, self._status = progress, task_id, status

    def advance(self, step: int, reward: float, metrics: dict[str, Any] | None = None) -> None:
        if self._progress is not None and self._task is not None:
            self._status = f"reward {reward:.3f}"
            self._progress.update(self._task, completed=step, status=self._status)

    def show(self, status: str) -> str:
        """Show `status` in place of the reward; returns what was shown, to put back."""
        previous, self._status = self._status, status
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, status=status)
        return previous

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()


class _Lines(ProgressBar):
    """Without a terminal: one line per step (a log has no use for a redrawn bar)."""

    def __init__(self, console: Console, total: int):
        super().__init__(None, None)
        self._console, self._total = console, total

    def advance(self, step: int, reward: float, metrics: dict[str, Any] | None = None) -> None:
        m = metrics or {}
        line = f"step {step}/{self._total}  reward {reward:.3f}"
        if isinstance(m.get("accuracy"), float):
            line += f"  accuracy {m['accuracy']:.3f}"
        if isinstance(m.get(time_key("step")), float):
            line += f"  {m[time_key('step')]:.1f} s/step"
        self._console.print(line)


class Console:
    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self.rich = RichConsole(highlight=False, soft_wrap=True)  # a log keeps each message on one line
        self._bar = ProgressBar(None, None)  # the live bar, which `evaluating` labels

    def print(self, msg: str) -> None:
        self.rich.print(msg)

    def progress(self, total: int, start: int = 0) -> ProgressBar:
        if not self.enabled or total <= start:
            return ProgressBar(None, None)
        if not self.rich.is_terminal:
            return _Lines(self, total)
        p = Progress(
            TextColumn("step"),
            MofNCompleteColumn(),
            BarColumn(),
            TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=self.rich,
            transient=False,
        )
        task = p.add_task("train", total=total, completed=start, status="starting")
        p.start()
        self._bar = ProgressBar(p, task, "starting")
        return self._bar

    @contextmanager
    def evaluating(self, what: str) -> Iterator[None]:
        """While an evaluation runs, the live bar says "evaluating `what`" (the base evaluation takes as long as
        several steps; a bar that only showed step 0 and no reward looked stuck); then it shows what it showed."""
        previous = self._bar.show(f"evaluating {what}")
        try:
            yield
        finally:
            self._bar.show(previous)


class MetricLoggers:
    """Optional extras; each is imported only when switched on, with a clear message when missing."""

    def __init__(self, settings: LogSettings, run_dir: Path):
        self._tb: Any = None
        self._wandb: Any = None
        if settings.tensorboard:
            tb = require("tensorboard", "tensorboard", module="torch.utils.tensorboard", purpose="logging.tensorboard")
            self._tb = tb.SummaryWriter(str(run_dir / "tensorboard"))
        if settings.wandb:
            wandb = require("wandb", "wandb", purpose="logging.wandb")
            self._wandb = wandb.init(
                project=settings.wandb_project,
                dir=str(run_dir),
                name=run_dir.name,
            )

    def log(self, metrics: dict[str, Any], step: int) -> None:
        numbers = {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and k != "step"}
        if self._tb is not None:
            for k, v in numbers.items():
                self._tb.add_scalar(k, v, step)
        if self._wandb is not None:
            self._wandb.log(numbers, step=step)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None


# ---------------------------------------------------------------------------------------------------------
# The run directory's logs


def append_metrics(path: Path, metrics: dict[str, Any]) -> None:
    """One step's row of metrics.jsonl."""
    append_jsonl(path, _finite_or_none(metrics))


def _finite_or_none(metrics: dict[str, Any]) -> dict[str, Any]:
    """JSON has no NaN: an undefined statistic (e.g. accuracy of a role with no claims) is written as null."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in metrics.items()}


def write_episodes(path: Path, episodes: list[Episode]) -> None:
    """A step's sampled episodes, one JSON line each (written atomically)."""
    write_atomic(path, "".join(ep.to_json() + "\n" for ep in episodes))
