"""Run untrusted Python programs in a sandbox, many at once.

Isolation, strongest available first:

``bwrap`` (bubblewrap found and working; ``scripts/install-sandbox.sh`` installs it)
    Each run is a fresh bubblewrap container: new pid/net/ipc/uts namespaces (no network, only its own
    processes visible, everything dies with the container), a read-only view of ``/``, private tmpfs
    ``/tmp`` (size-capped; the program's cwd), ``/root`` and ``/home`` hidden (the interpreter's own
    directories are bound back read-only). As root we do *not* use a user namespace (its root would still
    own root's files); bwrap keeps only CAP_SETUID/SETGID and our harness drops to an unprivileged uid
    before any untrusted code runs. Each pool slot gets its own uid, so RLIMIT_NPROC (which root ignores)
    caps a fork bomb per slot without starving the neighbours.
``fallback`` (no bwrap: a logged warning)
    rlimits + the same uid drop (when root) + a private temp dir as cwd. No network or filesystem
    isolation beyond what the unprivileged uid cannot touch.

Inside, a small trusted harness (``_HARNESS``) reads its job from a pipe, closes it, and forks one child
per program run (asserts mode) or per test case (stdio/functional modes). Only the child runs untrusted
code, after setting rlimits (CPU, address space, processes, file size, open files, no core) and dropping
privileges. The harness reports on a separate result pipe:

- stdio/functional: the harness parent (which never runs untrusted code) sends each case's captured
  stdout / JSON return value; the child has no handle on the result pipe and never sees the expected
  outputs, which stay in this process and are compared here.
- asserts: the child itself must run the tests after the program, so it reports each verdict on the
  result pipe tagged with a random per-run nonce that is not in the program's source, argv or
  environment. Lines without the nonce are ignored and a test without a verdict counts as failed, so a
  program that exits early (``sys.exit``/``os._exit``), closes or floods the pipe, or patches the harness
  scores 0 for the tests it skipped. (A program that walks interpreter frames to find the nonce could
  still forge verdicts; that is the limit of in-process asserts.)

Outputs are read at most ``output_bytes`` per stream (then the run is killed, reason ``output_limit``), and
a wall-clock deadline kills the whole process group / container.

Measured overhead (bench/sandbox_throughput.py, docs/benchmarks.md): see the "Code sandbox throughput"
section there.
"""

from __future__ import annotations

import logging
import marshal
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

# ----------------------------------------------------------------------------------------------------------
# the in-sandbox harness. Runs as `python -I -c _HARNESS <job_fd> <result_fd>`; stdlib only.

