"""The trusted harness that runs inside every sandbox (see rolecast.sandbox for the whole design).

The host runs this file's code (sent down ``code_fd``) with ``python -I -S -c <boot> <code_fd> <cand_fd>
<judge_fd> <res_fd>``. ``cand_fd`` carries what the program's process may know (its source, limits, uid);
``judge_fd`` what only the judge may know (the tests); ``res_fd`` is the result channel to the host.

asserts mode (MBPP, HumanEval): two processes.

- The **candidate** is forked first, before the judge's payload has been read, so its memory never holds the
  tests, the expected values or the result channel (it closes ``judge_fd`` and ``res_fd`` before anything
  untrusted runs). It drops to its own uid, runs the program, then serves the judge's requests on a pair of
  pipes: look up a global, call an object, get or set an attribute. What it sends back is plain built-in
  data (see :func:`encode`) or an opaque handle to one of its objects.
- The **judge** (this process, on its own uid, or non-dumpable when there is only one uid) then reads the
  tests and runs them in its own interpreter, with the program's functions as ``Remote`` proxies. Only
  the judge writes verdicts. A handle can be passed back to the program (MBPP's ``Pair``/``Node`` objects)
  but never compared or asserted (that is ``non_plain``). So the program cannot reach the verdicts or the
  tests: frame walking, the garbage collector and memory scans only find the program's own process. The
  judge's functions that hold its state (the verdict writer, the channel, the checks) are closures made in
  the judge's process only, never in the candidate's.

stdio/functional mode: the parent (this process, which never runs untrusted code) forks one child per case
and sends each case's captured stdout / JSON return value to the host, which compares them; the expected
outputs never enter the sandbox.

Rules for this file: it runs alone (the container's file-system view holds no project tree, and the code
arrives as one code object), so stdlib only, and nothing of rolecast. Only modules that are cheap to import
are imported at the top (builtin ones, or ones the interpreter has loaded anyway); the rest (``json``,
``traceback``, ``ctypes``, ``re``, the study runner's ``unittest.mock``...) are imported inside the function
that needs them, only when it runs: their imports would double the interpreter's start-up time, which is
most of the cost of a sandbox run.
"""

import _sitebuiltins
import builtins
import io
import marshal
import os
import resource
import select
import sys
import time
from _collections import OrderedDict as _ODICT  # C types: cheap, no `collections` import
from _collections import defaultdict as _DDICT
from _collections import deque as _DEQUE

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_SIGKILL, _SIGXCPU = 9, 24
MAX_VALUE = 16 << 20  # largest message on the judge <-> candidate channel


# ----------------------------------------------------------------------------------------------------------
# plain-data codec for the judge <-> candidate channel. The judge decodes what the candidate sends with
# decode(): a small iterative parser that builds only exact built-in types (never marshal or pickle, which are
# not meant for hostile input). Tag byte, then a 4-byte big-endian length or count where one is needed.

_CONTAINERS = b"ltSZdoDqrcM"


def _u32(n: int) -> bytes:
    return n.to_bytes(4, "big")


class Unencodable(Exception):
    """The value is not plain built-in data (it crosses as a handle instead)."""


class ValueLimit(BaseException):
    """A message on the judge <-> candidate channel is larger than MAX_VALUE."""


def encode(v: "Any", handle: "Any" = None, depth: int = 0) -> bytes:
    """`v` as codec bytes. `handle(obj) -> int | None` names objects that cross as handles (None: not allowed)."""
    out: list[bytes] = []
    _enc(v, out, handle, depth)
    return b"".join(out)


def _enc(v: "Any", out: "list[bytes]", handle: "Any", depth: int) -> None:
    if depth > 100:
        raise Unencodable("too deep")
    t = type(v)
    atom = _enc_atom(v, t)
    if atom is not None:
        out.append(atom)
    elif t is complex:
        out.append(b"c" + _u32(2))
        _enc(v.real, out, handle, depth + 1)
        _enc(v.imag, out, handle, depth + 1)
    elif t is range:
        out.append(b"r" + _u32(3))
        for x in (v.start, v.stop, v.step):
            _enc(x, out, handle, depth + 1)
    elif t is list or t is tuple or t is set or t is frozenset or t is _DEQUE:
        tag = b"l" if t is list else b"t" if t is tuple else b"S" if t is set else b"Z" if t is frozenset else b"q"
        items = list(v)
        if t is _DEQUE:
            items.insert(0, v.maxlen)
        out.append(tag + _u32(len(items)))
        for x in items:
            _enc(x, out, handle, depth + 1)
    elif isinstance(v, dict):  # a dict subclass (Counter) crosses as the dict it stores
        tag = b"o" if t is _ODICT else b"D" if t is _DDICT else b"d"
        pairs = list(dict.items(v))
        out.append(tag + _u32(2 * len(pairs)))
        for k, x in pairs:
            _enc(k, out, handle, depth + 1)
            _enc(x, out, handle, depth + 1)
    else:
        _enc_other(v, t, out, handle, depth)


def _enc_atom(v: "Any", t: type) -> "bytes | None":
    """The bytes of None, a bool, int, float, str or bytes (exact types); None for anything else."""
    if v is None:
        return b"N"
    if t is bool:
        return b"T" if v else b"F"
    if t is int:
        n = (v.bit_length() + 8) // 8
        return b"i" + _u32(n) + v.to_bytes(n, "big", signed=True)
    if t is float:
        h = v.hex().encode()
        return b"f" + _u32(len(h)) + h
    if t is str:
        b = v.encode("utf-8", "surrogatepass")
        return b"s" + _u32(len(b)) + b
    if t is bytes:
        return b"b" + _u32(len(v)) + v
    return None


def _enc_other(v: "Any", t: type, out: "list[bytes]", handle: "Any", depth: int) -> None:
    """A regex match (as its text), or a handle; Unencodable when handles are not allowed."""
    re_mod = sys.modules.get("re")
    if re_mod is not None and t is re_mod.Match:  # MBPP's `assert text_match(s)`: the match crosses as its text
        out.append(b"M" + _u32(1))
        _enc(v.group(0), out, handle, depth + 1)
        return
    hid = handle(v) if handle is not None else None
    if hid is None:
        raise Unencodable(t.__name__)
    if type(hid) is str:  # the judge's genuine builtin or module function, sent by name (MBPP 533's `int`)
        b = hid.encode()
        out.append(b"B" + _u32(len(b)) + b)
    else:
        out.append(b"h" + _u32(hid))


def decode(buf: bytes, handle: "Any" = None) -> "Any":
    """Parse codec bytes into plain built-in values. `handle(id)` resolves handles, which are allowed anywhere
    when given (the candidate reading the judge's arguments); without it only ids at the top level are
    allowed, returned as ``("__handle__", id)`` (the judge reading the candidate's answers). Raises ValueError
    on anything malformed: truncated, trailing bytes, an unhashable key, a wrong type in a range or complex."""
    pos, n = 0, len(buf)
    stack: list[list[Any]] = []  # open containers: [tag, items still to come, items so far]
    while True:
        if pos >= n:
            raise ValueError("truncated")
        tag = buf[pos : pos + 1]
        pos += 1
        if tag in (b"N", b"T", b"F"):
            v: Any = None if tag == b"N" else tag == b"T"
        elif tag in (b"i", b"f", b"s", b"b", b"B"):  # a length, then that many bytes (the hot path: inline)
            if pos + 4 > n:
                raise ValueError("truncated")
            size = int.from_bytes(buf[pos : pos + 4], "big")
            pos += 4
            if pos + size > n:
                raise ValueError("truncated")
            v = _sized(tag, buf[pos : pos + size], handle)
            pos += size
        elif tag == b"h":
            v, pos = _handle_at(buf, pos, handle, bool(stack))
        elif tag and tag in _CONTAINERS:
            count, pos = _u32_at(buf, pos)
            if count > n - pos:
                raise ValueError("truncated")
            if count:
                stack.append([tag, count, []])
                continue
            v = _build(tag, [])
        else:
            raise ValueError("bad tag")
        while True:  # add v to the innermost open container, building each one its last item completes
            if not stack:
                if pos != n:
                    raise ValueError("trailing bytes")
                return v
            top = stack[-1]
            top[2].append(v)
            top[1] -= 1
            if top[1]:
                break
            stack.pop()
            v = _build(top[0], top[2])


