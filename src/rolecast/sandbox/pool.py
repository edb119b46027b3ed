"""The pool: runs jobs concurrently, `workers` threads each driving one sandbox at a time in its own slot; the
module-level default pool; :func:`run_python` for one plain script."""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Literal, overload

from rolecast.sandbox.cgroups import Cgroups, Slot
from rolecast.sandbox.execute import execute
from rolecast.sandbox.jobs import Job, JobResult, Limits, RunResult
from rolecast.sandbox.probe import sandbox_status


class SandboxPool:
    """Runs jobs concurrently: `workers` threads, each driving one sandbox at a time in its own slot (its own
    cgroups where the machine allows them; as root every run also gets fresh uids)."""

    def __init__(self, workers: int | None = None, *, mode: str | None = None):
        """`mode`: None = the best this machine supports (:func:`sandbox_mode`); "fallback" forces the weaker
        one (what a machine without bubblewrap gets); "bwrap" insists on bubblewrap."""
        self.workers = workers or max(1, os.cpu_count() or 1)
        if self.workers > 256:
            raise ValueError("SandboxPool: at most 256 workers")
        if mode not in (None, "bwrap", "fallback"):
            raise ValueError(f"SandboxPool: mode must be None, 'bwrap' or 'fallback', got {mode!r}")
        found, why = sandbox_status()  # probe (and warn) up front, not inside the first batch
        if mode == "bwrap" and found != "bwrap":
            raise RuntimeError(f"SandboxPool(mode='bwrap'): {why}")
        self.mode = mode or found
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
        futures = [self._ex.submit(self._run_slot, j) for j in jobs]
        wait(futures)
        if not return_exceptions:
            return [f.result() for f in futures]
        out: list[JobResult | Exception] = []
        for f in futures:
            e = f.exception()
            if e is not None and not isinstance(e, Exception):
                raise e  # KeyboardInterrupt, SystemExit: not a job's doing
            out.append(e if e is not None else f.result())
        return out

    def close(self) -> None:
        self._ex.shutdown(wait=True)
        self._finalizer()

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
