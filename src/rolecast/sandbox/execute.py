"""One job in a fresh sandbox: decide what each process inside may know (the program's payload, the judge's),
start the container (bwrap) or the fallback's process, feed it the harness and its job, read it out
(:mod:`rolecast.sandbox.channel`) and clean up."""

from __future__ import annotations

import functools
import logging
import marshal
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rolecast.sandbox.cgroups import Slot
from rolecast.sandbox.channel import collect
from rolecast.sandbox.container import (
    SANDBOX_ENV,
    SITE_DIR,
    bwrap_cmd,
    interpreter,
    interpreter_dirs,
    package_binds,
    site_dirs,
    world_readable,
)
from rolecast.sandbox.guard import seccomp_filter
from rolecast.sandbox.jobs import Job, JobResult, Limits
from rolecast.sandbox.testcode import guard_code, modules_used, names_used, program_imports
from rolecast.sandbox.uids import clean_up_uid, fresh_uids, procs_of_uid

log = logging.getLogger(__name__)

# ----------------------------------------------------------------------------------------------------------
# the in-sandbox harness (rolecast/sandbox/harness.py). Compiled once here and sent as a code object down a
# pipe to a one-line bootstrap (`python -I -S -c _BOOT <code_fd> <cand_fd> <judge_fd> <res_fd>`): nothing
# inside the sandbox has to find our source tree (it is not in the container's view), and no run pays for
# compiling the harness (a few ms each).

HARNESS_PATH = Path(__file__).parent / "harness.py"


@functools.cache
def harness_code() -> bytes:
    """The harness, compiled and marshalled (once per process)."""
    return marshal.dumps(compile(HARNESS_PATH.read_text(), str(HARNESS_PATH), "exec"))


# the harness runs in a namespace of its own, not __main__ (where `import __main__` would hand it to the program)
_BOOT = (
    "import marshal,sys;f=open(int(sys.argv[1]),'rb');c=f.read();f.close();del f;"
    "exec(marshal.loads(c),{'__name__':'__rolecast_harness__','__builtins__':__builtins__})"
)

# modules preloaded by the harness when the uid it drops to cannot read the interpreter's own files
# (fallback mode as root with Python under /root): the common ones in MBPP/HumanEval/LCB solutions, plus
# whatever the program's own import statements name (program_imports).
_PREIMPORT = (
    "math re collections itertools functools heapq bisect string operator copy json random statistics "
    "fractions decimal typing array datetime cmath hashlib traceback io textwrap unicodedata"
).split()

_CG_HEADROOM_MB = 96  # the judge's interpreter and bwrap, on top of the program's memory_mb


@dataclass
class _Place:
    """Where a run's processes live: the interpreter, their cwd, environment and sys.path, and the fallback's
    private directory (their cwd, HOME and TMPDIR; removed afterwards)."""

    python: str
    cwd: str
    env: dict[str, str]
    sys_path: list[str]
    tmpdir: str | None


@dataclass
class _Plan:
    """One run, decided before anything starts."""

    job: Job
    mode: str  # "bwrap" | "fallback"
    slot: Slot | None  # the pool slot's cgroup, if any
    place: _Place
    uids: tuple[int | None, int | None]  # (program's, judge's): fresh ones as root, else None
    payload: dict[str, Any]  # what the program's process may know
    judge: dict[str, Any] | None  # what only the judge may know (asserts mode)
    wall_s: float  # the whole run's deadline
    result_cap: int  # bytes the result channel may carry


def execute(job: Job, mode: str, slot: Slot | None = None) -> JobResult:
    """Run `job` in a fresh sandbox of `mode` ("bwrap" or "fallback"), in `slot`'s memory cgroup if given."""
    return _run(_plan(job, mode, slot))


# ----------------------------------------------------------------------------------------------------------
# the plan: payloads, budget


