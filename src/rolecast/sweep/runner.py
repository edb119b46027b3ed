"""Run a sweep: decide each cell's state from its directory, run what is left on an executor, keep a
sweep-level status file (`<out>/sweep.json`, rewritten atomically after every event), show progress, and
summarise the cells (base / peak / final accuracy from their eval.jsonl).
"""

from __future__ import annotations

import fcntl
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from rolecast.config import RunConfig
from rolecast.core.rundir import CONFIG, DONE, ERROR, EVAL, SWEEP_STATUS, read_jsonl, stopped_reason, write_atomic
from rolecast.plan.registration import Design, record_first_cell, register_start
from rolecast.sweep.cell import CellJob, CellResult, cell_state, checkpoint_step
from rolecast.sweep.executors import Executor, LocalExecutor
from rolecast.sweep.matrix import Cell, Matrix, MatrixError

STATUS_FILE = SWEEP_STATUS
LOCK_FILE = ".lock"
LOG_DIR = ".logs"


@dataclass
class SweepOutcome:
    skipped: list[str] = field(default_factory=list)  # finished before this run
    resumed: dict[str, int] = field(default_factory=dict)  # cell -> checkpoint step it resumed from
    results: dict[str, CellResult] = field(default_factory=dict)  # what ran in this session
    stopped_before: list[str] = field(default_factory=list)  # stopped themselves (diverged) before this run

    @property
    def failed(self) -> list[str]:
        return [n for n, r in self.results.items() if r.status == "failed"]

    @property
    def stopped(self) -> list[str]:
        """Cells whose run stopped itself (diverged) in this session or an earlier one: final, never retried."""
        return self.stopped_before + [n for n, r in self.results.items() if r.status == "stopped"]


def _comparable(config: dict[str, Any]) -> dict[str, Any]:
    # threads depend on the executor, not on what the cell computes... up to float summation order
    out = {k: v for k, v in config.items() if k != "threads"}
    rollback = ((config.get("interventions") or {}).get("rollback") or {}).get("signals")
    if not rollback and isinstance(out.get("checkpoint"), dict):
        # which checkpoints stay on disk changes what a cell computes only when a rollback may go back to one
        out["checkpoint"] = {k: v for k, v in out["checkpoint"].items() if k not in ("keep_last", "keep_every")}
    return out


def _saved_settings(saved: dict[str, Any]) -> dict[str, Any] | None:
    """A cell's saved config.yaml as the schema reads it today: a field added since (with its default) is not a
    difference; a saved config the schema no longer accepts is (None)."""
    try:
        return RunConfig.model_validate(saved).model_dump(mode="json")
    except ValidationError:
        return None


def check_existing(matrix: Matrix) -> None:
    """A cell directory written under different settings must not be skipped or resumed as if it matched."""
    stale = []
    for cell in matrix.cells:
        saved = cell.run_dir / CONFIG
        if cell_state(cell.run_dir) == "fresh" or not saved.is_file():
            continue
        settings = _saved_settings(yaml.safe_load(saved.read_text()) or {})
        if settings is None or _comparable(settings) != _comparable(cell.config.model_dump(mode="json")):
            stale.append(cell.name)
    if stale:
        raise MatrixError(
            f"{matrix.path}: cell(s) {stale} in {matrix.out} were run with other settings than the "
            f"matrix now gives them; use another --out, or remove those directories to recompute them"
        )


class _Status:
    """The sweep-level status file: every cell with its axes, state, last error and timings."""

    def __init__(self, matrix: Matrix, executor: str):
        self.path = matrix.out / STATUS_FILE
        previous: dict[str, Any] = {}
        if self.path.is_file():
            try:
                previous = {c["name"]: c for c in json.loads(self.path.read_text()).get("cells", [])}
            except (json.JSONDecodeError, KeyError, TypeError):
                previous = {}
        self.data: dict[str, Any] = {
            "matrix": str(matrix.path),
            "out": str(matrix.out),
            "executor": executor,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "cells": [],
        }
        self.by_name: dict[str, dict[str, Any]] = {}
        for cell in matrix.cells:
            old = previous.get(cell.name, {})
            row = {
                "name": cell.name,
                "kind": cell.kind,
                "axes": cell.axes,
                "base_cell": cell.base_cell,
                "run_dir": cell.name,
                "status": "pending",
                "attempts": old.get("attempts", 0),
                "error": None,
                "seconds": old.get("seconds"),
                "resumed_from": None,
            }
            self.data["cells"].append(row)
            self.by_name[cell.name] = row

    def set(self, name: str, **fields: Any) -> None:
        self.by_name[name].update(fields)
        self.data["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S")
        write_atomic(self.path, json.dumps(self.data, indent=1))