_HARNESS = r'''
import marshal, os, resource, select, sys

# not `signal`/`json`/`base64`: their imports (enum, re) would double the interpreter's start-up time
_SIGKILL, _SIGXCPU = 9, 24

def _main():
    job_fd, res_fd = int(sys.argv[1]), int(sys.argv[2])
    chunks = []
    while True:
        b = os.read(job_fd, 1 << 20)
        if not b:
            break
        chunks.append(b)
    os.close(job_fd)
    job = marshal.loads(b"".join(chunks))
    del chunks
    _write = os.write
    _exit = os._exit

    def send(obj):
        data = marshal.dumps(obj)
        data = b"%d\n" % len(data) + data
        while data:
            n = _write(res_fd, data)
            data = data[n:]

    sys.path.extend(job["sys_path"])
    if job["mode"] == "functional":
        import json  # before forking, so each case's child does not pay for it
    for m in job.get("preimport", ()):
        try:
            __import__(m)
        except Exception:
            pass
    lim = job["limits"]

    def enter_child(keep_fds, own_group):
        """Runs first in every child: limits, privileges, cwd; nothing untrusted has run yet."""
        if own_group:  # per-case children: the harness kills the group after each case
            os.setpgid(0, 0)
        lo = 3
        for fd in sorted(k for k in keep_fds if k >= 3):
            os.closerange(lo, fd)
            lo = fd + 1
        os.closerange(lo, 1024)
        cpu = int(lim["cpu_s"])
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_AS, (lim["as_bytes"], lim["as_bytes"]))
        resource.setrlimit(resource.RLIMIT_FSIZE, (lim["fsize_bytes"], lim["fsize_bytes"]))
        resource.setrlimit(resource.RLIMIT_NOFILE, (lim["nofile"], lim["nofile"]))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if lim.get("nproc"):
            resource.setrlimit(resource.RLIMIT_NPROC, (lim["nproc"], lim["nproc"]))
        uid = job.get("uid")
        if uid is not None and os.getuid() == 0:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            if os.getuid() == 0:
                _exit(125)
        os.chdir(job["cwd"])
        os.environ.clear()
        os.environ.update(job["env"])

    def run_main(src, name):
        """Execute a program as a script; returns its exit status (flushing what it printed)."""
        status = 0
        try:
            code = compile(src, "<program>", "exec")
            exec(code, {"__name__": name, "__builtins__": __builtins__})
        except SystemExit as e:
            c = e.code
            status = c if isinstance(c, int) else (0 if c is None else 1)
        except BaseException:
            import traceback
            try:
                traceback.print_exc()
            except BaseException:
                pass
            status = 1
        for s in (sys.stdout, sys.stderr):
            try:
                s.flush()
            except BaseException:
                pass
        return status & 0xFF

    def wait_child(pid, deadline_s, pipes):
        """Collect the child's pipes (name -> fd) up to the output cap, within the deadline."""
        import time
        cap = lim["output_bytes"]
        got = {k: bytearray() for k in pipes}
        open_fds = {fd: k for k, fd in pipes.items()}
        pidfd = os.pidfd_open(pid)
        status = None
        reason = None
        end = time.monotonic() + deadline_s
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
                    try:
                        os.killpg(pid, _SIGKILL)  # leftovers holding the pipes open
                    except OSError:
                        pass
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
        try:
            os.killpg(pid, _SIGKILL)
        except OSError:
            pass
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

    def decode_status(st):
        if os.WIFEXITED(st):
            return os.WEXITSTATUS(st), None
        sig = os.WTERMSIG(st)
        return -sig, ("cpu_limit" if sig == _SIGXCPU else None)

    mode = job["mode"]
    if mode == "asserts":
        pid = os.fork()
        if pid == 0:
            try:
                enter_child({0, 1, 2, res_fd}, False)
                # the program may replace any builtin (exec = no-op would make every test "pass"):
                # everything the test loop calls after the program has run is bound here, before it
                _exec, _compile, _dict, _enumerate, _len = exec, compile, dict, enumerate, len
                nonce = job["nonce"]
                prog = job["program"]
                prelude, setup, tests, bind = job["prelude"], job["setup"], job["tests"], job.get("bind")
                del job

                def rep(msg):
                    data = (nonce + " " + msg + "\n").encode()
                    while data:
                        data = data[_write(res_fd, data):]

                _type = type
                g = {"__name__": "__main__", "__builtins__": __builtins__}
                try:
                    _exec(_compile(prelude, "<prelude>", "exec"), g)
                    _exec(_compile(prog, "<program>", "exec"), g)
                    _exec(_compile(setup, "<test setup>", "exec"), g)
                except BaseException as e:
                    rep("load " + _type(e).__name__)
                    _exit(0)
                ns = g
                if bind:
                    ns = _dict(g)
                    try:
                        ns[bind[0]] = g[bind[1]]
                    except BaseException as e:
                        rep("load " + _type(e).__name__)
                        _exit(0)
                for i, t in _enumerate(tests):
                    try:
                        _exec(_compile(t, "<test %d>" % i, "exec"), ns)
                        ok = True
                    except BaseException:
                        ok = False
                    rep(("pass %d" if ok else "fail %d") % i)
                rep("done")
                for s in (sys.stdout, sys.stderr):
                    try:
                        s.flush()
                    except BaseException:
                        pass
            finally:
                _exit(0)
        # stdout/stderr go straight to the host, which caps them; the host also owns the deadline
        _, st = os.waitpid(pid, 0)
        rc, why = decode_status(st)
        data = ("exit %d %s\n" % (rc, why)).encode()
        while data:
            data = data[_write(res_fd, data):]
        return

    # stdio / functional: one child per case; the parent only shuttles bytes
    for i, case in enumerate(job["cases"]):
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        val_r, val_w = os.pipe()
        in_fd = os.memfd_create("stdin")
        data = case["input"].encode()
        while data:
            data = data[os.write(in_fd, data):]
        os.lseek(in_fd, 0, 0)
        pid = os.fork()
        if pid == 0:
            try:
                os.dup2(in_fd, 0)
                os.dup2(out_w, 1)
                os.dup2(err_w, 2)
                val_fd = val_w
                if val_fd < 3:
                    val_fd = os.dup(val_fd)
                enter_child({0, 1, 2, val_fd}, True)
                prog = job["program"]
                if mode == "stdio":
                    _exit(run_main(prog, "__main__"))
                fn = job["fn_name"]
                args = [json.loads(line) for line in case["input"].split("\n") if line.strip()]
                del job, case
                g = {"__name__": "__solution__", "__builtins__": __builtins__}
                exec(compile(prog, "<program>", "exec"), g)
                sol = g.get("Solution")
                f = getattr(sol(), fn) if sol is not None and hasattr(sol, fn) else g[fn]
                res = f(*args)
                data = json.dumps(res).encode()
                while data:
                    data = data[_write(val_fd, data):]
                for s in (sys.stdout, sys.stderr):
                    try:
                        s.flush()
                    except BaseException:
                        pass
                _exit(0)
            except SystemExit as e:
                _exit(e.code if isinstance(e.code, int) else 1)
            except BaseException:
                import traceback
                try:
                    traceback.print_exc()
                    sys.stderr.flush()
                except BaseException:
                    pass
                _exit(1)
            finally:
                _exit(1)
        for fd in (out_w, err_w, val_w, in_fd):
            os.close(fd)
        got, st, reason = wait_child(pid, job["case_timeout_s"], {"stdout": out_r, "stderr": err_r, "value": val_r})
        rc, why = decode_status(st)
        send({
            "case": i,
            "rc": rc,
            "reason": reason or why,
            "stdout": bytes(got["stdout"]),
            "stderr": bytes(got["stderr"][-4096:]),
            "value": bytes(got["value"]).decode("utf-8", "replace") if mode == "functional" else None,
        })
    send({"done": True})

_main()
os._exit(0)  # skip interpreter teardown: a few ms per run
'''