def _u32_at(buf: bytes, pos: int) -> "tuple[int, int]":
    """(the 4-byte big-endian number at `pos`, the position after it)."""
    if pos + 4 > len(buf):
        raise ValueError("truncated")
    return int.from_bytes(buf[pos : pos + 4], "big"), pos + 4


def _handle_at(buf: bytes, pos: int, handle: "Any", nested: bool) -> "tuple[Any, int]":
    hid, pos = _u32_at(buf, pos)
    if handle is not None:
        return handle(hid), pos
    if nested:
        raise ValueError("a handle inside a value")
    return ("__handle__", hid), pos


def _sized(tag: bytes, raw: bytes, handle: "Any") -> "Any":
    """The int, float, str, bytes or builtin's name (b"B") whose bytes are `raw`."""
    if tag == b"i":
        return int.from_bytes(raw, "big", signed=True)
    if tag == b"s":
        return raw.decode("utf-8", "surrogatepass")
    if tag == b"f":
        return float.fromhex(raw.decode("ascii"))
    if tag == b"B":
        if handle is None:
            raise ValueError("a name from the program")
        return handle(raw.decode())
    return bytes(raw)


def _build(tag: bytes, items: "list[Any]") -> "Any":
    try:
        if tag == b"l":
            return items
        if tag == b"t":
            return tuple(items)
        if tag == b"S":
            return set(items)
        if tag == b"Z":
            return frozenset(items)
        if tag in (b"d", b"o", b"D"):
            return _build_dict(tag, items)
        if tag == b"q":
            return _build_deque(items)
        if tag == b"r":
            if len(items) != 3 or any(type(x) is not int for x in items):
                raise ValueError("bad range")
            return range(*items)
        if tag == b"c":
            if len(items) != 2 or any(type(x) is not float for x in items):
                raise ValueError("bad complex")
            return complex(items[0], items[1])
        if tag == b"M":
            return _build_match(items)
    except TypeError as e:  # unhashable key or set member
        raise ValueError(str(e)) from None
    raise ValueError("bad tag")


def _build_dict(tag: bytes, items: "list[Any]") -> "Any":
    if len(items) % 2:
        raise ValueError("odd dict")
    pairs = zip(items[::2], items[1::2], strict=True)
    if tag == b"d":
        return dict(pairs)
    if tag == b"o":
        return _ODICT(pairs)
    return _DDICT(None, pairs)


def _build_deque(items: "list[Any]") -> "Any":
    if not items or not (items[0] is None or type(items[0]) is int and items[0] >= 0):
        raise ValueError("bad deque")
    return _DEQUE(items[1:], items[0])


def _build_match(items: "list[Any]") -> "Any":
    if len(items) != 1 or type(items[0]) not in (str, bytes):
        raise ValueError("bad match")
    import re  # only when a match crosses; a genuine Match built here, of the text the program matched

    return re.compile(re.escape(items[0])).match(items[0])


# os.write/os.read bound now: a program that patches the os module does not reach the channel's own calls
def _send_msg(fd: int, body: bytes, _write: "Any" = os.write) -> None:
    data = len(body).to_bytes(4, "big") + body
    while data:
        data = data[_write(fd, data) :]


def _recv_exact(fd: int, n: int, _read: "Any" = os.read) -> bytes:
    chunks = []
    while n:
        b = _read(fd, min(n, 1 << 20))
        if not b:
            raise EOFError("channel closed")
        chunks.append(b)
        n -= len(b)
    return b"".join(chunks)


def _recv_msg(fd: int) -> bytes:
    n = int.from_bytes(_recv_exact(fd, 4), "big")
    if n > MAX_VALUE:
        raise ValueLimit(str(n))
    return _recv_exact(fd, n)


def _read_payload(fd: int) -> "dict[str, Any]":
    chunks = []
    while True:
        b = os.read(fd, 1 << 20)
        if not b:
            break
        chunks.append(b)
    os.close(fd)
    job: dict[str, Any] = marshal.loads(b"".join(chunks))
    return job


# ----------------------------------------------------------------------------------------------------------
# the supervisor: sets up, forks the program's process and the judge (asserts) or one child per case


def _main() -> None:
    cand_fd, judge_fd, res_fd = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    if len(sys.argv) > 5:  # several programs, one after another (see "batches" below)
        _batch_main(cand_fd, judge_fd, res_fd, int(sys.argv[5]))
        return
    _open_oom_adj()  # while this process is still dumpable, so that its /proc files are its own to write
    if os.getuid() != 0:
        # one uid for every process here (no root to drop from): before anything is forked, so that the
        # supervisor, the judge and the program's process are all non-dumpable and none can open another's
        # /proc/<pid>/mem, fd/ or environ (the filter denies ptrace and process_vm_* besides)
        _no_dump()
    job = _read_payload(cand_fd)
    _set_own_limits(job["trusted_limits"], job["trusted_limits"]["supervisor_cpu_s"])
    sys.path.extend(job["sys_path"])
    _install_exit()
    _preload(job)
    pidns = job.get("pidns", False)
    if job["mode"] == "asserts":
        cpid, jpid = _start_program_and_judge(job, judge_fd, res_fd)
        # this process (the supervisor) runs neither the program nor the tests: it waits for the judge, then
        # ends the program's processes and reaps them here, so nothing is left for the host's init to reap
        del job
        os.waitpid(jpid, 0)
        _end_all(pidns, cpid)
        return
    # stdio / functional: one child per case; the parent only shuttles bytes
    _run_cases(job, res_fd)
    _end_all(pidns, None)


# the OOM killer's order inside a job: the program's processes first, then the judge, the supervisor last (a
# process may raise its own oom_score_adj, never lower it below where a privileged writer left it)
_OOM_PROGRAM, _OOM_JUDGE, _OOM_SUPERVISOR = 1000, 700, 300
_OOM: "dict[str, int]" = {}  # "fd": the supervisor's /proc/self/oom_score_adj, "base": the value it keeps


def _open_oom_adj() -> None:
    """Open the supervisor's oom_score_adj once, and raise it to its level. A child inherits the value its parent
    has when it is forked: the supervisor raises it to the child's level just before a fork (`_oom_for_child`)
    and lowers it again just after. The descriptor is opened while the supervisor is dumpable (without root,
    `_no_dump` makes its /proc files root's) and never reaches a child that runs anything (`_enter_child` and
    the judge close it)."""
    try:
        fd = os.open("/proc/self/oom_score_adj", os.O_RDWR)
        base = max(int(os.read(fd, 16) or b"0"), _OOM_SUPERVISOR)
        os.write(fd, b"%d" % base)
    except (OSError, ValueError):
        return  # no /proc or not writable: the kernel's own order
    _OOM["fd"], _OOM["base"] = fd, base


