"""The pool: runs jobs concurrently, `workers` threads each driving one sandbox at a time in its own slot; the
module-level default pool; :func:`run_python` for one plain script."""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, Literal, overload

from rolecast.sandbox.batch import batchable, batches, execute_batch
from rolecast.sandbox.cgroups import Cgroups, Slot
from rolecast.sandbox.execute import execute
from rolecast.sandbox.jobs import Job, JobResult, Limits, RunResult
from rolecast.sandbox.probe import sandbox_status

DEFAULT_BATCH = 32  # programs judged one after another in one container (bwrap as root); docs/sandbox.md, "Batches"


class SandboxPool:
    """Runs jobs concurrently: `workers` threads, each driving one sandbox at a time in its own slot (its own
    cgroups where the machine allows them; as root every run also gets fresh uids). `run_many` judges up to `batch`
    jobs one after another in one container where that is allowed (bubblewrap as root), each program isolated from
    the others as docs/sandbox.md's "Batches" says; `batch=1` starts one container per job."""

    def __init__(self, workers: int | None = None, *, mode: str | None = None, batch: int | None = None):
        """`mode`: None = the best this machine supports (:func:`sandbox_mode`); "fallback" forces the weaker
        one (what a machine without bubblewrap gets); "bwrap" insists on bubblewrap. `batch`: the most jobs of
        one `run_many` per container (None: ROLECAST_SANDBOX_BATCH, else DEFAULT_BATCH)."""
        self.workers = workers or max(1, os.cpu_count() or 1)
        if self.workers > 256:
            raise ValueError("SandboxPool: at most 256 workers")
        self.batch = batch if batch is not None else int(os.environ.get("ROLECAST_SANDBOX_BATCH") or DEFAULT_BATCH)
        if self.batch < 1:
            raise ValueError(f"SandboxPool: batch must be at least 1, got {self.batch}")
        if mode not in (None, "bwrap", "fallback"):
            raise ValueError(f"SandboxPool: mode must be None, 'bwrap' or 'fallback', got {mode!r}")
        found, why = sandbox_status()  # probe (and warn) up front, not inside the first batch
        if mode == "bwrap" and found != "bwrap":
            raise RuntimeError(f"SandboxPool(mode='bwrap'): {why}")
        self.mode = mode or found
        self.batching = self.batch > 1 and batchable(self.mode)
        self._cg = Cgroups(f"rolecast-sbx-{os.getpid()}-{id(self):x}")
        self._finalizer = weakref.finalize(self, self._cg.close)
        self.cgroups = self._cg.ok  # per-job memory and process caps in force
        self._slots: list[Slot | None] = [self._cg.slot(i) for i in range(self.workers)]
        self._slot_lock = threading.Lock()
        self._ex = ThreadPoolExecutor(self.workers, thread_name_prefix="sandbox")

    def _run_slot(self, job: Job) -> JobResult:
        with self._slot_lock:
            slot = self._slots.pop()
        try:
            return execute(job, self.mode, slot)
        finally:
            with self._slot_lock:
                self._slots.append(slot)

    def _run_batch_slot(self, jobs: list[Job]) -> list[JobResult | Exception]:
        """`jobs` in batches on one slot until each has its result (a batch that ended early leaves the jobs after
        the one it ended at to the next)."""
        with self._slot_lock:
            slot = self._slots.pop()
        try:
            out: list[JobResult | Exception | None] = [None] * len(jobs)
            todo = list(range(len(jobs)))
            while todo:
                for k, r in zip(todo, execute_batch([jobs[k] for k in todo], slot), strict=True):
                    out[k] = r
                if out[todo[0]] is None:  # never: a batch always gives its first job a result (the belt)
                    out[todo[0]] = JobResult(mode=jobs[todo[0]].mode, reason="sandbox_error: batch ended at once")
                todo = [k for k in todo if out[k] is None]
            return [r for r in out if r is not None]
        finally:
            with self._slot_lock:
                self._slots.append(slot)

    def run(self, job: Job) -> JobResult:
        return self._ex.submit(self._run_slot, job).result()

    @overload
    def run_many(self, jobs: Iterable[Job], *, return_exceptions: Literal[False] = False) -> list[JobResult]: ...

    @overload
    def run_many(self, jobs: Iterable[Job], *, return_exceptions: Literal[True]) -> list[JobResult | Exception]: ...

    def run_many(
        self, jobs: Iterable[Job], *, return_exceptions: bool = False
    ) -> list[JobResult] | list[JobResult | Exception]:
        """Run `jobs` concurrently; their results in order. Every job runs to its end (and its processes are gone)
        before this returns. An exception one job raised on the host (planning it, reading it) is raised here, or
        with `return_exceptions`, returned in that job's place so that the others' results are kept."""
        jobs = list(jobs)
        if self.batching and len(jobs) > 1:
            out = self._run_batched(jobs)
        else:
            futures = [self._ex.submit(self._run_slot, j) for j in jobs]
            wait(futures)
            out = [_outcome(f) for f in futures]
        if not return_exceptions:
            for r in out:
                if isinstance(r, Exception):
                    raise r
        return out  # no exception in it unless return_exceptions

    def _run_batched(self, jobs: list[Job]) -> list[JobResult | Exception]:
        groups = batches(jobs, self.workers, self.batch)
        futures = [self._ex.submit(self._run_batch_slot, [jobs[k] for k in g]) for g in groups]
        wait(futures)
        out: list[JobResult | Exception | None] = [None] * len(jobs)
        for g, f in zip(groups, futures, strict=True):
            r = _outcome(f)
            for n, k in enumerate(g):
                out[k] = r if isinstance(r, Exception) else r[n]  # a failure of the whole batch: each of its jobs
        return [r for r in out if r is not None]

    def close(self) -> None:
        self._ex.shutdown(wait=True)
        self._finalizer()

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _outcome(f: Future[Any]) -> Any:
    """A finished future's result, or the exception it raised (a BaseException that is not an Exception is not a
    job's doing: raised)."""
    e = f.exception()
    if e is not None and not isinstance(e, Exception):
        raise e  # KeyboardInterrupt, SystemExit
    return e if e is not None else f.result()


_POOL: SandboxPool | None = None
_POOL_LOCK = threading.Lock()


def default_pool() -> SandboxPool:
    """The module-level pool (created on first use; ROLECAST_SANDBOX_WORKERS sets its size)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            n = int(os.environ.get("ROLECAST_SANDBOX_WORKERS", "0")) or max(1, os.cpu_count() or 1)
            _POOL = SandboxPool(n)
        return _POOL


def run_python(
    source: str, *, stdin: str = "", timeout_s: float = 10.0, memory_mb: int = 1024, pool: SandboxPool | None = None
) -> RunResult:
    """Run `source` as a script in the sandbox with `stdin`; returns its exit status and output."""
    limits = Limits(timeout_s=timeout_s, memory_mb=memory_mb)
    res = (pool or default_pool()).run(Job(mode="stdio", program=source, inputs=[stdin], limits=limits))
    return _as_run_result(res)


def _as_run_result(res: JobResult) -> RunResult:
    if not res.cases:
        return RunResult(
            None, "", res.stderr.decode("utf-8", "replace"), res.reason == "timeout", res.reason or "sandbox_error"
        )
    c = res.cases[0]
    return RunResult(
        returncode=c.rc,
        stdout=c.stdout.decode("utf-8", "replace"),
        stderr=c.stderr.decode("utf-8", "replace"),
        timed_out=c.reason == "timeout",
        reason=c.reason,
        stdout_bytes=c.stdout,
    )