# modules preloaded by the harness when the uid it drops to cannot read the interpreter's own files
# (fallback mode as root with Python under /root): the common ones in MBPP/HumanEval/LCB solutions.
_PREIMPORT = (
    "math re collections itertools functools heapq bisect string operator copy json random statistics "
    "fractions decimal typing array datetime cmath hashlib traceback io textwrap unicodedata"
).split()


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 10.0  # wall clock: the whole run (asserts) or one test case (stdio/functional)
    memory_mb: int = 1024  # RLIMIT_AS of the program's process
    nproc: int = 32  # processes+threads of the slot's uid (root mode); extra ones over current (user mode)
    fsize_mb: int = 16  # largest file the program may write
    tmpfs_mb: int = 64  # size of the private /tmp (bwrap mode)
    output_bytes: int = 1 << 20  # per stream; more kills the run (reason "output_limit")
    nofile: int = 256


@dataclass
class RunResult:
    """Outcome of one plain program run (:func:`run_python`)."""

    returncode: int | None  # negative: killed by that signal; None: never ran
    stdout: str  # decoded UTF-8 with replacement characters for invalid bytes
    stderr: str
    timed_out: bool
    reason: str | None = None  # None = ran to completion; else "timeout", "output_limit", "cpu_limit", "sandbox_error: ..."
    stdout_bytes: bytes = b""


