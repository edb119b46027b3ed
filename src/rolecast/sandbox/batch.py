"""Several jobs judged one after another in one container (bwrap, as root): the container's start-up, most of a
small job's cost, is paid once per batch instead of once per program.

What isolates one program of a batch from the others (docs/sandbox.md, "Batches"): each runs as a single job
runs, in processes forked for it alone from a supervisor that never read anything of another program; with two
uids of its own; only after every process of the one before it is gone and /tmp and /dev/shm are back to their
state at the batch's start; its output and the judge's verdicts captured by its own member supervisor and sent as
records of its own; its memory-cgroup OOM kills counted between the supervisor's "end" and the host's go-ahead.
The harness's side is the "batches" section of harness.py; this is the host's: plan the jobs, start the container,
feed the two streams (programs, judges), read the records, answer each "end".
"""

from __future__ import annotations

import marshal
import math
import os
import select
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rolecast.sandbox.cgroups import Slot
from rolecast.sandbox.channel import case_result, next_frame, parse_results
from rolecast.sandbox.execute import (
    _BOOT,
    _abandon,
    _end,
    _in_bwrap,
    _Plan,
    _plan,
    _send_all,
    harness_code,
    spawn,
)
from rolecast.sandbox.jobs import Job, JobResult, Limits

_MEMBER_SLACK_S = 3.0  # a member's deadline past its job's own (its start, the judge's grace, its record)
_HOST_SLACK_S = 3.0  # the host's past a member's: the supervisor ends an overrunning member first
_CLEANUP_S = 2.0  # the most a program's uid may take to remove what it left in /tmp and /dev/shm (else the batch ends)
_NOISE_TAIL = 4096  # of the container's own stdout/stderr (the harness's, never a program's), kept for errors


def batchable(mode: str) -> bool:
    """Can jobs be batched here? In bwrap mode as root (each program then has uids of its own)."""
    return mode == "bwrap" and os.getuid() == 0


def container_key(limits: Limits) -> tuple[int, int]:
    """What jobs of one batch must share: the container's memory cap and its tmpfs size."""
    return limits.memory_mb, limits.tmpfs_mb


def batches(jobs: Sequence[Job], workers: int, size: int) -> list[list[int]]:
    """The jobs' indices in batches: grouped by container_key, each group cut into batches of at most `size`, and
    into at least `workers` batches where it has that many jobs (so every worker has one)."""
    groups: dict[tuple[int, int], list[int]] = {}
    for k, job in enumerate(jobs):
        groups.setdefault(container_key(job.limits), []).append(k)
    out: list[list[int]] = []
    for idx in groups.values():
        per = max(1, min(size, math.ceil(len(idx) / max(1, workers))))
        out += [idx[i : i + per] for i in range(0, len(idx), per)]
    return out


@dataclass
class _Member:
    """One job of a batch: its plan, the host's deadline for it, the bytes its records may take, its result."""

    job: Job
    plan: _Plan
    deadline_s: float  # the supervisor's, for its member supervisor
    cap: int
    result: JobResult | None = None


def execute_batch(jobs: Sequence[Job], slot: Slot | None) -> list[JobResult | Exception | None]:
    """Run `jobs` (sharing container_key) one after another in one container, in `slot`'s memory cgroup. Per job,
    in order: its result; the exception planning it raised; or None when the container ended before reaching it
    (the caller runs those again: the first job always gets a result)."""
    out: list[JobResult | Exception | None] = [None] * len(jobs)
    members: list[_Member] = []
    where: list[int] = []
    for k, job in enumerate(jobs):
        try:
            members.append(_member(job, _plan(job, "bwrap", slot)))
            where.append(k)
        except Exception as e:  # noqa: BLE001 - one job's planning (parsing its tests) fails that job only
            out[k] = e
    if members:
        _run(members, slot)
    for k, m in zip(where, members, strict=True):
        out[k] = m.result
    return out


