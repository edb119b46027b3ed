"""One cell of a sweep: its state on disk, and the function every executor runs for it.

A cell's state is read from its run directory only, so any executor (in-process, a local process, a Ray
worker on another node sharing the filesystem) and any rerun agree on it:
  finished     DONE.json exists (written atomically after `train()` returned)
  stopped      STOPPED.json exists: the run stopped itself (training diverged); final, like finished
  interrupted  the directory has a complete checkpoint and no DONE.json -> resume from that checkpoint
  fresh        anything else (no directory, or one without a checkpoint: removed and started over)
A cell that raised writes ERROR.txt (the traceback) into its directory; the next run retries it (resuming
when it left a checkpoint). A run that diverged is not retried: resumed from its last good checkpoint with the
same settings it diverges again, step for step (runs are bit-exact), so a rerun would only spend the time again.
Its STOPPED.json says at which step and why; delete it to retry the cell anyway.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from rich.console import Console as RichConsole

from rolecast.config.load import validate_config
from rolecast.core.errors import TrainingDiverged
from rolecast.core.quiet import quiet_libraries
from rolecast.core.rundir import DONE, ERROR, EVAL, STOPPED, cut_back_jsonl, stopped_reason, write_atomic
from rolecast.training.checkpoint import latest_step
from rolecast.training.grpo import train
from rolecast.training.sinks import Console

LOG = "sweep.log"  # the cell's console output, beside (not inside) its run directory: <out>/.logs/<cell>.log


@dataclass(frozen=True)
class CellJob:
    """What a worker needs to run one cell; plain data, so it pickles to a process or a Ray worker."""

    name: str
    kind: str  # "train" | "base_eval"
    run_dir: str
    config: dict[str, Any]  # RunConfig.model_dump(mode="json"), validated again in the worker, on its machine
    log_file: str
    threads: int | None = None  # torch threads for this cell (None: the config's)
    # the run directory of its base evaluation (a training cell of a matrix with base_eval): how long that took
    # ranks the cell in the process pool's queue (`executors.next_job`)
    base_run_dir: str | None = None


@dataclass
class CellResult:
    name: str
    status: Literal["done", "failed", "stopped"]  # stopped: the run stopped itself (diverged), not retried
    seconds: float = 0.0
    resumed_from: int | None = None  # the checkpoint step this session resumed from
    error: str | None = None  # the last line of the traceback (the whole one is in ERROR.txt)
    summary: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def is_finished(run_dir: Path) -> bool:
    return (run_dir / DONE).is_file()


def checkpoint_step(run_dir: Path) -> int | None:
    return latest_step(run_dir) if run_dir.is_dir() else None


def is_stopped(run_dir: Path) -> bool:
    return (run_dir / STOPPED).is_file()


def cell_state(run_dir: Path) -> Literal["finished", "stopped", "interrupted", "fresh"]:
    if is_finished(run_dir):
        return "finished"
    if is_stopped(run_dir):
        return "stopped"
    return "interrupted" if checkpoint_step(run_dir) is not None else "fresh"


def prepare(run_dir: Path) -> int | None:
    """Make the directory ready to (re)start: the checkpoint step to resume from, or None for a fresh start
    (any half-written directory without a checkpoint is removed, so the run starts clean)."""
    step = checkpoint_step(run_dir)
    if step is None:
        if run_dir.exists():
            shutil.rmtree(run_dir)
        return None
    (run_dir / ERROR).unlink(missing_ok=True)
    # a periodic evaluation at step k is appended before checkpoint k is written; a kill in between leaves a row the
    # resumed run writes again: keep rows up to the checkpoint, as train() does for metrics.jsonl
    cut_back_jsonl(run_dir / EVAL, lambda r: r.get("step", 0) <= step)
    return step


def run_cell(job: CellJob) -> CellResult:
    """Run (or resume) one cell to the end; never raises for a failure of the run itself: it is recorded in
    ERROR.txt and returned, so one bad cell does not stop the others."""
    run_dir = Path(job.run_dir)
    if is_finished(run_dir):  # e.g. a Ray retry after the first attempt finished
        return CellResult(job.name, "done", summary=json.loads((run_dir / DONE).read_text()).get("summary"))
    if is_stopped(run_dir):
        return CellResult(job.name, "stopped", error=stopped_reason(run_dir))
    t0 = time.perf_counter()
    resumed_from: int | None = None
    Path(job.log_file).parent.mkdir(parents=True, exist_ok=True)
    # libraries' bars and warnings kept out, as `rolecast train` does: in a pool or Ray worker the command line's
    # own setting is not inherited, and each cell printed PEFT's FutureWarning onto the sweep's terminal
    with open(job.log_file, "a") as log, quiet_libraries():
        try:
            config = dict(job.config)
            if job.threads:
                torch.set_num_threads(job.threads)
                config["threads"] = job.threads
            # the whole check, this machine's part included (device, model path, packages), where the cell runs
            cfg = validate_config(config, f"cell {job.name} on {socket.gethostname()}")
            resumed_from = prepare(run_dir)
            console = Console(enabled=False)  # no progress bar: the sweep shows its own
            console.rich = RichConsole(file=log, highlight=False, width=120)
            log.write(
                f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} {job.name}: "
                f"{'resume from step ' + str(resumed_from) if resumed_from is not None else 'fresh start'}\n"
            )
            log.flush()
            summary = train(cfg, resume=run_dir if resumed_from is not None else None, console=console)
        except TrainingDiverged as e:  # the run stopped itself: final (see the module's docstring)
            reason = str(e).splitlines()[0][:500]
            log.write(f"stopped: {reason}\n")
            seconds = time.perf_counter() - t0
            record = {"cell": job.name, "reason": reason, "seconds": seconds, "resumed_from": resumed_from}
            run_dir.mkdir(parents=True, exist_ok=True)  # a run that diverged on its first step leaves no directory
            write_atomic(run_dir / STOPPED, json.dumps(record, indent=1))
            return CellResult(job.name, "stopped", seconds, resumed_from, reason)
        except Exception as e:  # any failure of a cell is recorded, not raised
            tb = traceback.format_exc()
            log.write(tb)
            run_dir.mkdir(parents=True, exist_ok=True)
            write_atomic(run_dir / ERROR, tb)
            return CellResult(
                job.name,
                "failed",
                time.perf_counter() - t0,
                resumed_from,
                f"{type(e).__name__}: {e}".splitlines()[0][:500],
            )
    seconds = time.perf_counter() - t0
    summary = {k: v for k, v in summary.items() if isinstance(v, (int, float, str, list))}
    write_atomic(
        run_dir / DONE,
        json.dumps(
            {
                "cell": job.name,
                "kind": job.kind,
                "seconds": seconds,
                "resumed_from": resumed_from,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "summary": summary,
            },
            indent=1,
        ),
    )
    return CellResult(job.name, "done", seconds, resumed_from, None, summary)