@dataclass
class CaseResult:
    rc: int | None
    stdout: bytes
    stderr: bytes
    value: str | None  # functional mode: the JSON the function returned
    reason: str | None


@dataclass
class JobResult:
    """What the harness reported for one job."""

    mode: str
    verdicts: dict[int, bool] = field(default_factory=dict)  # asserts: test index -> passed
    load_error: str | None = None  # asserts: the program (or setup) raised this while loading
    done: bool = False  # the harness reached its end (asserts: after the last test)
    cases: list[CaseResult] = field(default_factory=list)  # stdio/functional, in order
    stdout: bytes = b""
    stderr: bytes = b""
    returncode: int | None = None
    reason: str | None = None  # "timeout", "output_limit", "sandbox_error: ...", ...
    wall_s: float = 0.0


@dataclass
class Job:
    """One sandbox run. `mode`: "asserts" | "stdio" | "functional"."""

    mode: str
    program: str
    prelude: str = ""  # asserts: run before the program (imports the tests need)
    setup: str = ""  # asserts: run after the program, before the tests
    tests: Sequence[str] = ()  # asserts: each source snippet is one test
    bind: tuple[str, str] | None = None  # asserts: run tests with name bind[0] = program's bind[1]
    inputs: Sequence[str] = ()  # stdio/functional: one stdin text / JSON-lines argument list per case
    fn_name: str = ""  # functional
    limits: Limits = field(default_factory=Limits)
    stop_on: Any = None  # stdio/functional: callable(case_index, CaseResult) -> bool, True kills the rest


# ----------------------------------------------------------------------------------------------------------
# environment detection

_MODE: str | None = None
_MODE_LOCK = threading.Lock()
_HIDE = ("/root", "/home")


def _interpreter_dirs() -> list[str]:
    dirs = []
    for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}:
        dirs.append(os.path.realpath(p))
    # the venv's python is usually a symlink to the base interpreter: bind where it really lives too
    dirs.append(os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))))
    return sorted(set(dirs))


def _world_readable(path: str) -> bool:
    """Could an arbitrary uid traverse to `path`? (o+x on every ancestor, o+r on the dir itself)."""
    p = os.path.realpath(path)
    parts = p.split("/")
    for i in range(2, len(parts) + 1):
        d = "/".join(parts[:i]) or "/"
        try:
            if not os.stat(d).st_mode & 0o001:
                return False
        except OSError:
            return False
    return True


def _bwrap_cmd(limits: Limits) -> list[str]:
    cmd = [
        shutil.which("bwrap") or "bwrap",
        "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
        "--die-with-parent", "--new-session",
        "--ro-bind", "/", "/",
    ]  # fmt: skip
    for h in _HIDE:
        if os.path.isdir(h):
            cmd += ["--tmpfs", h]
    made = set()
    for d in _interpreter_dirs():
        for h in _HIDE:
            if d.startswith(h + "/"):
                # bwrap would create the missing parents as 0700 root dirs, unreadable after the uid drop
                parts = d[len(h) + 1 :].split("/")[:-1]
                for i in range(1, len(parts) + 1):
                    sub = h + "/" + "/".join(parts[:i])
                    if sub not in made:
                        made.add(sub)
                        cmd += ["--perms", "0755", "--dir", sub]
                cmd += ["--ro-bind", d, d]
    # world-writable like a real /tmp, so the unprivileged uid can use it as its cwd
    cmd += ["--perms", "1777", "--size", str(limits.tmpfs_mb << 20), "--tmpfs", "/tmp"]
    cmd += ["--perms", "1777", "--size", str(limits.tmpfs_mb << 20), "--tmpfs", "/var/tmp"]
    cmd += ["--proc", "/proc", "--dev", "/dev", "--chdir", "/tmp"]
    if os.getuid() == 0:
        # no user namespace as root (see module doc); keep only what the harness needs: dropping to a uid,
        # and signalling that uid's processes once it has dropped (without CAP_KILL root may not)
        cmd += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_KILL"]
    return cmd