def _member(job: Job, plan: _Plan) -> _Member:
    if job.mode == "asserts":
        # the member supervisor enforces the job's time and the verdicts' cap itself
        plan.payload.update(timeout_s=job.limits.timeout_s, result_cap=plan.result_cap)
        cap = plan.result_cap + 2 * job.limits.output_bytes + (1 << 16)
    else:
        cap = plan.result_cap
    return _Member(job, plan, plan.wall_s + _MEMBER_SLACK_S, cap)


def _frame(obj: dict[str, Any]) -> bytes:
    data = marshal.dumps(obj)
    return len(data).to_bytes(4, "big") + data


def _run(members: list[_Member], slot: Slot | None) -> None:
    first = members[0].plan
    lim = first.job.limits
    fds: list[int] = []

    def pipe() -> tuple[int, int]:
        r, w = os.pipe()
        fds.extend((r, w))
        return r, w

    code_r, code_w = pipe()
    cand_r, cand_w = pipe()
    judge_r, judge_w = pipe()
    res_r, res_w = pipe()
    ctl_r, ctl_w = pipe()
    child_fds = [code_r, cand_r, judge_r, res_w, ctl_r]
    argv = [first.place.python, "-I", "-S", "-c", _BOOT, str(code_r), str(cand_r), str(judge_r), str(res_w)]
    argv = _in_bwrap([*argv, str(ctl_r)], lim, fds, child_fds)
    proc = spawn(argv, lim, slot, child_fds, None, first.place.env)
    if isinstance(proc, str):
        _abandon(fds, None)
        for m in members:
            m.result = JobResult(mode=m.job.mode, reason=f"sandbox_error: {proc}")
        return
    head = {
        "sys_path": first.place.sys_path,
        "trusted_limits": {
            "as_bytes": max(m.plan.payload["trusted_limits"]["as_bytes"] for m in members),
            "supervisor_cpu_s": int(sum(m.deadline_s for m in members)) + 1,
        },
        "deadlines": [m.deadline_s for m in members],
        "cleanup_s": _CLEANUP_S,
        # loaded once by the supervisor (the standard library and allowed packages, nothing of a program's): a
        # member then finds them loaded (the study's runner imports unittest.mock, more than a program's start-up)
        "preimport": sorted({m for mb in members for m in mb.plan.payload["preimport"]}),
        "mode": "functional" if any(m.job.mode == "functional" for m in members) else "",  # json, for them
        "uids": [m.plan.uids for m in members],
    }
    cand = _frame(head) + b"".join(_frame({**m.plan.payload, "index": i}) for i, m in enumerate(members))
    judges = b"".join(_frame({**m.plan.judge, "index": i}) for i, m in enumerate(members) if m.plan.judge)
    writers = _send_all([(code_w, harness_code()), (cand_w, cand), (judge_w, judges)])
    try:
        _collect(proc, res_r, ctl_w, members, slot)
    finally:
        for fd in (res_r, ctl_w):
            os.close(fd)
        _end(proc, first)
        for w in writers:
            w.join(timeout=5)