def _plan(job: Job, mode: str, slot: Slot | None) -> _Plan:
    lim = job.limits
    root = os.getuid() == 0
    cand_uid, judge_uid = fresh_uids() if root else (None, None)
    place = _place(mode, cand_uid)
    payload = _payload(job, place, cand_uid, _nproc(lim, slot, root))
    preimport = _preimports(job, mode, root)
    judge: dict[str, Any] | None = None
    if job.mode == "asserts":
        payload["prelude"] = job.prelude
        judge = _judge_payload(job, judge_uid, preimport)
    elif job.mode in ("stdio", "functional"):
        payload.update(cases=[{"input": x} for x in job.inputs], fn_name=job.fn_name, case_timeout_s=lim.timeout_s)
        if job.study is not None:
            payload["study"] = dict(job.study)
        preimport.update(job.preimport)
    else:
        raise ValueError(f"unknown sandbox job mode {job.mode!r}; expected asserts, stdio or functional")
    payload["preimport"] = sorted(preimport)
    payload["pidns"] = mode == "bwrap"  # the harness may kill(-1) inside its own pid namespace
    wall_s, result_cap = _budget(job)
    payload["trusted_limits"] = _trusted_limits(job.limits, wall_s)
    return _Plan(job, mode, slot, place, (cand_uid, judge_uid), payload, judge, wall_s, result_cap)


def _place(mode: str, cand_uid: int | None) -> _Place:
    if mode == "bwrap":
        return _Place(interpreter()[0], "/tmp", SANDBOX_ENV, [SITE_DIR] if package_binds() else [], None)
    # the fallback's private dir: cwd, HOME and TMPDIR, removed afterwards
    tmpdir = tempfile.mkdtemp(prefix="rolecast-sbx-")
    if cand_uid is not None:
        os.chown(tmpdir, cand_uid, cand_uid)
    os.chmod(tmpdir, 0o700)
    return _Place(sys.executable, tmpdir, {**SANDBOX_ENV, "HOME": tmpdir, "TMPDIR": tmpdir}, site_dirs(), tmpdir)


def _nproc(lim: Limits, slot: Slot | None, root: bool) -> int:
    if root:
        # the uid is this run's alone, so RLIMIT_NPROC caps this run's processes. Without a memory cgroup the
        # program gets no second process at all: then the per-process address-space limit bounds the run
        return lim.nproc if slot is not None else 1
    return procs_of_uid(os.getuid()) + lim.nproc


def _payload(job: Job, place: _Place, cand_uid: int | None, nproc: int) -> dict[str, Any]:
    """What the program's process (and in stdio/functional mode, the harness around it) may know."""
    lim = job.limits
    return {
        "mode": job.mode,
        "program": job.program,
        "uid": cand_uid,
        "cwd": place.cwd,
        "env": place.env,
        "sys_path": place.sys_path,
        "limits": {
            "cpu_s": max(1, int(lim.timeout_s + 0.999)),
            "as_bytes": lim.memory_mb << 20,
            "fsize_bytes": lim.fsize_mb << 20,
            "nofile": lim.nofile,
            "nproc": nproc,
            "output_bytes": lim.output_bytes,
        },
    }


_TRUSTED_MIN_MB = 512  # the supervisor's and the judge's address space, at least (an interpreter with numpy)


def _trusted_limits(lim: Limits, wall_s: float) -> dict[str, int]:
    """The supervisor's and the judge's own limits (harness `_set_own_limits`), whether or not a memory cgroup
    exists: address space as the program's (at least 512 MB); CPU seconds, the supervisor's over the whole run
    (the judge's: the program's, plus one)."""
    return {"as_bytes": max(lim.memory_mb, _TRUSTED_MIN_MB) << 20, "supervisor_cpu_s": int(wall_s + 0.999) + 1}


def _preimports(job: Job, mode: str, root: bool) -> set[str]:
    preimport: set[str] = set()
    if mode == "fallback" and root and not all(world_readable(d) for d in interpreter_dirs()):
        # the dropped uid cannot read the interpreter's files: load what the program needs while we still can
        preimport.update(_PREIMPORT)
        preimport.update(program_imports(job.program))
    return preimport


def _judge_payload(job: Job, judge_uid: int | None, preimport: set[str]) -> dict[str, Any]:
    """What only the judge may know: the tests (compiled with their checks guarded), the names they use, the
    modules they track. Adds "re" to `preimport` when the program imports it."""
    if "re" in program_imports(job.program):
        preimport.add("re")  # so that a match the program returns crosses as one (`assert matches(s)`)
    tracked: set[str] = {"builtins"}
    names: set[str] = set()
    for src in (job.prelude, job.setup, job.pinned, *job.tests):
        tracked.update(modules_used(src))
    for src in (job.setup, *job.tests):
        names.update(names_used(src))
    if "re" in preimport:
        tracked.add("re")
    return dict(
        uid=judge_uid, prelude=job.prelude, pinned=job.pinned, provided=job.provided, tracked=sorted(tracked),
        setup=guard_code(job.setup, "<test setup>"), names=sorted(names),
        tests=[guard_code(t, f"<test {i}>") for i, t in enumerate(job.tests)], bind=job.bind,
    )  # fmt: skip