def sandbox_mode() -> str:
    """"bwrap" or "fallback" for this machine (probed once, with a warning when falling back)."""
    global _MODE
    with _MODE_LOCK:
        if _MODE is None:
            _MODE = "fallback"
            if os.environ.get("ROLECAST_SANDBOX") == "fallback":
                log.warning("ROLECAST_SANDBOX=fallback: code runs without bubblewrap isolation")
            elif shutil.which("bwrap") is None:
                log.warning(
                    "bubblewrap (bwrap) not found: the code sandbox falls back to rlimits + an unprivileged uid + "
                    "a temp dir, with no network or filesystem isolation. Run scripts/install-sandbox.sh."
                )
            else:
                probe = subprocess.run(
                    _bwrap_cmd(Limits()) + [sys.executable, "-I", "-c", "print('ok')"],
                    capture_output=True, text=True, timeout=30,
                )  # fmt: skip
                if probe.returncode == 0 and probe.stdout.strip() == "ok":
                    _MODE = "bwrap"
                else:
                    log.warning(
                        "bubblewrap is installed but cannot start a sandbox here (%s); using the weaker fallback",
                        probe.stderr.strip()[:300],
                    )
        return _MODE


def _set_mode_for_tests(mode: str | None) -> None:
    global _MODE
    with _MODE_LOCK:
        _MODE = mode


def _procs_of_uid(uid: int) -> int:
    n = 0
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                n += os.stat("/proc/" + d).st_uid == uid
            except OSError:
                pass
    return n


# ----------------------------------------------------------------------------------------------------------
# one run


_SANDBOX_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "HOME": "/tmp",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}

# the harness runs with -S; it appends these so programs can still import what the venv has (numpy, ...)
_SITE_DIRS = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]

_UID_BASE = 100000 + (os.getpid() % 20000) * 256  # slots of different trainer processes rarely collide


