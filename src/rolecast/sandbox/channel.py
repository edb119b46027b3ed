"""Reading what a run sends back: its stdout and stderr (capped) and the result channel (capped, parsed in
linear time), until everything closes or the deadline passes."""

from __future__ import annotations

import marshal
import os
import select
import subprocess
import time

from rolecast.sandbox.jobs import CaseResult, Job, JobResult

_DONE_GRACE_S = 0.5  # after the judge's last verdict: time for the program's process to flush and exit
_MAX_RESULT_LINE = 256


def collect(proc: subprocess.Popen, res_fd: int, out: JobResult, job: Job, deadline: float, res_cap: int) -> None:
    """Read the program's stdout/stderr (capped) and the result channel (capped, parsed in linear time)
    until everything closes or the deadline passes."""
    cap = job.limits.output_bytes
    assert proc.stdout is not None and proc.stderr is not None  # Popen(stdout=PIPE, stderr=PIPE)
    so, se = proc.stdout.fileno(), proc.stderr.fileno()
    bufs = {so: bytearray(), se: bytearray()}
    open_fds = {so, se, res_fd}
    res = bytearray()  # unparsed tail of the result channel
    res_total = 0
    try:
        while open_fds:
            left = deadline - time.monotonic()
            if left <= 0:
                if not (job.mode == "asserts" and out.done):
                    out.reason = out.reason or "timeout"
                return
            r, _, _ = select.select(list(open_fds), [], [], left)
            for fd in r:
                b = os.read(fd, 65536)
                if not b:
                    open_fds.discard(fd)
                    continue
                if fd != res_fd:
                    bufs[fd] += b
                    if len(bufs[fd]) > cap:
                        del bufs[fd][cap:]
                        out.reason = "output_limit"
                        return
                    continue
                res_total += len(b)
                if res_total > res_cap:
                    out.reason = "result_limit"
                    return
                res += b
                was_done = out.done
                if parse_results(res, out, job):
                    return
                if out.done and not was_done and job.mode == "asserts":
                    deadline = min(deadline, time.monotonic() + _DONE_GRACE_S)
    finally:
        out.stdout = bytes(bufs[so])
        out.stderr = bytes(bufs[se])


def parse_results(buf: bytearray, out: JobResult, job: Job) -> bool:
    """Consume complete records from `buf` (each byte is looked at once: the cost is linear in what arrives);
    True when the job can stop early."""
    if job.mode == "asserts":
        return _parse_verdicts(buf, out, job)
    return _parse_frames(buf, out, job)


def _parse_verdicts(buf: bytearray, out: JobResult, job: Job) -> bool:
    """The judge's lines: "pass I", "fail I [non_plain]", "load EXC", "stop WHY", "done"."""
    # split in C (one pass over the bytes), empty lines dropped in C: a flood of newlines costs no Python loop
    end = buf.rfind(b"\n") + 1
    if len(buf) - end > _MAX_RESULT_LINE:
        out.reason = out.reason or "result_limit"  # not the judge's format: stop reading
        return True
    lines = bytes(buf[:end]).split(b"\n")
    del buf[:end]
    for line in filter(None, lines):
        if len(line) > _MAX_RESULT_LINE:
            out.reason = out.reason or "result_limit"
            return True
        words = line.decode("ascii", "replace").split()
        if words:
            _verdict_line(words, out, job)
    return False


def _verdict_line(words: list[str], out: JobResult, job: Job) -> None:
    if out.done:
        return  # the judge writes nothing after `load` or `done`: what follows is not its verdicts
    if words[0] in ("pass", "fail") and len(words) in (2, 3) and words[1].isdigit():
        i = int(words[1])
        if i not in out.verdicts and i < len(job.tests):
            out.verdicts[i] = words[0] == "pass"
            if words[2:] == ["non_plain"]:
                out.non_plain.add(i)
    elif words[0] == "load":
        out.load_error = " ".join(words[1:]) or "error"
        out.done = True
    elif words[0] == "stop":
        out.reason = out.reason or (" ".join(words[1:]) or "stopped")
    elif words[0] == "done":
        out.done = True


def next_frame(buf: bytearray) -> dict | None:
    """The next complete "<len>\\n<marshal record>" frame of `buf` (consumed), None until one is complete. Frames are
    written only by the trusted harness; ValueError when the bytes are not one."""
    nl = buf.find(b"\n", 0, 24)
    if nl < 0:
        if len(buf) >= 24:
            raise ValueError("not a frame")
        return None
    n = int(buf[:nl])
    if len(buf) < nl + 1 + n:
        return None
    try:
        msg = marshal.loads(bytes(buf[nl + 1 : nl + 1 + n]))
    except (EOFError, TypeError) as e:
        raise ValueError(f"not a record: {e}") from None
    del buf[: nl + 1 + n]
    if not isinstance(msg, dict):
        raise ValueError("not a record")
    return msg


def case_result(msg: dict) -> CaseResult:
    """A case's record as the harness sent it."""
    return CaseResult(
        rc=msg["rc"], stdout=msg["stdout"], stderr=msg["stderr"], value=msg.get("value"), reason=msg.get("reason")
    )


def _parse_frames(buf: bytearray, out: JobResult, job: Job) -> bool:
    """stdio/functional: "<len>\\n<marshal record>" frames, written only by the trusted harness parent."""
    while True:
        try:
            msg = next_frame(buf)
        except ValueError:
            out.reason = out.reason or "result_limit"
            return True
        if msg is None:
            return False
        if msg.get("done"):
            out.done = True
            continue
        c = case_result(msg)
        out.cases.append(c)
        if job.stop_on is not None and job.stop_on(len(out.cases) - 1, c):
            out.reason = out.reason or "stopped_early"
            return True