def design(matrix: Matrix) -> Design:
    """What the sweep registers of this matrix (plan/registration.py)."""
    return Design(
        str(matrix.path),
        matrix.text,
        str(matrix.plan.path) if matrix.plan else None,
        matrix.plan.text if matrix.plan else None,
        dict(matrix.extra_set),
        tuple(c.name for c in matrix.train_cells),
    )


class _Display:
    """Cells done, running, failed and left: a live bar on a terminal, plain lines elsewhere."""

    def __init__(self, total: int, enabled: bool, console: Console | None):
        self.console = console or Console(highlight=False)
        self.counts = {"done": 0, "running": 0, "failed": 0, "stopped": 0, "left": total}
        self.running: list[str] = []
        self.progress = Progress(
            TextColumn("cells"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[counts]}"),
            TimeElapsedColumn(),
            console=self.console,
            transient=False,
            disable=not enabled,
        )
        self.task = self.progress.add_task("sweep", total=total, counts=self._counts())
        self.enabled = enabled

    def _counts(self) -> str:
        c = self.counts
        now = f" [{', '.join(self.running[:3])}{', ...' if len(self.running) > 3 else ''}]" if self.running else ""
        stopped = f" · stopped {c['stopped']}" if c["stopped"] else ""
        return f"done {c['done']} · running {c['running']}{now} · failed {c['failed']}{stopped} · left {c['left']}"

    def __enter__(self) -> _Display:
        self.progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.stop()

    def start(self, name: str) -> None:
        self.counts["running"] += 1
        self.counts["left"] -= 1
        self.running.append(name)
        self._update()

    def finish(self, result: CellResult) -> None:
        self.counts["running"] -= 1
        self.counts[result.status] += 1
        if result.name in self.running:
            self.running.remove(result.name)
        resumed = f", resumed from step {result.resumed_from}" if result.resumed_from is not None else ""
        line = {
            "done": f"done    {result.name} ({result.seconds:.1f} s{resumed})",
            "stopped": f"STOPPED {result.name}: {result.error}",
            "failed": f"FAILED  {result.name}: {result.error}",
        }[result.status]
        self.console.print(line, markup=False, soft_wrap=True)
        self.progress.advance(self.task)
        self._update()

    def _update(self) -> None:
        self.progress.update(self.task, counts=self._counts())


def run_sweep(
    matrix: Matrix, executor: Executor | None = None, *, progress: bool = True, console: Console | None = None
) -> SweepOutcome:
    """Run every cell that is not finished (resuming interrupted ones); returns what happened."""
    executor = executor or LocalExecutor()
    console = console or Console(highlight=False)
    matrix.out.mkdir(parents=True, exist_ok=True)
    with open(matrix.out / LOCK_FILE, "w") as lock:
        try:  # released by the OS however this process ends, so a killed sweep never leaves it behind
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise MatrixError(f"another sweep is running in {matrix.out} (it holds {matrix.out / LOCK_FILE})") from None
        return _run_locked(matrix, executor, progress, console)


