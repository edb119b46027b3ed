"""Ctrl-C during `rolecast train`: the first one finishes the step in progress, checkpoints it and stops; a second
one stops at once. Outside the training steps (loading, the base and final evaluations) the first one stops at
once: there is nothing to finish that a resume would not redo.

The command line installs the handler (`StopRequest.installed`); the training loop asks `requested` after every
step and raises `TrainingInterrupted`, which says where the run stands. Library callers (the Python API, sweep
cells) pass no StopRequest and keep Python's own KeyboardInterrupt.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rolecast.core.rundir import RunPaths


class TrainingInterrupted(KeyboardInterrupt):
    """A run stopped by Ctrl-C: `step` the last completed step (of `total`), `checkpoint` the newest complete
    checkpoint's step (None: none), `at_once` whether it stopped without finishing a step, `kept` whether the
    run directory is still there (a new run stopped before its first step leaves nothing)."""

    def __init__(
        self, run_dir: Path, step: int, total: int, checkpoint: int | None, *, at_once: bool, kept: bool = True
    ):
        super().__init__(f"interrupted at step {step} of {total}")
        self.run_dir, self.step, self.total = run_dir, step, total
        self.checkpoint, self.at_once, self.kept = checkpoint, at_once, kept

    def message(self, resume_command: str) -> str:
        """One line: where the run stopped and the command that continues it."""
        if not self.kept:
            return "interrupted before the first training step: nothing was kept; run the same command again"
        how = "stopped at once" if self.at_once else "interrupted"
        if self.checkpoint is None:
            return (
                f"{how} at step {self.step} of {self.total} with no checkpoint written; "
                f"{resume_command} starts it again from step 0"
            )
        where = RunPaths(self.run_dir).checkpoint(self.checkpoint)
        saved = f"checkpoint {where}" if self.checkpoint == self.step else f"the newest checkpoint is {where}"
        return f"{how} at step {self.step} of {self.total} ({saved}); resume with: {resume_command}"


class StopRequest:
    """The Ctrl-C state of one `rolecast train` process."""

    def __init__(self) -> None:
        self.requested = False
        self._training = False

    @contextmanager
    def installed(self) -> Iterator[StopRequest]:
        """Handle SIGINT while the block runs (only the main thread of a process can; elsewhere this does nothing)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = signal.signal(signal.SIGINT, self._handle)
        try:
            yield self
        finally:
            # once stopped, the process is on its way out: a further Ctrl-C must not break the exit with a traceback
            signal.signal(signal.SIGINT, signal.SIG_IGN if self.requested else previous)

    @contextmanager
    def training(self) -> Iterator[None]:
        """The training steps: a first Ctrl-C in here lets the step in progress finish."""
        self._training = True
        try:
            yield
        finally:
            self._training = False

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested or not self._training:
            self.requested = True
            raise KeyboardInterrupt
        self.requested = True
        sys.stderr.write("\nCtrl-C: finishing this step, then checkpointing it (Ctrl-C again stops at once)\n")
        sys.stderr.flush()