def _budget(job: Job) -> tuple[float, int]:
    """(the run's wall-clock deadline in seconds, the bytes its result channel may carry)."""
    lim = job.limits
    if job.mode == "asserts":
        return lim.timeout_s, 4096 + 64 * len(job.tests)
    n_cases = max(1, len(job.inputs))
    return lim.timeout_s * n_cases + 2.0, lim.output_bytes * (n_cases + 1) * 2 + (1 << 16)


# ----------------------------------------------------------------------------------------------------------
# the run


def _run(plan: _Plan) -> JobResult:
    job, lim = plan.job, plan.job.limits
    fds: list[int] = []  # every descriptor of ours, closed if the run cannot start

    def pipe() -> tuple[int, int]:
        r, w = os.pipe()
        fds.extend((r, w))
        return r, w

    code_r, code_w = pipe()
    cand_r, cand_w = pipe()
    judge_r, judge_w = pipe() if plan.judge is not None else (-1, -1)
    res_r, res_w = pipe()
    child_fds = [code_r, cand_r, res_w] + ([judge_r] if plan.judge is not None else [])
    # -S: site's start-up work (and its .pth imports) costs ~5 ms a run; the harness sets sys.path itself
    argv = [plan.place.python, "-I", "-S", "-c", _BOOT, str(code_r), str(cand_r), str(judge_r), str(res_w)]
    if plan.mode == "bwrap":
        argv = _in_bwrap(argv, lim, fds, child_fds)
    out = JobResult(mode=job.mode)
    t0 = time.monotonic()
    proc = spawn(argv, lim, plan.slot, child_fds, plan.place.cwd if plan.mode == "fallback" else None, plan.place.env)
    if isinstance(proc, str):
        _abandon(fds, plan.place.tmpdir)
        out.reason = f"sandbox_error: {proc}"
        return out
    sends = [(code_w, harness_code()), (cand_w, marshal.dumps(plan.payload))]
    if plan.judge is not None:
        sends.append((judge_w, marshal.dumps(plan.judge)))
    writers = _send_all(sends)
    try:
        collect(proc, res_r, out, job, t0 + plan.wall_s, plan.result_cap)
    finally:
        os.close(res_r)
        _end(proc, plan)
        for w in writers:
            w.join(timeout=5)
        if plan.place.tmpdir:
            _clean_up_fallback(plan.place.tmpdir, plan.uids)
    _finish(out, proc, plan, t0)
    return out


def spawn(
    argv: list[str], lim: Limits, slot: Slot | None, child_fds: list[int], cwd: str | None, env: dict[str, str]
) -> subprocess.Popen | str:
    """Start `argv` (in `slot`'s memory cgroup, capped for `lim`) with `child_fds` passed and then closed here; the
    process, or why it could not start."""
    if slot is not None:
        try:
            procs = slot.begin((lim.memory_mb + _CG_HEADROOM_MB) << 20)
        except OSError as e:
            return f"cgroup: {e}"
        # the shell joins the job's cgroups, then becomes bwrap (or the fallback's python): all it starts is in them
        join = " && ".join(f"echo $$ > {shlex.quote(p)}" for p in procs)
        argv = ["/bin/sh", "-c", join + ' && exec "$@"', "sh", *argv]
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=tuple(child_fds),
            start_new_session=True,
            cwd=cwd,
            env=env,
        )
    except OSError as e:
        return str(e)
    for fd in child_fds:
        os.close(fd)
    return proc


def _in_bwrap(argv: list[str], lim: Limits, fds: list[int], child_fds: list[int]) -> list[str]:
    """`argv` inside a bubblewrap container, with the seccomp filter on a pipe of its own (when there is one)."""
    bpf = seccomp_filter()
    seccomp_r = None
    if bpf is not None:
        seccomp_r, seccomp_w = os.pipe()
        fds.append(seccomp_r)
        os.write(seccomp_w, bpf)  # a few hundred bytes: fits in the pipe buffer
        os.close(seccomp_w)
        child_fds.append(seccomp_r)
    return bwrap_cmd(lim, seccomp_r) + argv