def _oom_for_child(level: "int | None") -> None:
    """Set the supervisor's oom_score_adj to `level` (a child about to be forked), or back to its own (None)."""
    fd = _OOM.get("fd")
    if fd is not None:
        try:
            os.write(fd, b"%d" % max(level if level is not None else 0, _OOM["base"]))
        except OSError:
            pass


def _close_oom_adj() -> None:
    """In a child: the supervisor's oom_score_adj is not its to write."""
    fd = _OOM.pop("fd", None)
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass


def _set_own_limits(lim: "dict[str, Any]", cpu_s: int) -> None:
    """The supervisor's and the judge's own limits, set by each for itself (trusted code, but reading what the
    program sends; with or without a memory cgroup): address space (the program's, at least 512 MB), CPU time,
    no core file. The address-space limit stays at least the program's, so the program's children may set theirs."""
    for limit, value in (
        (resource.RLIMIT_AS, lim["as_bytes"]),
        (resource.RLIMIT_CPU, cpu_s),
        (resource.RLIMIT_CORE, 0),
    ):
        try:
            resource.setrlimit(limit, (value, value + 1 if limit == resource.RLIMIT_CPU else value))
        except (ValueError, OSError):
            pass  # a limit already lower (the host's): keep it


def _no_dump() -> None:
    """Make this process (and what it forks) non-dumpable: a process of the same uid can then neither ptrace
    it nor open its /proc/<pid>/mem, fd/ or environ (needed when the judge shares the program's uid)."""
    import ctypes  # only without root; costs about as much as the interpreter's start-up

    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0


def _drop(uid: "int | None") -> None:
    if uid is not None and os.getuid() == 0:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        if os.getuid() == 0 or os.geteuid() == 0:
            os._exit(125)


def _install_exit() -> None:
    """exit() and quit() as `site` would define them (the interpreter starts without site)."""
    builtins.exit = _sitebuiltins.Quitter("exit", "Ctrl-D (i.e. EOF)")
    builtins.quit = _sitebuiltins.Quitter("quit", "Ctrl-D (i.e. EOF)")


def _preload(job: "dict[str, Any]") -> None:
    if job["mode"] == "functional":
        __import__("json")  # before forking, so each case's child does not pay for it
    for m in job.get("preimport", ()):
        # in the fallback with an interpreter the dropped uid cannot read: what the program imports, loaded
        # while we still can
        try:
            __import__(m)
        except Exception:
            pass


def _enter_child(job: "dict[str, Any]", keep_fds: "set[int]", own_group: bool) -> None:
    """Runs first in every child: limits, privileges, cwd; nothing untrusted has run yet."""
    if own_group:  # per-case children: the harness kills the group after each case
        os.setpgid(0, 0)
    _close_oom_adj()
    lo = 3
    for fd in sorted(k for k in keep_fds if k >= 3):
        os.closerange(lo, fd)
        lo = fd + 1
    os.closerange(lo, 1024)
    _set_limits(job["limits"])
    _drop(job.get("uid"))
    os.chdir(job["cwd"])
    os.environ.clear()
    os.environ.update(job["env"])