class _Reading:
    """The host's side of one batch while it runs: which member's records are arriving, and what they said."""

    def __init__(self, members: list[_Member], slot: Slot | None, ctl_w: int) -> None:
        self.members, self.slot, self.ctl_w = members, slot, ctl_w
        self.m = 0
        self.ooms = 0
        self.noise = bytearray()
        self._start()

    def _start(self) -> None:
        job = self.members[self.m].job
        self.out = JobResult(mode=job.mode)
        self.got = 0
        self.t0 = time.monotonic()
        self.deadline = self.t0 + self.members[self.m].deadline_s + _HOST_SLACK_S

    @property
    def running(self) -> bool:
        return self.m < len(self.members)

    def take(self, data: bytes, buf: bytearray) -> bool:
        """Bytes of the result channel; True when the batch must stop here (the container is then ended)."""
        self.got += len(data)
        if self.got > self.members[self.m].cap:
            return self.stop("result_limit")
        buf += data
        while self.running:
            try:
                rec = next_frame(buf)
            except ValueError:
                return self.stop("result_limit")
            if rec is None:
                return False
            if "end" in rec:
                if rec["end"] != self.m:
                    return self.stop("sandbox_error: batch out of step")
                if not self._end(bool(rec.get("clean")), bool(rec.get("overran"))):
                    return True
            elif rec.get("i") != self.m:
                return self.stop("sandbox_error: batch out of step")
            else:
                self._record(rec)
        return True

    def _record(self, rec: dict) -> None:
        job, out = self.members[self.m].job, self.out
        if job.mode == "asserts":
            parse_results(bytearray(rec["verdicts"]), out, job)
            out.stdout, out.stderr = rec["stdout"], rec["stderr"]
            out.reason = out.reason or rec["reason"]
        elif rec.get("done"):
            out.done = True
        elif out.reason != "stopped_early":
            c = case_result(rec)
            out.cases.append(c)
            if job.stop_on is not None and job.stop_on(len(out.cases) - 1, c):
                out.reason = out.reason or "stopped_early"
                _tell(self.ctl_w, b"s")  # the rest of this program's cases are not needed

    def _end(self, clean: bool, overran: bool) -> bool:
        """The supervisor's "end": the member's processes are all gone. Its OOM kills, its result; then the
        go-ahead for the next one (False: the batch ends here)."""
        if overran:
            self.out.reason = self.out.reason or "timeout"
        self._finish()
        if not clean or not self.running:
            return False
        return _tell(self.ctl_w, b"n")

    def _finish(self, reason: str | None = None) -> None:
        out, job = self.out, self.members[self.m].job
        if self.slot is not None:
            k = self.slot.oom_kills()
            if k > self.ooms:
                out.reason = "memory_limit"  # the member's processes together passed the job's memory cap
                self.ooms = k
        out.reason = out.reason or reason
        out.wall_s = time.monotonic() - self.t0
        if out.reason is None and job.mode != "asserts" and not out.done:
            out.reason = f"sandbox_error: harness ended early {self.noise[-300:].decode('utf-8', 'replace')}"
        self.members[self.m].result = out
        self.m += 1
        if self.running:
            self._start()

    def stop(self, reason: str) -> bool:
        """End the batch at the current member, with `reason` (the rest are run elsewhere)."""
        self._finish(reason)
        self.m = len(self.members)
        return True


def _tell(ctl_w: int, what: bytes) -> bool:
    try:
        os.write(ctl_w, what)
        return True
    except OSError:
        return False  # the container is gone


def _collect(proc: subprocess.Popen, res_fd: int, ctl_w: int, members: list[_Member], slot: Slot | None) -> None:
    """Read the result channel (and the container's own output, its tail kept) until every member has ended, the
    container has, or the current member's deadline has passed."""
    assert proc.stdout is not None and proc.stderr is not None  # Popen(stdout=PIPE, stderr=PIPE)
    reading = _Reading(members, slot, ctl_w)
    buf = bytearray()
    open_fds = {proc.stdout.fileno(), proc.stderr.fileno(), res_fd}
    while open_fds and reading.running:
        left = reading.deadline - time.monotonic()
        if left <= 0:
            reading.stop("timeout")
            return
        ready, _, _ = select.select(list(open_fds), [], [], left)
        for fd in ready:
            b = os.read(fd, 65536)
            if not b:
                open_fds.discard(fd)
            elif fd != res_fd:
                reading.noise += b
                del reading.noise[:-_NOISE_TAIL]
            elif reading.take(b, buf):
                return
    if reading.running:  # the container ended before the current member's "end"
        reading.stop(f"sandbox_error: batch container ended {reading.noise[-300:].decode('utf-8', 'replace')}")
