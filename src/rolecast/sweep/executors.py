"""Where cells run: in this process one after another, in local processes (as many at a time as the machine
has cores for), or as Ray tasks on a cluster. Every executor calls `cell.run_cell` and reports back through
`on_start(name)` / `on_finish(result)`; the cell itself records its state on disk, so they all resume alike.
"""

from __future__ import annotations

import functools
import json
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any, Protocol

from rolecast.core.rundir import DONE, ERROR, stopped_reason
from rolecast.sweep.cell import CellJob, CellResult, is_finished, is_stopped, run_cell

OnStart = Callable[[str], None]
OnFinish = Callable[[CellResult], None]


class Executor(Protocol):
    name: str
    # torch threads each cell gets (None: the cell's config decides)
    threads_per_cell: int | None

    def run(self, jobs: Sequence[CellJob], on_start: OnStart, on_finish: OnFinish) -> None: ...


def available_cpus() -> int:
    """Cores this process may use (the affinity mask in a container or under taskset, else os.cpu_count())."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class LocalExecutor:
    """One cell after another in this process (the config's own thread count)."""

    name = "local"
    threads_per_cell: int | None = None

    def run(self, jobs: Sequence[CellJob], on_start: OnStart, on_finish: OnFinish) -> None:
        for job in jobs:
            on_start(job.name)
            on_finish(run_cell(job))


def _child(job: CellJob) -> None:
    # the result travels through the cell's files (DONE.json / STOPPED.json / ERROR.txt); the exit code says if
    # it got there
    result = run_cell(job)
    os._exit(3 if result.status == "failed" else 0)


# What every cell imports (torch, transformers' Qwen3, the trainer, the decode path), imported once by the pool's
# fork server: a cell's process then starts in well under a second instead of ~4 s of imports (12 cells of
# `make run`: ~50 s of its ~730 cell-seconds).
PRELOAD = (
    "rolecast.sweep.cell",
    "rolecast.runtime",
    "rolecast.rollout.fast_qwen3",
    "rolecast.rollout.cpu_kernels",
    "transformers.models.qwen3.modeling_qwen3",
)


def cell_context() -> Any:
    """The multiprocessing context cells run in: forked from a fork server that imports `PRELOAD` when it starts
    (the first cell of this process; a module that fails to import there is skipped silently, so a test checks
    that each one imports)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(PRELOAD))
    return ctx


def base_seconds(job: CellJob, started: dict[str, float], finished: dict[str, float]) -> float | None:
    """How long `job`'s base evaluation took (its DONE.json, from this sweep or an earlier one), or has run so far
    if it is running (`started`: run directory -> `time.perf_counter()` at its start, of the running cells); None
    for a cell without one, or whose base evaluation failed. `finished` (run directory -> seconds) keeps what a
    DONE.json said, which does not change: each base evaluation's file is read once, not once per waiting cell
    per start."""
    base = job.base_run_dir
    if base is None:
        return None
    if base not in finished and (Path(base) / DONE).is_file():
        finished[base] = float(json.loads((Path(base) / DONE).read_text()).get("seconds") or 0.0)
    if base in finished:
        return finished[base]
    t0 = started.get(base)
    return None if t0 is None else time.perf_counter() - t0


def next_job(pending: Sequence[CellJob], base_seconds: Callable[[CellJob], float | None]) -> int:
    """The index in `pending` of the cell a free worker starts next: longest first, estimated by the base evaluation.

    Base evaluations go first, in matrix order: they are short, and the time each one takes ranks the training
    cells of its (workflow, task, model, seed), whose rollouts, updates and evaluations grow with the same generation
    work (`make run`: base evaluations of 2.0 / 6.7 / 7.5 / 10.8 s for Single / Voting / Eval-Opt / Orch-Workers,
    their training cells 14 / 81-84 / 108-126 / 130-137 s). Then the training cell whose `base_seconds` is largest
    (longest processing time first, so that the longest cells do not start last and finish alone with the other
    cores idle); ties, and cells with no estimate (None: no base evaluation, or a failed one), keep matrix order,
    the latter after those with one."""
    for i, job in enumerate(pending):
        if job.kind == "base_eval":
            return i
    estimates = [base_seconds(job) for job in pending]
    return max(range(len(pending)), key=lambda i: (estimates[i] is not None, estimates[i] or 0.0, -i))


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


class PoolExecutor:
    """Up to `workers` cells at once, each in its own fresh process with `threads_per_cell` torch threads, so
    the cells together use the cores they were given and no more; the longest cells first (`next_job`). A process
    per cell also means a cell that crashes the interpreter or is killed by the OS for memory fails alone.

    The processes are forked from a fork server (multiprocessing's "forkserver") that has imported `PRELOAD` and
    run nothing: torch's thread pools, which do not survive a fork, start in the cell on its first op, as in a
    spawned process, while the imports are inherited."""

    name = "pool"

    def __init__(self, workers: int | None = None, threads_per_cell: int = 1):
        self.threads_per_cell: int | None = threads_per_cell
        self.workers = workers or max(1, available_cpus() // threads_per_cell)

    def run(self, jobs: Sequence[CellJob], on_start: OnStart, on_finish: OnFinish) -> None:
        ctx = cell_context()
        pending = list(jobs)
        running: dict[Any, tuple[CellJob, Any, float]] = {}
        finished: dict[str, float] = {}  # base evaluations' seconds, as their DONE.json says (`base_seconds`)
        # SIGTERM (`kill`, a job scheduler) ends the driver through `finally` as Ctrl-C does: by default it would
        # die at once and leave its cells training as orphans, holding the cores (seen: two cells at 93% CPU for
        # minutes after `kill` of `make run`'s driver).
        main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGTERM, _exit_on_sigterm) if main else None
        try:
            while pending or running:
                while pending and len(running) < self.workers:
                    started = {other.run_dir: t0 for other, _, t0 in running.values()}
                    job = pending.pop(
                        next_job(pending, functools.partial(base_seconds, started=started, finished=finished))
                    )
                    proc = ctx.Process(target=_child, args=(job,), name=f"rolecast-cell-{job.name}")
                    proc.start()
                    running[proc.sentinel] = (job, proc, time.perf_counter())
                    on_start(job.name)
                for sentinel in wait(list(running)):
                    job, proc, t0 = running.pop(sentinel)
                    proc.join()
                    run_dir = Path(job.run_dir)
                    seconds = time.perf_counter() - t0
                    if proc.exitcode == 0 and is_finished(run_dir):
                        done = json.loads((run_dir / DONE).read_text())
                        on_finish(
                            CellResult(job.name, "done", seconds, done.get("resumed_from"), None, done.get("summary"))
                        )
                    elif proc.exitcode == 0 and is_stopped(run_dir):
                        on_finish(CellResult(job.name, "stopped", seconds, None, stopped_reason(run_dir)))
                    else:
                        error_file = run_dir / ERROR
                        if proc.exitcode == 3 and error_file.is_file():
                            last = [ln for ln in error_file.read_text().splitlines() if ln.strip()]
                            error = last[-1] if last else "failed"
                        else:
                            error = f"the cell's process exited with code {proc.exitcode} (killed or crashed)"
                            run_dir.mkdir(parents=True, exist_ok=True)
                            (run_dir / ERROR).write_text(error + "\n")
                        on_finish(CellResult(job.name, "failed", seconds, None, error[:500]))
        finally:
            for _, proc, _ in running.values():  # interrupted (Ctrl-C, SIGTERM): the cells stay resumable
                proc.terminate()
                proc.join()
            if main:
                signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


class RayExecutor:
    """Each cell a Ray task declaring its CPUs and GPUs; Ray places them (no scheduler of ours). Uses the Ray
    instance this process is already connected to, else `ray.init(address)` (None: start a local one).
    Cell directories must be on a filesystem every node sees."""

    name = "ray"

    def __init__(self, address: str | None = None, num_cpus: int = 1, num_gpus: float = 0, max_retries: int = 0):
        self.address, self.num_cpus, self.num_gpus, self.max_retries = address, num_cpus, num_gpus, max_retries
        self.threads_per_cell: int | None = num_cpus

    def run(self, jobs: Sequence[CellJob], on_start: OnStart, on_finish: OnFinish) -> None:
        try:
            import ray
        except ImportError as e:
            raise ImportError("the Ray executor needs the ray package: pip install 'rolecast[ray]'") from e
        if not ray.is_initialized():
            ray.init(address=self.address, include_dashboard=False)
        # a retried task resumes from the cell's checkpoint (run_cell reads the state from disk)
        remote = ray.remote(num_cpus=self.num_cpus, num_gpus=self.num_gpus, max_retries=self.max_retries)(run_cell)
        refs = {}
        for job in jobs:
            refs[remote.remote(job)] = job
            on_start(job.name)  # submitted: running, or queued until the cluster has room
        waiting = list(refs)
        while waiting:
            ready, waiting = ray.wait(waiting, num_returns=1)
            for ref in ready:
                job = refs[ref]
                try:
                    result: CellResult = ray.get(ref)
                except Exception as e:  # the worker died (node lost, out of memory): the cell failed, not the sweep
                    result = CellResult(job.name, "failed", error=f"{type(e).__name__}: {e}".splitlines()[0][:500])
                on_finish(result)


def make_executor(
    kind: str, *, workers: int | None = None, num_cpus: int = 1, num_gpus: float = 0, ray_address: str | None = None
) -> Executor:
    if kind == "local":
        return LocalExecutor()
    if kind == "pool":
        return PoolExecutor(workers, threads_per_cell=num_cpus)
    if kind == "ray":
        return RayExecutor(ray_address, num_cpus=num_cpus, num_gpus=num_gpus)
    raise ValueError(f"unknown executor {kind!r}; known: local, pool, ray")