def _execute(job: Job, slot: int) -> JobResult:
    lim = job.limits
    mode = sandbox_mode()
    root = os.getuid() == 0
    uid = _UID_BASE + slot if root else None
    nonce = secrets.token_hex(16)
    tmpdir = None
    if mode == "bwrap":
        cwd = "/tmp"
    else:
        tmpdir = tempfile.mkdtemp(prefix="rolecast-sbx-")
        if uid is not None:
            os.chown(tmpdir, uid, uid)
        os.chmod(tmpdir, 0o700)
        cwd = tmpdir
    nproc = lim.nproc if root else _procs_of_uid(os.getuid()) + lim.nproc
    n_cases = max(1, len(job.inputs))
    payload: dict[str, Any] = {
        "mode": job.mode,
        "program": job.program,
        "uid": uid,
        "cwd": cwd,
        "env": _SANDBOX_ENV,
        "sys_path": _SITE_DIRS,
        "limits": {
            "cpu_s": max(1, int(lim.timeout_s + 0.999)),
            "as_bytes": lim.memory_mb << 20,
            "fsize_bytes": lim.fsize_mb << 20,
            "nofile": lim.nofile,
            "nproc": nproc,
            "output_bytes": lim.output_bytes,
        },
    }
    if mode == "fallback" and root and not all(_world_readable(d) for d in _interpreter_dirs()):
        payload["preimport"] = _PREIMPORT
    if job.mode == "asserts":
        payload.update(nonce=nonce, prelude=job.prelude, setup=job.setup, tests=list(job.tests), bind=job.bind)
        wall = lim.timeout_s
    elif job.mode in ("stdio", "functional"):
        payload.update(cases=[{"input": x} for x in job.inputs], fn_name=job.fn_name, case_timeout_s=lim.timeout_s)
        wall = lim.timeout_s * n_cases + 2.0
    else:
        raise ValueError(f"unknown sandbox job mode {job.mode!r}; expected asserts, stdio or functional")

    job_r, job_w = os.pipe()
    res_r, res_w = os.pipe()
    # -S: site's start-up work (and its .pth imports) costs ~5 ms a run; the harness appends site-packages itself
    argv = [sys.executable, "-I", "-S", "-c", _HARNESS, str(job_r), str(res_w)]
    if mode == "bwrap":
        # /dev/shm is a fresh tmpfs from --dev; /tmp and /var/tmp are private tmpfs mounts
        argv = _bwrap_cmd(lim) + argv
    out = JobResult(mode=job.mode)
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(job_r, res_w),
            start_new_session=True,
            cwd=cwd if mode == "fallback" else None,
            env=_SANDBOX_ENV,
        )
    except OSError as e:
        for fd in (job_r, job_w, res_r, res_w):
            os.close(fd)
        if tmpdir:
            shutil.rmtree(tmpdir, ignore_errors=True)
        out.reason = f"sandbox_error: {e}"
        return out
    os.close(job_r)
    os.close(res_w)
    data = marshal.dumps(payload)
    writer = None
    if len(data) <= 65536:  # fits in the pipe buffer: no writer thread needed
        _write_all(job_w, data)
    else:
        writer = threading.Thread(target=_write_all, args=(job_w, data), daemon=True)
        writer.start()
    try:
        _collect(proc, res_r, out, nonce, job, t0 + wall, lim.output_bytes * (n_cases + 1) * 2 + (1 << 16))
    finally:
        os.close(res_r)
        _kill(proc)
        if writer is not None:
            writer.join(timeout=5)
        if tmpdir:
            if uid is not None and (out.reason is not None or not out.done):
                _kill_uid(uid)  # fallback has no pid namespace: strays may have left the process group
            shutil.rmtree(tmpdir, ignore_errors=True)
    out.returncode = proc.returncode
    out.wall_s = time.monotonic() - t0
    if out.reason is None and job.mode != "asserts" and not out.done:
        err = out.stderr.decode("utf-8", "replace").strip()
        out.reason = f"sandbox_error: harness ended early (rc={proc.returncode}) {err[-300:]}"
    return out


def _write_all(fd: int, data: bytes) -> None:
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError:
        pass  # the sandbox died before reading its job; the reader reports that
    finally:
        os.close(fd)


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        log.error("sandbox process %d did not die", proc.pid)


def _kill_uid(uid: int) -> None:
    subprocess.run(
        # kill(-1) as that uid reaches every process it owns (but the caller); sh, as the uid may not be
        # able to run our interpreter (fallback mode with Python under /root)
        ["/bin/sh", "-c", "kill -9 -1 2>/dev/null; true"],
        user=uid, group=uid, extra_groups=[], timeout=10, check=False,
    )  # fmt: skip


def _collect(proc: subprocess.Popen, res_fd: int, out: JobResult, nonce: str, job: Job, deadline: float, res_cap: int) -> None:
    cap = job.limits.output_bytes
    so, se = proc.stdout.fileno(), proc.stderr.fileno()
    bufs = {so: bytearray(), se: bytearray()}
    open_fds = {so, se, res_fd}
    res = bytearray()  # unparsed tail of the result channel
    res_total = 0
    tag = nonce.encode() + b" "
    try:
        while open_fds:
            left = deadline - time.monotonic()
            if left <= 0:
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
                    out.reason = "output_limit"
                    return
                res += b
                if _parse_results(res, out, tag, job):
                    return
    finally:
        out.stdout = bytes(bufs[so])
        out.stderr = bytes(bufs[se])