def _set_limits(lim: "dict[str, Any]") -> None:
    cpu = int(lim["cpu_s"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_AS, (lim["as_bytes"], lim["as_bytes"]))
    resource.setrlimit(resource.RLIMIT_FSIZE, (lim["fsize_bytes"], lim["fsize_bytes"]))
    resource.setrlimit(resource.RLIMIT_NOFILE, (lim["nofile"], lim["nofile"]))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if lim.get("nproc"):
        resource.setrlimit(resource.RLIMIT_NPROC, (lim["nproc"], lim["nproc"]))


def _start_program_and_judge(
    job: "dict[str, Any]", judge_fd: int, res_fd: int, index: "int | None" = None
) -> "tuple[int, int]":
    """asserts: fork the program's process (before the judge's payload has been read), then the judge;
    (program's pid, judge's pid). `index`: in a batch, the program's number (its judge reads that message of the
    judges' stream, and keeps no other descriptor)."""
    _exit = os._exit
    req_r, req_w = os.pipe()
    rep_r, rep_w = os.pipe()
    _oom_for_child(_OOM_PROGRAM)
    cpid = os.fork()
    if cpid == 0:
        try:
            # the judge's payload is still unread in its pipe: close it and the result channel first
            os.close(judge_fd)
            os.close(res_fd)
            os.close(req_w)
            os.close(rep_r)
            _enter_child(job, {0, 1, 2, req_r, rep_w}, False)
            _serve(job["prelude"], job["program"], req_r, rep_w)
        finally:
            _exit(0)
    os.close(req_r)
    os.close(rep_w)
    _oom_for_child(_OOM_JUDGE)
    jpid = os.fork()
    if jpid == 0:
        try:
            _close_oom_adj()
            _set_own_limits(job["trusted_limits"], job["limits"]["cpu_s"] + 1)
            if index is not None:
                _close_all_but({0, 1, 2, judge_fd, req_w, rep_r, res_fd})
            _judge_process(judge_fd, req_w, rep_r, res_fd, index)
        finally:
            _exit(0)
    _oom_for_child(None)
    for fd in (judge_fd, res_fd, req_w, rep_r):
        os.close(fd)
    return cpid, jpid


def _judge_process(judge_fd: int, req_fd: int, rep_fd: int, res_fd: int, index: "int | None" = None) -> None:
    judge = _read_payload(judge_fd) if index is None else _recv_indexed(judge_fd, index)
    if judge is None:
        return  # the batch's stream ended before this program's tests: no verdicts
    for m in judge["tracked"]:  # the tests' modules, before the uid drop (an unreadable interpreter)
        try:
            __import__(m)
        except Exception:
            pass
    if judge.get("uid") is not None:
        _drop(judge["uid"])
    _judge(judge, req_fd, rep_fd, res_fd)


# ----------------------------------------------------------------------------------------------------------
# stdio / functional: one child per case


def _run_cases(job: "dict[str, Any]", res_fd: int, tag: "dict[str, int] | None" = None, stop: "Any" = None) -> None:
    """One child per case, its record on the result channel. In a batch: each record carries `tag` (the program's
    number), and `stop()` is asked before each case after the first (the host has seen enough)."""
    tag = tag or {}
    for i, case in enumerate(job["cases"]):
        if i and stop is not None and stop():
            break
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        val_r, val_w = os.pipe()
        in_fd = _stdin_file(case["input"])
        _oom_for_child(_OOM_PROGRAM)
        pid = os.fork()
        if pid == 0:
            _case_child(job, case, in_fd, out_w, err_w, val_w)  # never returns
        _oom_for_child(None)
        for fd in (out_w, err_w, val_w, in_fd):
            os.close(fd)
        pipes = {"stdout": out_r, "stderr": err_r, "value": val_r}
        got, st, reason = _wait_child(pid, job["case_timeout_s"], pipes, job["limits"]["output_bytes"])
        _send_result(res_fd, {**_case_record(i, job, got, st, reason), **tag})
    _send_result(res_fd, {"done": True, **tag})


def _stdin_file(text: str) -> int:
    """A memory file holding `text`, at its start: the case's stdin."""
    in_fd = os.memfd_create("stdin")
    data = text.encode()
    while data:
        data = data[os.write(in_fd, data) :]
    os.lseek(in_fd, 0, 0)
    return in_fd


def _send_result(res_fd: int, obj: "Any", _write: "Any" = os.write) -> None:
    """One "<len>\\n<marshal record>" frame on the result channel."""
    data = marshal.dumps(obj)
    data = b"%d\n" % len(data) + data
    while data:
        n = _write(res_fd, data)
        data = data[n:]


def _case_record(
    i: int, job: "dict[str, Any]", got: "dict[str, bytearray]", st: int, reason: "str | None"
) -> "dict[str, Any]":
    mode = job["mode"]
    rc, why = _decode_status(st)
    if mode == "stdio" and job.get("study") is not None:
        got["stdout"] = got["value"]  # what the program printed to the captured sys.stdout
    return {
        "case": i,
        "rc": rc,
        "reason": reason or why,
        "stdout": bytes(got["stdout"]),
        "stderr": bytes(got["stderr"][-4096:]),
        "value": bytes(got["value"]).decode("utf-8", "replace") if mode == "functional" else None,
    }


def _decode_status(st: int) -> "tuple[int, str | None]":
    if os.WIFEXITED(st):
        return os.WEXITSTATUS(st), None
    sig = os.WTERMSIG(st)
    return -sig, ("cpu_limit" if sig == _SIGXCPU else None)


def _case_child(
    job: "dict[str, Any]",
    case: "dict[str, Any]",
    in_fd: int,
    out_w: int,
    err_w: int,
    val_w: int,
    _exit: "Any" = os._exit,
) -> None:
    """A case's child: its stdio on the pipes, limits and privileges, then the program (as a script, the
    study's way, or a call of its function). Ends the process; `_exit` is bound before the program runs."""
    try:
        os.dup2(in_fd, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        val_fd = val_w
        if val_fd < 3:
            val_fd = os.dup(val_fd)
        _enter_child(job, {0, 1, 2, val_fd}, True)
        prog = job["program"]
        study = job.get("study")
        if study is not None:
            _study_setup(study)
        if job["mode"] == "stdio":
            if study is not None:
                text = case["input"]
                _forget(job, case)
                _exit(_study_stdio(prog, text, val_fd))
            _exit(_run_main(prog, "__main__"))
        _exit(_call_function(job, case, prog, study, val_fd))
    except SystemExit as e:
        _exit(e.code if isinstance(e.code, int) else 1)
    except BaseException:
        import traceback  # only after a failure

        try:
            traceback.print_exc()
            sys.stderr.flush()
        except BaseException:
            pass
        _exit(1)
    finally:
        _exit(1)


def _forget(job: "dict[str, Any]", case: "dict[str, Any]") -> None:
    """In a case's child, before the program runs: what it was told of the job is no longer in its reach
    (emptied in this process only; the caller's frames still name the dicts)."""
    job.clear()
    case.clear()


def _run_main(src: str, name: str) -> int:
    """Execute a program as a script; returns its exit status (flushing what it printed)."""
    status = 0
    try:
        code = compile(src, "<program>", "exec")
        exec(code, {"__name__": name, "__builtins__": __builtins__})
    except SystemExit as e:
        c = e.code
        status = c if isinstance(c, int) else (0 if c is None else 1)
    except BaseException:
        import traceback  # only after a failure

        try:
            traceback.print_exc()
        except BaseException:
            pass
        status = 1
    _flush()
    return status & 0xFF


def _call_function(
    job: "dict[str, Any]", case: "dict[str, Any]", prog: str, study: "Any", val_fd: int, _write: "Any" = os.write
) -> int:
    """functional: call the program's function with the case's arguments (JSON lines); its JSON return value
    goes to `val_fd`. Returns the exit status (0; an exception propagates)."""
    import json  # loaded before the fork (_preload): a lookup in sys.modules

    fn = job["fn_name"]
    if study is not None:  # every line is one argument, a blank one included (an error)
        args = [json.loads(line) for line in case["input"].split("\n")]
    else:
        args = [json.loads(line) for line in case["input"].split("\n") if line.strip()]
    _forget(job, case)
    g: dict[str, Any] = {"__name__": "__solution__", "__builtins__": __builtins__}
    if study is not None:
        g["__name__"] = "tmp_sol"
    exec(compile(prog, "<program>", "exec"), g)
    sol = g.get("Solution")
    if study is not None:  # the study: `class Solution` in the text decides, then the attribute
        f = getattr(g["Solution"](), fn) if "class Solution" in prog else g[fn]
    else:
        f = getattr(sol(), fn) if sol is not None and hasattr(sol, fn) else g[fn]
    res = f(*args)
    if study is not None and isinstance(res, tuple):
        res = list(res)
    # the study compares the value itself (`==`), so a numpy scalar equals its Python value there: it crosses as one
    data = json.dumps(res, default=_numpy_scalar if study is not None else None).encode()
    while data:
        data = data[_write(val_fd, data) :]
    _flush()
    return 0


def _numpy_scalar(o: "Any") -> "Any":
    """json's fallback under the study's runner: a numpy scalar (or 0-d array) as its Python value, which it equals
    under `==`; anything else (an array of more values, which `==` cannot decide) stays a TypeError, a failure."""
    if type(o).__module__ == "numpy" and getattr(o, "ndim", None) == 0:
        return o.item()
    raise TypeError(f"{type(o).__name__} is not JSON serializable")


def _wait_child(
    pid: int, deadline_s: float, pipes: "dict[str, int]", cap: int
) -> "tuple[dict[str, bytearray], int, str | None]":
    """Collect the child's pipes (name -> fd) up to the output cap `cap`, within the deadline; then end its
    process group. (what each pipe carried, the wait status, "timeout" / "output_limit" / None)."""
    got = {k: bytearray() for k in pipes}
    pidfd = os.pidfd_open(pid)
    status, reason = _pump(pid, pidfd, pipes, got, cap, time.monotonic() + deadline_s)
    _killpg(pid)
    if status is None:
        try:
            os.kill(pid, _SIGKILL)
        except OSError:
            pass
        _, status = os.waitpid(pid, 0)
    for fd in pipes.values():
        try:
            os.close(fd)
        except OSError:
            pass
    os.close(pidfd)
    return got, status, reason


def _pump(
    pid: int, pidfd: int, pipes: "dict[str, int]", got: "dict[str, bytearray]", cap: int, end: float
) -> "tuple[int | None, str | None]":
    """Read the pipes into `got` until they close and the child has exited, the deadline `end` passes, or a
    pipe carries more than `cap`: (the wait status if it exited, the reason it was cut short)."""
    open_fds = {fd: k for k, fd in pipes.items()}
    status = None
    reason = None
    while open_fds or status is None:
        left = end - time.monotonic()
        if left <= 0:
            reason = "timeout"
            break
        watch = list(open_fds) + ([pidfd] if status is None else [])
        r, _, _ = select.select(watch, [], [], left)
        for fd in r:
            if fd == pidfd:
                _, st = os.waitpid(pid, 0)
                status = st
                _killpg(pid)  # leftovers holding the pipes open
                continue
            b = os.read(fd, 65536)
            k = open_fds[fd]
            if not b:
                del open_fds[fd]
                continue
            got[k] += b
            if len(got[k]) > cap:
                reason = "output_limit"
                del got[k][cap:]
        if reason:
            break
    return status, reason


def _killpg(pid: int) -> None:
    try:
        os.killpg(pid, _SIGKILL)
    except OSError:
        pass


_GUARDED_OS = (
    "kill system putenv remove removedirs rmdir fchdir setuid fork forkpty killpg rename renames truncate replace "
    "unlink fchmod fchown chmod chown chroot lchflags lchmod lchown getcwd chdir"
)


def _study_setup(opts: "dict[str, Any]") -> None:
    """The study's reliability_guard (rllm/rewards/code_utils/livecodebench.py), when asked for: in the case's
    child, after its limits, before the program. exit() stays (the study leaves it), quit() does not."""
    if not opts.get("reliability_guard"):
        return
    # only for the study's guard, in the case's child
    import faulthandler
    import shutil
    import subprocess

    faulthandler.disable()
    os.environ["OMP_NUM_THREADS"] = "1"
    names = ((builtins, "quit help"), (os, _GUARDED_OS), (shutil, "rmtree move chown"), (subprocess, "Popen"))
    for mod, attrs in names:
        for name in attrs.split():
            setattr(mod, name, None)
    modules: Any = sys.modules
    for name in ("ipdb", "joblib", "resource", "psutil", "tkinter"):
        modules[name] = None


def _study_stdio(prog: str, text: str, out_fd: int) -> int:
    """Run a standard-input program as the study's runner does (rllm/rewards/code_utils/livecodebench.py,
    grade_stdio and call_method): the module `tmp_sol` defines `wrapped_function`, called with sys.stdin an
    in-memory text stream of the input, `open` returning that text, and sys.stdout an in-memory stream, whose
    text goes to `out_fd`. SystemExit ends the run normally; another exception (or no `wrapped_function`) is
    status 1. As the runner's compile_code, a program whose text says `class Solution` is taken for a LeetCode
    class and its function looked up on `Solution()`: wrapping moved the class into `wrapped_function`, so that
    fails (status 1) whatever the program does."""
    # only for the study's runner, in the case's child (unittest.mock alone costs more than a run's start-up)
    from types import ModuleType
    from unittest.mock import mock_open, patch

    status = 0
    buf: Any = io.StringIO()
    # the study's Capturing sets `close = lambda x: 1`: closing with one argument is a no-op, and the usual
    # sys.stdout.close() raises TypeError, a failed test, as there
    buf.close = lambda x: 1
    real_out = sys.stdout
    try:
        mod = ModuleType("tmp_sol", "")
        exec(compile(prog, "<program>", "exec"), mod.__dict__)
        holder = mod.Solution() if "class Solution" in prog else mod
        method = holder.wrapped_function
        with patch("builtins.open", mock_open(read_data=text)), patch("sys.stdin", io.StringIO(text)):
            sys.stdout = buf
            try:
                method()
            except SystemExit:
                pass
            finally:
                sys.stdout = real_out
    except BaseException:
        sys.stdout = real_out
        import traceback  # only after a failure

        try:
            traceback.print_exc()
        except BaseException:
            pass
        status = 1
    data = buf.getvalue().encode("utf-8", "surrogatepass")
    vars(buf).pop("close", None)  # the finalizer's own close() (no argument) is no test of the program
    while data:
        data = data[os.write(out_fd, data) :]
    _flush()
    return status


def _end_all(pidns: bool, child: "int | None") -> None:
    """Kill what is left of the program's processes and wait until they are reaped (inside the container, by
    us or by bwrap's init), so that no zombie is handed to the host's init. The usual case costs no sleep:
    the program's process exits as soon as the judge is gone, and then nothing else is left."""
    if child is not None:  # the program's process exits by itself once the judge is gone (flushing its output)
        try:
            pidfd = os.pidfd_open(child)
            try:
                select.select([pidfd], [], [], 0.25)
            finally:
                os.close(pidfd)
            if os.waitpid(child, os.WNOHANG)[0]:
                child = None
        except (ChildProcessError, ProcessLookupError):
            child = None
        if child is not None:
            try:
                os.kill(child, _SIGKILL)
                os.waitpid(child, 0)
            except OSError:
                pass
    if not pidns:
        return  # fallback: the host kills the rest by uid
    me = str(os.getpid())
    end = time.monotonic() + 1.0
    while [p for p in os.listdir("/proc") if p.isdigit() and p not in ("1", me)] and time.monotonic() < end:
        try:
            os.kill(-1, _SIGKILL)  # in a pid namespace: every process of the container but its init and us
        except OSError:
            pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass
        time.sleep(0.002)


def _flush() -> None:
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except BaseException:
            pass


# ----------------------------------------------------------------------------------------------------------
# the candidate: runs the program, then answers the judge


def _serve(prelude: str, prog: str, req_fd: int, rep_fd: int, _exit: "Any" = os._exit) -> None:
    """Run the program, then serve the judge until it closes the request pipe. Everything here runs in the
    program's process and may be subverted by it; that only changes what the program answers."""
    g: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    try:
        exec(compile(prelude, "<prelude>", "exec"), g)
        exec(compile(prog, "<program>", "exec"), g)
        ready = b"r"
    except BaseException as e:
        ready = b"l" + type(e).__name__.encode()
    _send_msg(rep_fd, ready)
    if ready != b"r":
        _flush()
        _exit(0)
    handles: dict[int, Any] = {}

    def name_it(obj: "Any") -> int:
        hid = len(handles) + 1
        handles[hid] = obj
        return hid

    def resolve(ref: "int | str") -> "Any":
        if type(ref) is int:
            return handles[ref]
        mod, _, attr = str(ref).rpartition(":")
        return getattr(__import__(mod) if mod else builtins, attr)

    def answer(v: "Any") -> bytes:
        try:
            return b"v" + encode(v)  # plain data, or (anything else inside) the whole value as one handle
        except Unencodable:
            return b"v" + b"h" + _u32(name_it(v))

    while True:
        try:
            msg = _recv_msg(req_fd)
        except (EOFError, OSError, ValueLimit):
            break
        try:
            rep = _reply(decode(msg, resolve), g, answer, rep_fd)
        except BaseException as e:
            try:
                rep = b"e" + type(e).__name__.encode("ascii", "replace")
            except BaseException:
                rep = b"eException"
        try:
            _send_msg(rep_fd, rep)
        except OSError:
            break
    _flush()
    _exit(0)


def _reply(op: "Any", g: "dict[str, Any]", answer: "Any", rep_fd: int) -> bytes:
    """The answer to one request: "G" (several names at once: one answer each, all but the last sent here),
    "g" a name, "c" a call, "a" an attribute, "s" setting one."""
    kind = op[0]
    if kind == "G":
        for name in op[1][:-1]:
            _send_msg(rep_fd, answer(g[name]) if name in g else b"m")
        return answer(g[op[1][-1]]) if op[1][-1] in g else b"m"
    if kind == "g":
        return answer(g[op[1]]) if op[1] in g else b"m"
    if kind == "c":
        return answer(op[1](*op[2], **op[3]))
    if kind == "a":
        return answer(getattr(op[1], op[2]))
    if kind == "s":
        setattr(op[1], op[2], op[3])
        return b"vN"
    return b"eValueError"


# ----------------------------------------------------------------------------------------------------------
# the judge: runs the tests against the candidate's answers. What holds its state (the verdict writer, the
# channel, the checks) is made by calling the functions below in the judge's process, never in the candidate's.


class NonPlain(Exception):
    """A guarded value was not plain built-in data (a handle to one of the program's objects)."""


class ChannelLost(BaseException):
    """The candidate died or broke the protocol: no further answers (a BaseException, so that a test's
    `except Exception` cannot swallow it)."""


class RemoteError(Exception):
    """The program raised an exception that is not a builtin one."""


_MISSING = ("__missing__",)

# the comparisons of a guarded test, in the order of rolecast.sandbox.testcode._CMP_OPS
_CMP = (
    lambda a, b: a == b, lambda a, b: a != b, lambda a, b: a < b, lambda a, b: a <= b,
    lambda a, b: a > b, lambda a, b: a >= b, lambda a, b: a is b, lambda a, b: a is not b,
    lambda a, b: a in b, lambda a, b: a not in b,
)  # fmt: skip


def _judge(job: "dict[str, Any]", req_fd: int, rep_fd: int, res_fd: int) -> None:
    """Build the tests' namespace (the genuine builtins, the prelude's and the pinned source's names, the
    program's names as Remote proxies), run setup and each test, and write one verdict per test."""

    def rep(msg: str) -> None:
        data = (msg + "\n").encode()
        while data:
            data = data[os.write(res_fd, data) :]

    # ---- trusted state
    bdict = dict(builtins.__dict__)
    try:
        pins = _pins(job["prelude"], job["pinned"], job["provided"])
    except BaseException as e:
        rep(_load_line(type(e).__name__))
        return
    modules = {n: sys.modules[n] for n in job["tracked"] if n in sys.modules}
    ask, answer = _connect(req_fd, rep_fd, _by_name(modules, bdict))
    checks = _checks()
    # ---- the program's answer to loading
    try:
        ready = _recv_msg(rep_fd)
    except (EOFError, OSError, ValueLimit):
        return  # the program's process is gone before any test ran: no verdicts
    if ready[:1] == b"l":
        rep(_load_line(ready[1:].decode("ascii", "replace")))
        return
    if ready != b"r":
        return
    try:
        ns = _namespace(job, pins, modules, bdict, ask, answer)
        ns["__rc_call"], ns["__rc_cmp"], ns["__rc_truth"] = checks
        setup = job["setup"]
        exec(setup if type(setup) is not str else compile(setup, "<test setup>", "exec"), ns)
    except ChannelLost:
        return
    except ValueLimit:
        rep("stop value_limit")
        return
    except BaseException as e:
        rep(_load_line(type(e).__name__))
        return
    _run_tests(job["tests"], ns, rep)


def _load_line(name: str) -> str:
    """The `load` line for the exception `name`: the name comes from the program's process (its own answer to
    loading, any text), so only an identifier is written; anything else (a newline followed by verdicts) is
    `malformed`."""
    ok = name.isascii() and name.isidentifier() and len(name) <= 100
    return "load " + (name if ok else "malformed")


def _pins(prelude: str, pinned: str, provided: "Any") -> "dict[str, Any]":
    """The names the tests get from trusted code: the prelude's (raises what it raises), and a HumanEval
    prompt's (`pinned`): its helpers, not the program's redefinitions, serve the tests."""
    g: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    exec(compile(prelude, "<prelude>", "exec"), g)
    pins = {k: v for k, v in g.items() if k not in ("__name__", "__builtins__")}
    if pinned:
        gp: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
        try:
            exec(compile(pinned, "<pinned>", "exec"), gp)
            pins.update(
                (k, v) for k, v in gp.items() if k not in ("__name__", "__builtins__") and k not in (provided or ())
            )
        except BaseException:
            pass
    return pins


def _by_name(modules: "dict[str, Any]", bdict: "dict[str, Any]") -> "dict[int, str]":
    """What the tests may hand the program by name: the genuine builtins and the tracked modules' functions."""
    by_name: dict[int, str] = {}
    for n, m in modules.items():
        if n != "builtins":
            by_name.update((id(v), f"{n}:{k}") for k, v in m.__dict__.items() if callable(v) and not k.startswith("_"))
    by_name.update((id(v), k) for k, v in bdict.items() if callable(v) and not k.startswith("_"))
    return by_name


def _connect(req_fd: int, rep_fd: int, by_name: "dict[int, str]") -> "tuple[Any, Any]":
    """The judge's end of the channel to the program's process: (ask(request), answer() -> the decoded
    answer). Handles in answers become Remote proxies; once the channel is lost every call raises
    ChannelLost."""
    dead: list[str] = []

    def ref(o: "Any") -> "int | str | None":
        if type(o) is Remote:
            return o._rid
        return by_name.get(id(o))

    def ask(request: "tuple[Any, ...]") -> None:
        if dead:
            raise ChannelLost(dead[0])
        try:
            body = encode(request, ref)
        except Unencodable:
            raise NonPlain("argument") from None
        try:
            _send_msg(req_fd, body)
        except OSError as e:
            dead.append(str(e))
            raise ChannelLost(str(e)) from None

    def answer() -> "Any":
        if dead:
            raise ChannelLost(dead[0])
        try:
            msg = _recv_msg(rep_fd)
        except (EOFError, OSError) as e:
            dead.append(str(e))
            raise ChannelLost(str(e)) from None
        except ValueLimit:
            dead.append("value_limit")
            raise
        return _decode_answer(msg, dead, Remote)

    def rpc(request: "tuple[Any, ...]") -> "Any":
        ask(request)
        return answer()

    Remote = _remote_type(rpc)
    return ask, answer


def _decode_answer(msg: bytes, dead: "list[str]", remote: "Any") -> "Any":
    """One answer of the program's process: a value ("v"; a top-level handle as a `remote` proxy), missing
    ("m"), or the name of the exception it raised ("e": raised here as that builtin, else RemoteError)."""
    kind, body = msg[:1], msg[1:]
    if kind == b"v":
        try:
            v = decode(body)
        except (ValueError, UnicodeDecodeError) as e:
            dead.append("malformed")
            raise ChannelLost(f"malformed answer: {e}") from None
        if type(v) is tuple and len(v) == 2 and v[0] == "__handle__" and body[:1] == b"h":
            return remote(v[1])
        return v
    if kind == b"m":
        return _MISSING
    if kind == b"e":
        name = body.decode("ascii", "replace")
        exc = getattr(builtins, name, None)
        if isinstance(exc, type) and issubclass(exc, Exception):
            raise exc(f"raised by the program: {name}")
        raise RemoteError(name)
    dead.append("malformed")
    raise ChannelLost("malformed answer")


def _remote_type(rpc: "Any") -> "Any":
    """The proxy class for the program's objects, its requests going through `rpc`."""

    class Remote:
        """One of the program's objects, held in the candidate's process. It can be called, its attributes
        read and set, and it can be passed back to the program; it cannot be compared, hashed or asserted."""

        __slots__ = ("_rid",)

        def __init__(self, rid: int) -> None:
            object.__setattr__(self, "_rid", rid)

        def __call__(self, *args: "Any", **kwargs: "Any") -> "Any":
            return rpc(("c", self, args, kwargs))

        def __getattr__(self, name: str) -> "Any":
            if name.startswith("__"):
                raise AttributeError(name)
            return rpc(("a", self, name))

        def __setattr__(self, name: str, value: "Any") -> None:
            rpc(("s", self, name, value))

        def _refuse(self, *a: "Any") -> "Any":
            raise NonPlain("handle")

        __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __bool__ = __len__ = __iter__ = _refuse
        __contains__ = __getitem__ = __index__ = __int__ = __float__ = __complex__ = __str__ = __format__ = _refuse
        __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _refuse
        __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __pow__ = __rpow__ = __neg__ = __pos__ = _refuse
        __abs__ = __round__ = __and__ = __rand__ = __or__ = __ror__ = __xor__ = __rxor__ = __invert__ = _refuse
        __lshift__ = __rlshift__ = __rshift__ = __rrshift__ = __matmul__ = __rmatmul__ = __divmod__ = _refuse
        __rdivmod__ = __reversed__ = _refuse
        __hash__ = _refuse

    return Remote


def _checks() -> "tuple[Any, Any, Any]":
    """The guarded tests' __rc_call, __rc_cmp and __rc_truth: a compared or asserted value must be plain
    built-in data (NonPlain otherwise). Which types are leaves is read now (a loaded `re` adds its Match)."""
    kinds = _plain_kinds()

    def checked(v: object) -> object:
        if not _is_plain(v, *kinds):
            raise NonPlain("compare")
        return v

    def rc_call(f: "Any", *args: "Any", **kwargs: "Any") -> "Any":
        return f(*args, **kwargs)

    def rc_cmp(ops: "tuple[int, ...]", left: object, *rights: object) -> bool:
        left = checked(left)
        for op, right in zip(ops, rights, strict=True):
            right = checked(right)
            if not _CMP[op](left, right):
                return False
            left = right
        return True

    def rc_truth(v: object) -> object:
        return checked(v)

    return rc_call, rc_cmp, rc_truth


def _plain_kinds() -> "tuple[set[int], set[int], set[int]]":
    """The ids of the leaf, sequence and mapping types plain data is made of."""
    leaf = (type(None), bool, int, float, complex, str, bytes, range)
    leaf_ids = {id(t) for t in leaf}
    re_mod = sys.modules.get("re")
    if re_mod is not None:
        leaf_ids.update((id(re_mod.Match), id(re_mod.Pattern)))
    seq_ids = {id(t) for t in (list, tuple, set, frozenset, _DEQUE)}
    map_ids = {id(t) for t in (dict, _ODICT, _DDICT)}
    return leaf_ids, seq_ids, map_ids


def _is_plain(v: object, leaf_ids: "set[int]", seq_ids: "set[int]", map_ids: "set[int]") -> bool:
    stack: list[Any] = [v]
    seen: set[int] = set()
    while stack:
        x = stack.pop()
        t = id(type(x))
        if t in leaf_ids:
            continue
        if id(x) in seen:
            continue
        seen.add(id(x))
        if t in seq_ids:
            stack.extend(x)
        elif t in map_ids:
            for k, w in dict.items(x):
                stack.append(k)
                stack.append(w)
        else:
            return False
    return True


def _namespace(
    job: "dict[str, Any]",
    pins: "dict[str, Any]",
    modules: "dict[str, Any]",
    bdict: "dict[str, Any]",
    ask: "Any",
    answer: "Any",
) -> "dict[str, Any]":
    """The tests' globals: the program's names they use (asked for in one request, one answer each), the
    trusted names (`pins`), the tracked modules they name, the genuine builtins."""
    ns: dict[str, Any] = {}
    wanted = _wanted(job, pins, modules, bdict)
    if wanted:
        ask(("G", [src for _, src in wanted]))
        for dest, _ in wanted:
            v = answer()
            if v is not _MISSING:
                ns[dest] = v
    bind = job["bind"]
    if bind and bind[0] in pins:
        pins.pop(bind[0])
    ns.update(pins)
    ns.update((n, m) for n, m in modules.items() if n in job["names"])
    ns["__builtins__"] = bdict
    return ns


def _wanted(
    job: "dict[str, Any]", pins: "dict[str, Any]", modules: "dict[str, Any]", bdict: "dict[str, Any]"
) -> "list[tuple[str, str]]":
    """(name in the tests' namespace, the program's name) of what to ask the program for."""
    provided = job["provided"]
    wanted = []
    for name in job["names"]:
        if name in pins or name in modules:
            continue
        if name in bdict and (provided is None or name not in provided):
            continue  # a program's `abs` or `sorted` must not answer for the tests' own calls
        wanted.append((name, name))
    bind = job["bind"]
    if bind:
        wanted.append((bind[0], bind[1]))
    return wanted


def _run_tests(tests: "list[Any]", ns: "dict[str, Any]", rep: "Any") -> None:
    for i, t in enumerate(tests):
        try:
            exec(t if type(t) is not str else compile(t, f"<test {i}>", "exec"), ns)
            verdict = f"pass {i}"
        except ChannelLost:
            return  # the program's process died or broke the channel: this test and the rest get no verdict
        except ValueLimit:
            rep(f"fail {i}")
            rep("stop value_limit")
            return
        except NonPlain:
            verdict = f"fail {i} non_plain"
        except BaseException:
            verdict = f"fail {i}"
        rep(verdict)
    rep("done")


# ----------------------------------------------------------------------------------------------------------
# batches: several programs judged one after another in one container (as root; rolecast.sandbox.batch)
#
# The supervisor (pid 1) reads only the batch's head (how many programs, their uids and deadlines), never a
# program, its tests or anything a program sent. For each program it forks a member supervisor, which reads that
# program's payload from the programs' stream and runs it exactly as a single job runs (the program's process,
# then the judge, which reads its own message of the judges' stream; or one child per case), capturing the
# program's output and the judge's verdicts itself and sending one record of them on the result channel. Then
# the supervisor ends every other process of the container, has the program's uid remove what it left in /tmp and
# /dev/shm, checks that both are back to their state at the start (inodes and blocks), writes "end" and waits
# for the host's go-ahead (the host reads the slot's OOM count in between). A member that overruns its deadline,
# or scratch space that cannot be restored, ends the batch: the host runs the programs left in a new container.


def _recv_frame(fd: int) -> bytes:
    """One length-prefixed message of a stream the host writes (trusted: no cap but the payload's own)."""
    return _recv_exact(fd, int.from_bytes(_recv_exact(fd, 4), "big"))


def _recv_indexed(fd: int, index: int) -> "dict[str, Any] | None":
    """Program `index`'s message of a batch's stream; earlier ones a member never read are skipped. None when
    the stream ends first."""
    while True:
        try:
            msg: dict[str, Any] = marshal.loads(_recv_frame(fd))
        except (EOFError, OSError, ValueError):
            return None
        if msg.get("index") == index:
            return msg
        if msg.get("index", -1) > index:
            return None


def _close_all_but(keep: "set[int]") -> None:
    lo = 0
    for fd in sorted(keep):
        if lo < fd:  # never an empty range: os.closerange(0, 0) closes every descriptor (CPython 3.11)
            os.closerange(lo, fd)
        lo = fd + 1
    os.closerange(lo, 1024)


_SCRATCH = ("/tmp", "/dev/shm")


def _scratch_state() -> "tuple[int, ...]":
    """Free inodes and blocks of the container's /tmp and /dev/shm (tmpfs): equal to the batch's start exactly
    when nothing is left in them."""
    out: list[int] = []
    for d in _SCRATCH:
        try:
            v = os.statvfs(d)
            out += [v.f_ffree, v.f_bfree]
        except OSError:
            out += [-1, -1]
    return tuple(out)


def _batch_main(cand_fd: int, judge_fd: int, res_fd: int, ctl_fd: int) -> None:
    _open_oom_adj()
    if os.getuid() != 0:
        _no_dump()  # as in a single job (the host batches only as root, where every program has its own uids)
    head: dict[str, Any] = marshal.loads(_recv_frame(cand_fd))
    _set_own_limits(head["trusted_limits"], head["trusted_limits"]["supervisor_cpu_s"])
    sys.path.extend(head["sys_path"])
    _install_exit()
    _preload(head)  # what the members would each import (nothing of a program's: its modules are imported by it)
    start = _scratch_state()
    for i, (deadline_s, uids) in enumerate(zip(head["deadlines"], head["uids"], strict=True)):
        pid = os.fork()
        if pid == 0:
            try:
                _batch_member(i, cand_fd, judge_fd, res_fd, ctl_fd)
            finally:
                os._exit(0)
        on_time = _wait_member(pid, deadline_s)
        gone = _reap_all()
        clean = on_time and gone and _restore_scratch(start, uids, head["cleanup_s"])
        _send_result(res_fd, {"end": i, "clean": clean, "overran": not on_time})
        if not clean or not _go_ahead(ctl_fd):
            return  # the container ends with us; the host runs what is left elsewhere


def _wait_member(pid: int, deadline_s: float) -> bool:
    """Wait for a member supervisor; False (and it killed) when it overran `deadline_s`."""
    pidfd = os.pidfd_open(pid)
    try:
        ready, _, _ = select.select([pidfd], [], [], deadline_s)
    finally:
        os.close(pidfd)
    if not ready:
        try:
            os.kill(pid, _SIGKILL)
        except OSError:
            pass
    os.waitpid(pid, 0)
    return bool(ready)


def _reap_all(within_s: float = 2.0) -> bool:
    """Kill every process of the container but this one (its init) and reap them; True when none is left."""
    end = time.monotonic() + within_s
    while True:
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass
        if not [p for p in os.listdir("/proc") if p.isdigit() and p != "1"]:
            return True
        if time.monotonic() > end:
            return False
        try:
            os.kill(-1, _SIGKILL)
        except OSError:
            pass
        time.sleep(0.001)


def _restore_scratch(start: "tuple[int, ...]", uids: "Any", within_s: float) -> bool:
    """Have the program's uid (then the judge's) remove what it left in /tmp and /dev/shm, in a child that reads
    the names (this process never does); True when both are back to `start`."""
    for uid in uids:
        if _scratch_state() == start:
            return True
        pid = os.fork()
        if pid == 0:
            try:
                _close_oom_adj()
                _close_all_but({0, 1, 2})
                _drop(uid)
                for d in _SCRATCH:
                    _remove_tree_of(d, uid)
            finally:
                os._exit(0)
        _wait_member(pid, within_s)
    return _scratch_state() == start


def _remove_tree_of(top: str, uid: "int | None") -> None:
    """Remove the entries of `top` that `uid` owns, with everything below them (iteratively: no depth limit)."""
    stack = []
    try:
        with os.scandir(top) as it:
            stack = [e.path for e in it if uid is None or e.stat(follow_symlinks=False).st_uid == uid]
    except OSError:
        return
    dirs: list[str] = []
    while stack:
        p = stack.pop()
        try:
            if os.path.isdir(p) and not os.path.islink(p):
                os.chmod(p, 0o700)
                dirs.append(p)
                with os.scandir(p) as it:
                    stack.extend(e.path for e in it)
            else:
                os.unlink(p)
        except OSError:
            pass
    for d in reversed(dirs):
        try:
            os.rmdir(d)
        except OSError:
            pass


def _go_ahead(ctl_fd: int) -> bool:
    """Wait for the host's "n" (it has read the slot's OOM count); "s" bytes (a stop that came late) are
    skipped. False when the host closed the channel."""
    while True:
        try:
            b = os.read(ctl_fd, 64)
        except OSError:
            return False
        if not b:
            return False
        if b"n" in b:
            return True


def _batch_member(i: int, cand_fd: int, judge_fd: int, res_fd: int, ctl_fd: int) -> None:
    """Program `i` of a batch, as a single job runs it, in a process of its own (forked from the supervisor
    before anything of the program was read)."""
    _close_oom_adj()
    _open_oom_adj()  # this process's own (as root its /proc files are its own to write)
    job = _recv_indexed(cand_fd, i)
    os.close(cand_fd)
    if job is None:
        return
    _set_own_limits(job["trusted_limits"], job["trusted_limits"]["supervisor_cpu_s"])
    _preload(job)
    if job["mode"] == "asserts":
        _batch_asserts(i, job, judge_fd, res_fd)
        return
    os.close(judge_fd)

    def stop() -> bool:  # the host's "s": it has seen enough of this program's cases
        ready, _, _ = select.select([ctl_fd], [], [], 0)
        return bool(ready) and b"s" in os.read(ctl_fd, 64)

    _run_cases(job, res_fd, {"i": i}, stop)


def _batch_asserts(i: int, job: "dict[str, Any]", judge_fd: int, res_fd: int) -> None:
    """The program's process and the judge, as in a single job; their output and verdicts captured here (capped,
    within the job's time) and sent as one record."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    ver_r, ver_w = os.pipe()
    os.dup2(out_w, 1)  # the program's process and the judge inherit these as stdout and stderr
    os.dup2(err_w, 2)
    os.close(out_w)
    os.close(err_w)
    cap, ver_cap = job["limits"]["output_bytes"], job["result_cap"]
    end = time.monotonic() + job["timeout_s"]
    cpid, jpid = _start_program_and_judge(job, judge_fd, ver_w, i)  # closes judge_fd and ver_w here
    null = os.open("/dev/null", os.O_WRONLY)
    os.dup2(null, 1)  # ours closed: the pipes end when the program's processes do
    os.dup2(null, 2)
    os.close(null)
    pipes = {"stdout": out_r, "stderr": err_r, "verdicts": ver_r}
    got = {k: bytearray() for k in pipes}
    reason = _pump_judged(jpid, pipes, got, {"stdout": cap, "stderr": cap, "verdicts": ver_cap}, end)
    for pid in (cpid, jpid):
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
    record = {"i": i, "reason": reason, "verdicts": bytes(got["verdicts"])}
    record.update(stdout=bytes(got["stdout"]), stderr=bytes(got["stderr"]))
    _send_result(res_fd, record)


_EXIT_GRACE_S = 0.25  # after the judge: time for the program's process to flush its output and exit


def _pump_judged(
    jpid: int, pipes: "dict[str, int]", got: "dict[str, bytearray]", caps: "dict[str, int]", end: float
) -> "str | None":
    """Read the pipes into `got` until the judge has exited and the pipes closed (the program's process gets
    _EXIT_GRACE_S after the judge), the deadline `end` passes ("timeout") or a pipe passes its cap
    ("output_limit", "result_limit" for the verdicts); then kill every other process of the container and read
    what is left. The reason, or None."""
    open_fds = {fd: k for k, fd in pipes.items()}
    pidfd = os.pidfd_open(jpid)
    judged = False
    reason = None
    while open_fds and reason is None:
        left = end - time.monotonic()
        if left <= 0:
            reason = None if judged else "timeout"
            break
        ready, _, _ = select.select(list(open_fds) + ([] if judged else [pidfd]), [], [], left)
        for fd in ready:
            if fd == pidfd:
                judged = True
                end = min(end, time.monotonic() + _EXIT_GRACE_S)
                continue
            reason = _pump_one(fd, open_fds, got, caps) or reason
    os.close(pidfd)
    try:
        os.kill(-1, _SIGKILL)  # every process of the container but its init and this one
    except OSError:
        pass
    while open_fds and reason is None:  # what they wrote before they died (EOF once all are gone)
        ready, _, _ = select.select(list(open_fds), [], [], 1.0)
        if not ready:
            break
        for fd in ready:
            reason = _pump_one(fd, open_fds, got, caps) or reason
    for fd in pipes.values():
        os.close(fd)
    return reason


def _pump_one(fd: int, open_fds: "dict[int, str]", got: "dict[str, bytearray]", caps: "dict[str, int]") -> "str | None":
    b = os.read(fd, 65536)
    k = open_fds[fd]
    if not b:
        del open_fds[fd]
        return None
    got[k] += b
    if len(got[k]) > caps[k]:
        del got[k][caps[k] :]
        return "result_limit" if k == "verdicts" else "output_limit"
    return None


if __name__ == "__rolecast_harness__":  # run by the host's boot line, in a namespace of its own
    _main()
    os._exit(0)  # skip interpreter teardown: a few ms per run