def _abandon(fds: list[int], tmpdir: str | None) -> None:
    """The run could not start: close our descriptors, remove the fallback's private dir."""
    for fd in fds:
        os.close(fd)
    if tmpdir:
        shutil.rmtree(tmpdir, ignore_errors=True)


def _send_all(sends: list[tuple[int, bytes]]) -> list[threading.Thread]:
    """Write each payload to its pipe and close it; those too large for the pipe buffer from a thread each
    (returned, to be joined)."""
    writers = []
    for fd, data in sends:
        if len(data) <= 65536:  # fits in the pipe buffer: no writer thread needed
            _write_all(fd, data)
        else:
            writers.append(threading.Thread(target=_write_all, args=(fd, data), daemon=True))
            writers[-1].start()
    return writers


def _write_all(fd: int, data: bytes) -> None:
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError:
        pass  # the sandbox died before reading its job; the reader reports that
    finally:
        os.close(fd)


_END_WAIT_S = 10.0  # how long the end of a run may take before it is logged as stuck


def _end(proc: subprocess.Popen, plan: _Plan) -> None:
    """Kill what is left of a run and return only when every process of it is gone.

    In a container, the container's init (the harness) is killed first: the kernel then kills every other process
    of its pid namespace and the init's exit waits until they are reaped, and bubblewrap exits after its init. So
    once bubblewrap is reaped nothing of the run is left. (Killing bubblewrap first let its init die later, from
    --die-with-parent: a program that had filled its /tmp with files was still exiting seconds after the run
    had returned.) In the fallback, the process groups of the harness's children (a case's) and the harness's own;
    as root, then everything of the run's uids (`_clean_up_fallback`). Where the run had a memory cgroup, its slot
    is also waited on until it is empty."""
    if proc.poll() is None:
        if plan.mode == "bwrap":
            inits = _children(proc.pid)  # none yet: bubblewrap was still setting up, and goes with its group
            for pid in inits:
                _signal(pid, signal.SIGKILL)
            try:
                if inits:
                    proc.wait(timeout=_END_WAIT_S)
            except subprocess.TimeoutExpired:
                log.error("sandbox: bubblewrap %d did not exit after its container's init was killed", proc.pid)
        else:  # the fallback's harness: its per-case children run in process groups of their own
            for pid in _children(proc.pid):
                _signal(-pid, signal.SIGKILL)
        _signal(-proc.pid, signal.SIGKILL)  # its process group
    try:
        proc.wait(timeout=_END_WAIT_S)
    except subprocess.TimeoutExpired:
        log.error("sandbox process %d did not die", proc.pid)
    if plan.slot is not None and not plan.slot.wait_empty(_END_WAIT_S):
        log.error("sandbox: processes of a run still in its cgroup after %.0f s", _END_WAIT_S)


def _children(pid: int) -> list[int]:
    """The child processes of `pid` (bubblewrap's: the container's init)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except (OSError, ValueError):
        return []


def _signal(pid: int, sig: int) -> None:
    """os.kill, where a process already gone is not an error (a negative pid: its process group)."""
    try:
        if pid < 0:
            os.killpg(-pid, sig)
        else:
            os.kill(pid, sig)
    except OSError:
        pass


def _clean_up_fallback(tmpdir: str, uids: tuple[int | None, int | None]) -> None:
    for uid in uids:
        if uid is not None:
            clean_up_uid(uid)
    shutil.rmtree(tmpdir, ignore_errors=True)


def _finish(out: JobResult, proc: subprocess.Popen, plan: _Plan, t0: float) -> None:
    if plan.slot is not None and plan.slot.oom_kills():
        out.reason = "memory_limit"  # the run's processes together passed its memory cap
    out.returncode = proc.returncode
    out.wall_s = time.monotonic() - t0
    if out.reason is None and plan.job.mode != "asserts" and not out.done:
        err = out.stderr.decode("utf-8", "replace").strip()
        out.reason = f"sandbox_error: harness ended early (rc={proc.returncode}) {err[-300:]}"