def _parse_results(buf: bytearray, out: JobResult, tag: bytes, job: Job) -> bool:
    """Consume complete records from `buf`; True when the job can stop early."""
    if job.mode == "asserts":
        while b"\n" in buf:
            line, _, rest = bytes(buf).partition(b"\n")
            del buf[: len(line) + 1]
            if not line.startswith(tag):
                continue  # the harness parent's exit line, or anything the program wrote itself
            words = line[len(tag) :].decode("ascii", "replace").split()
            if not words:
                continue
            if words[0] in ("pass", "fail") and len(words) == 2 and words[1].isdigit():
                out.verdicts.setdefault(int(words[1]), words[0] == "pass")  # first verdict per test wins
            elif words[0] == "load":
                out.load_error = " ".join(words[1:]) or "error"
                out.done = True
            elif words[0] == "done":
                out.done = True
        return False
    # stdio/functional: "<len>\n<marshal record>" frames, written only by the trusted harness parent
    while True:
        nl = buf.find(b"\n")
        if nl < 0:
            return False
        n = int(buf[:nl])
        if len(buf) < nl + 1 + n:
            return False
        msg = marshal.loads(bytes(buf[nl + 1 : nl + 1 + n]))
        del buf[: nl + 1 + n]
        if msg.get("done"):
            out.done = True
            continue
        c = CaseResult(rc=msg["rc"], stdout=msg["stdout"], stderr=msg["stderr"], value=msg.get("value"), reason=msg.get("reason"))
        out.cases.append(c)
        if job.stop_on is not None and job.stop_on(len(out.cases) - 1, c):
            out.reason = out.reason or "stopped_early"
            return True


# ----------------------------------------------------------------------------------------------------------
# pool


class SandboxPool:
    """Runs jobs concurrently: `workers` threads, each driving one sandbox process at a time on its own uid."""

    def __init__(self, workers: int | None = None):
        self.workers = workers or max(1, os.cpu_count() or 1)
        if self.workers > 256:
            raise ValueError("SandboxPool: at most 256 workers (one uid slot each)")
        self._slots: list[int] = list(range(self.workers))
        self._slot_lock = threading.Lock()
        self._ex = ThreadPoolExecutor(self.workers, thread_name_prefix="sandbox")
        sandbox_mode()  # probe (and warn) up front, not inside the first batch

    def _run_slot(self, job: Job) -> JobResult:
        with self._slot_lock:
            slot = self._slots.pop()
        try:
            return _execute(job, slot)
        finally:
            with self._slot_lock:
                self._slots.append(slot)

    def run(self, job: Job) -> JobResult:
        return self._ex.submit(self._run_slot, job).result()

    def run_many(self, jobs: Iterable[Job]) -> list[JobResult]:
        futures = [self._ex.submit(self._run_slot, j) for j in jobs]
        return [f.result() for f in futures]

    def close(self) -> None:
        self._ex.shutdown(wait=True)

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


def run_python(source: str, *, stdin: str = "", timeout_s: float = 10.0, memory_mb: int = 1024, pool: SandboxPool | None = None) -> RunResult:
    """Run `source` as a script in the sandbox with `stdin`; returns its exit status and output."""
    limits = Limits(timeout_s=timeout_s, memory_mb=memory_mb)
    res = (pool or default_pool()).run(Job(mode="stdio", program=source, inputs=[stdin], limits=limits))
    return _as_run_result(res)


def _as_run_result(res: JobResult) -> RunResult:
    if not res.cases:
        return RunResult(None, "", res.stderr.decode("utf-8", "replace"), res.reason == "timeout", res.reason or "sandbox_error")
    c = res.cases[0]
    return RunResult(
        returncode=c.rc,
        stdout=c.stdout.decode("utf-8", "replace"),
        stderr=c.stderr.decode("utf-8", "replace"),
        timed_out=c.reason == "timeout",
        reason=c.reason,
        stdout_bytes=c.stdout,
    )