def _run_locked(matrix: Matrix, executor: Executor, progress: bool, console: Console) -> SweepOutcome:
    check_existing(matrix)
    # before any cell starts (and before sweep.json is touched): the design (matrix, plan, --set) on the first
    # start, an amendment when it changed since; a plan whose rules changed without an amendment entry stops here
    register_start(
        matrix.out,
        design(matrix),
        jobs=sum(cell_state(c.run_dir) not in ("finished", "stopped") for c in matrix.cells),
        cells_run=[c.name for c in matrix.cells if c.run_dir.exists()],
    )
    status = _Status(matrix, executor.name)
    outcome = SweepOutcome()
    jobs: list[CellJob] = []
    for cell in matrix.cells:
        state = cell_state(cell.run_dir)
        if state == "finished":
            outcome.skipped.append(cell.name)
            done = json.loads((cell.run_dir / DONE).read_text())
            status.set(cell.name, status="done", seconds=done.get("seconds"))
            continue
        if state == "stopped":  # diverged in an earlier run: resuming would diverge again (cell.py)
            outcome.stopped_before.append(cell.name)
            status.set(cell.name, status="stopped", error=stopped_reason(cell.run_dir))
            continue
        if state == "interrupted":
            outcome.resumed[cell.name] = checkpoint_step(cell.run_dir) or 0  # interrupted: it has a checkpoint
        jobs.append(
            CellJob(
                cell.name,
                cell.kind,
                str(cell.run_dir),
                cell.config.model_dump(mode="json"),
                str(matrix.out / LOG_DIR / f"{cell.name}.log"),
                executor.threads_per_cell,
                str(matrix.cell(cell.base_cell).run_dir) if cell.base_cell else None,
            )
        )
    n_base = sum(c.kind == "base_eval" for c in matrix.cells)
    console.print(
        f"sweep {matrix.path} -> {matrix.out}: {len(matrix.cells)} cells ({n_base} base evaluations); "
        f"{len(outcome.skipped)} finished, "
        + (f"{len(outcome.stopped_before)} stopped (diverged; not retried), " if outcome.stopped_before else "")
        + f"{len(outcome.resumed)} to resume, "
        f"{len(jobs) - len(outcome.resumed)} to start; executor {executor.name}",
        markup=False,
        soft_wrap=True,  # one line in a log too (rich wraps at 80 columns when the output is not a terminal)
    )

    first = [True]
    with _Display(len(jobs), progress, console) as display:

        def on_start(name: str) -> None:
            if first[0]:  # the first cell of this session; the registration keeps only the sweep's first ever
                first[0] = False
                record_first_cell(matrix.out, name)
            row = status.by_name[name]
            status.set(
                name,
                status="running",
                attempts=row["attempts"] + 1,
                error=None,
                started=time.strftime("%Y-%m-%dT%H:%M:%S"),
            )
            display.start(name)

        def on_finish(result: CellResult) -> None:
            outcome.results[result.name] = result
            status.set(
                result.name,
                status=result.status,
                error=result.error,
                seconds=result.seconds,
                resumed_from=result.resumed_from,
                finished=time.strftime("%Y-%m-%dT%H:%M:%S"),
            )
            display.finish(result)

        executor.run(jobs, on_start, on_finish)
    return outcome


# ---------------------------------------------------------------------------------------------------------
# A per-cell summary (the HTML report is the full map)


def _eval_rows(run_dir: Path) -> list[dict[str, Any]]:
    return read_jsonl(run_dir / EVAL, skipped=[])  # a cell still running may have a half-written last row


def cell_summary(matrix: Matrix, cell: Cell) -> dict[str, Any]:
    """base / peak (with its step) / final pass@1 of a training cell, from eval.jsonl files only."""
    rows = _eval_rows(cell.run_dir)
    base_rows = [r for r in rows if r.get("tag") == "base"]
    if cell.base_cell:
        base_rows = [r for r in _eval_rows(matrix.out / cell.base_cell) if r.get("tag") == "base"] or base_rows
    trained = [r for r in rows if r.get("tag") in ("periodic", "final")]
    final = [r for r in rows if r.get("tag") == "final"]
    peak = max(trained, key=lambda r: r["pass@1"], default=None)
    out: dict[str, Any] = {
        "cell": cell.name,
        "state": cell_state(cell.run_dir),
        **cell.axes,
        "base": base_rows[0]["pass@1"] if base_rows else None,
        "peak": peak["pass@1"] if peak else None,
        "peak_step": peak["step"] if peak else None,
        "final": final[-1]["pass@1"] if final else None,
    }
    if (cell.run_dir / ERROR).is_file() and out["state"] != "finished":
        out["state"] = "failed"
    return out


def summary_table(matrix: Matrix) -> Table:
    table = Table(title=f"{matrix.out}", show_lines=False)
    for col in ("cell", "state", "base", "peak (step)", "final", "gain"):
        table.add_column(
            col,
            justify="left" if col in ("cell", "state") else "right",
            overflow="fold" if col == "cell" else "ellipsis",
        )  # a cell's name whole, on narrow terminals

    def f(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}"

    for cell in matrix.train_cells:
        s = cell_summary(matrix, cell)
        gain = s["final"] - s["base"] if s["final"] is not None and s["base"] is not None else None
        table.add_row(
            cell.name,
            s["state"],
            f(s["base"]),
            "-" if s["peak"] is None else f"{s['peak']:.3f} ({s['peak_step']})",
            f(s["final"]),
            "-" if gain is None else f"{gain:+.3f}",
        )
    return table
