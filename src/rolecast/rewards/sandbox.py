"""Run untrusted Python programs in a sandbox, many at once. Overview for users: docs/sandbox.md.

Isolation, strongest available first:

``bwrap`` (bubblewrap found and working; ``scripts/install-sandbox.sh`` installs it)
    Each run is a fresh bubblewrap container: new pid/net/ipc/uts namespaces (no network, only its own
    processes visible, everything dies with the container), a read-only view of ``/``, private tmpfs
    ``/tmp`` and ``/var/tmp`` (size-capped; ``/tmp`` is the program's cwd), ``/root`` and ``/home`` hidden.
    What the interpreter needs from those hidden directories (its prefixes, the venv, site-packages, as
    written and as resolved) is bound back read-only, one directory each, so a project and venv in
    ``~/rolecast`` or ``/tmp/x`` work while the rest of those directories stays invisible. As root we do
    *not* use a user namespace (its root would still own root's files); bwrap keeps only CAP_SETUID/SETGID/
    KILL and our harness drops to an unprivileged uid before any untrusted code runs. Each pool slot gets its
    own uid, so RLIMIT_NPROC (which root ignores) caps a fork bomb per slot without starving the neighbours.
``fallback`` (no usable bwrap: a logged warning; training refuses it unless ``sandbox.allow_unisolated``)
    rlimits + the same uid drop (when root) + a private directory as cwd, HOME and TMPDIR, removed
    afterwards. As root it also kills every process of the slot's uid after each run (daemons that left the
    process group included) and removes what that uid left at the top of /tmp, /var/tmp and /dev/shm.
    When the uid cannot read the interpreter (Python under /root), the harness imports what the program
    and tests import before dropping privileges. No network or filesystem isolation beyond what the
    unprivileged uid cannot touch.

Inside, a small trusted harness (``sandbox_harness.py``, run as a script from its source) reads its job from
a pipe, closes it, and forks one child per program run (asserts mode) or per test case (stdio/functional
modes). Only the child runs untrusted code, after setting rlimits (CPU, address space, processes, file size,
open files, no core) and dropping privileges. The harness reports on a separate result pipe:

- stdio/functional: the harness parent (which never runs untrusted code) sends each case's captured
  stdout / JSON return value; the child has no handle on the result pipe and never sees the expected
  outputs, which stay in this process and are compared here.
- asserts: the child itself must run the tests after the program, so it reports each verdict on the
  result pipe tagged with a random per-run nonce that is not in the program's source, argv or
  environment. Lines without the nonce are ignored and a test without a verdict counts as failed, so a
  program that exits early (``sys.exit``/``os._exit``), closes or floods the pipe, or patches the harness
  scores 0 for the tests it skipped. The tests are compiled here with every call, comparison and assert
  guarded (:func:`_guard_code`): the values the program hands to the tests must be plain built-in data,
  and the tests' builtins, modules and (HumanEval) prompt helpers are the genuine ones, so objects that
  claim equality, subclasses with their own comparisons, and patched or shadowed builtins fail (reason
  ``non_plain_value`` or a plain wrong answer); see ``sandbox_harness`` for the rules. (A program that
  walks interpreter frames or the garbage collector to reach the harness itself could still forge
  verdicts; that is the limit of in-process asserts.)

Outputs are read at most ``output_bytes`` per stream (then the run is killed, reason ``output_limit``), and
a wall-clock deadline kills the whole process group / container.

Measured overhead (bench/sandbox_throughput.py, docs/benchmarks.md): see the "Code sandbox throughput"
section there.
"""

from __future__ import annotations

import ast
import functools
import logging
import marshal
import os
import re
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType
from typing import Any

log = logging.getLogger(__name__)

# ----------------------------------------------------------------------------------------------------------
# the in-sandbox harness (rolecast/rewards/sandbox_harness.py). Compiled once here and sent as a code object
# down a pipe to a one-line bootstrap (`python -I -S -c _BOOT <job_fd> <result_fd> <code_fd>`): nothing inside
# the sandbox has to find our source tree, and no run pays for compiling the harness (a few ms each).

_HARNESS_PATH = Path(__file__).parent / "sandbox_harness.py"
_HARNESS_CODE = marshal.dumps(compile(_HARNESS_PATH.read_text(), str(_HARNESS_PATH), "exec"))
_BOOT = "import marshal,sys;f=open(int(sys.argv[3]),'rb');c=f.read();f.close();del f;exec(marshal.loads(c))"

# modules preloaded by the harness when the uid it drops to cannot read the interpreter's own files
# (fallback mode as root with Python under /root): the common ones in MBPP/HumanEval/LCB solutions, plus
# whatever the program's own import statements name (_program_imports).
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
    reason: str | None = (
        None  # None = ran to completion; else "timeout", "output_limit", "cpu_limit", "sandbox_error: ..."
    )
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
    non_plain: set[int] = field(
        default_factory=set
    )  # asserts: tests failed for a value that is not plain built-in data
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
    pinned: str = ""  # asserts: trusted code (a HumanEval prompt) whose names the tests get instead of the program's
    provided: tuple[str, ...] | None = None  # asserts: names the program provides to the tests (its functions);
    # a program's definition of a builtin's name outside this list is hidden from the tests. None: not known.
    inputs: Sequence[str] = ()  # stdio/functional: one stdin text / JSON-lines argument list per case
    fn_name: str = ""  # functional
    limits: Limits = field(default_factory=Limits)
    stop_on: Any = None  # stdio/functional: callable(case_index, CaseResult) -> bool, True kills the rest


# ----------------------------------------------------------------------------------------------------------
# environment detection

_PROBED: tuple[str, str] | None = None  # (mode, why the fallback) of this machine, probed once
_MODE_LOCK = threading.Lock()
# directories bwrap replaces with empty tmpfs mounts: users' files and the shared temp dirs. What the sandbox
# needs from inside them (the interpreter, the venv, site-packages) is bound back read-only, one directory each.
_HIDE = ("/root", "/home", "/tmp", "/var/tmp")
_PRIVATE_TMP = ("/tmp", "/var/tmp")  # the program's own (size-capped, world-writable) temp dirs


def _interpreter_dirs() -> list[str]:
    """The directories the sandboxed interpreter reads: its prefixes, the venv, site-packages (as written and
    resolved, since `sys.executable` is usually a venv symlink into the base interpreter)."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *_SITE_DIRS}
    paths.add(os.path.dirname(os.path.dirname(os.path.abspath(sys.executable))))
    paths.add(os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))))
    dirs = set()
    for p in paths:
        for q in (os.path.abspath(p), os.path.realpath(p)):
            if os.path.isdir(q):
                dirs.add(q.rstrip("/") or "/")
    return sorted(dirs)


def _binds_under_hidden(dirs: Sequence[str]) -> list[str]:
    """Those of `dirs` inside a hidden directory, outermost only (a bind inside a bind would be redundant)."""
    inside = sorted(d for d in dirs if any(d.startswith(h + "/") for h in _HIDE))
    out: list[str] = []
    for d in inside:
        if not any(d == o or d.startswith(o + "/") for o in out):
            out.append(d)
    return out


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
        if os.path.isdir(h) and not os.path.islink(h):
            if h in _PRIVATE_TMP:  # world-writable like a real /tmp, so the unprivileged uid can use it as its cwd
                cmd += ["--perms", "1777", "--size", str(limits.tmpfs_mb << 20), "--tmpfs", h]
            else:
                cmd += ["--tmpfs", h]
    # after the tmpfs mounts, so these land on top of them
    made = set()
    for d in _binds_under_hidden(_interpreter_dirs()):
        h = next(h for h in _HIDE if d.startswith(h + "/"))
        # bwrap would create the missing parents as 0700 root dirs, unreadable after the uid drop
        parts = d[len(h) + 1 :].split("/")[:-1]
        for i in range(1, len(parts) + 1):
            sub = h + "/" + "/".join(parts[:i])
            if sub not in made:
                made.add(sub)
                cmd += ["--perms", "0755", "--dir", sub]
        cmd += ["--ro-bind", d, d]
    cmd += ["--proc", "/proc", "--dev", "/dev", "--chdir", "/tmp"]
    if os.getuid() == 0:
        # no user namespace as root (see module doc); keep only what the harness needs: dropping to a uid,
        # and signalling that uid's processes once it has dropped (without CAP_KILL root may not)
        cmd += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_KILL"]
    return cmd


def _probe() -> tuple[str, str]:
    """("bwrap", "") when bubblewrap can run our interpreter here, else ("fallback", why not)."""
    if shutil.which("bwrap") is None:
        return "fallback", "bubblewrap (bwrap) is not installed"
    try:
        probe = subprocess.run(
            _bwrap_cmd(Limits()) + [sys.executable, "-I", "-S", "-c", "print('ok')"],
            capture_output=True, text=True, timeout=30, env=_SANDBOX_ENV,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as e:
        return "fallback", f"bubblewrap is installed but cannot start a sandbox here ({e})"
    if probe.returncode == 0 and probe.stdout.strip() == "ok":
        return "bwrap", ""
    return "fallback", f"bubblewrap is installed but cannot start a sandbox here ({probe.stderr.strip()[:300]})"


def sandbox_status() -> tuple[str, str]:
    """(mode, why) for this machine: ("bwrap", "") or ("fallback", the reason bubblewrap is not used).

    The probe runs once per process; ROLECAST_SANDBOX=fallback forces the fallback (read on every call).
    """
    global _PROBED
    if os.environ.get("ROLECAST_SANDBOX") == "fallback":
        return "fallback", "ROLECAST_SANDBOX=fallback is set"
    with _MODE_LOCK:
        if _PROBED is None:
            _PROBED = _probe()
            if _PROBED[0] == "fallback":
                log.warning(
                    "%s: the code sandbox falls back to rlimits + an unprivileged uid + a private temp dir, with no "
                    "network or filesystem isolation. Run scripts/install-sandbox.sh (or apt-get install bubblewrap).",
                    _PROBED[1],
                )
        return _PROBED


def sandbox_mode() -> str:
    """ "bwrap" or "fallback" for this machine (see :func:`sandbox_status`)."""
    return sandbox_status()[0]


UNISOLATED_HELP = (
    "install bubblewrap (bash scripts/install-sandbox.sh, or apt-get install bubblewrap), or allow the weaker "
    "fallback with `sandbox: {allow_unisolated: true}` in the config (--set sandbox.allow_unisolated=true)"
)


def _procs_of_uid(uid: int) -> int:
    """Live (not zombie) processes owned by `uid`."""
    n = 0
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if os.stat("/proc/" + d).st_uid != uid:
                    continue
                with open(f"/proc/{d}/stat", "rb") as f:
                    n += f.read().rpartition(b")")[2].split()[0] != b"Z"
            except (OSError, IndexError):
                pass
    return n


# ----------------------------------------------------------------------------------------------------------
# guarding assert-style tests (the checks themselves run in sandbox_harness._run_asserts)

_CMP_OPS = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Is, ast.IsNot, ast.In, ast.NotIn)
# builtins whose behaviour depends on the frame that calls them: calling them through __rc_call would change it
_FRAME_BUILTINS = frozenset({"super", "locals", "vars", "globals", "eval", "exec", "dir", "breakpoint"})


class _Guard(ast.NodeTransformer):
    """Route every call, comparison and assert of test code through the harness's checks."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id in _FRAME_BUILTINS:
            return node
        return ast.Call(func=ast.Name("__rc_call", ast.Load()), args=[node.func, *node.args], keywords=node.keywords)

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        ops = ast.Tuple([ast.Constant(_CMP_OPS.index(type(op))) for op in node.ops], ast.Load())
        return ast.Call(func=ast.Name("__rc_cmp", ast.Load()), args=[ops, node.left, *node.comparators], keywords=[])

    def visit_Assert(self, node: ast.Assert) -> ast.AST:
        self.generic_visit(node)
        node.test = ast.Call(func=ast.Name("__rc_truth", ast.Load()), args=[node.test], keywords=[])
        return node


_WARNINGS_LOCK = threading.Lock()  # catch_warnings swaps process-wide state: one thread at a time


def parse_quietly(src: str) -> ast.Module:
    """ast.parse without the SyntaxWarnings/DeprecationWarnings of someone else's code (invalid escapes)."""
    with _WARNINGS_LOCK, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ast.parse(src)


@functools.lru_cache(maxsize=4096)
def _guard_code(src: str, filename: str) -> CodeType | str:
    """`src` compiled with its calls, comparisons and asserts guarded; the source itself if it does not parse
    (the harness then compiles it and reports the error as the test's failure)."""
    try:
        with _WARNINGS_LOCK, warnings.catch_warnings():  # dataset tests' invalid escapes ('\d') are not ours to report
            warnings.simplefilter("ignore")
            tree = _Guard().visit(ast.parse(src))
            return compile(ast.fix_missing_locations(tree), filename, "exec")
    except (SyntaxError, ValueError):
        return src


@functools.lru_cache(maxsize=4096)
def _modules_used(src: str) -> tuple[str, ...]:
    """Modules a piece of test code imports or names (``sys.getsizeof``): tracked and restored for its checks."""
    try:
        tree = parse_quietly(src)
    except (SyntaxError, ValueError):
        return ()
    mods: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            mods.update(a.name for a in n.names)
        elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
            mods.add(n.module)
        elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in sys.stdlib_module_names:
            mods.add(n.value.id)  # `sys.getsizeof(...)` with `sys` from the program (MBPP)
    return tuple(sorted(mods - _NEVER_PREIMPORT))


# stdlib modules with import-time side effects (printing, a browser, site's path set-up): never imported for a
# test that merely has a variable of that name
_NEVER_PREIMPORT = frozenset({"this", "antigravity", "site", "idlelib", "turtle", "turtledemo", "tkinter", "__main__"})


def _program_imports(src: str) -> set[str]:
    """Top-level standard-library modules a program imports (best effort: it may not parse). Only those: the
    harness may import them with privileges, so nothing of the program's choosing beyond the stdlib, and not
    the stdlib's few modules with import-time side effects."""
    return {m for m in _imports_in(src) if m in sys.stdlib_module_names} - _NEVER_PREIMPORT


def _imports_in(src: str) -> set[str]:
    try:
        tree = parse_quietly(src)
    except (SyntaxError, ValueError):
        return set(re.findall(r"^\s*(?:from|import)\s+([A-Za-z_]\w*)", src, re.M))
    mods: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            mods.update(a.name.split(".")[0] for a in n.names)
        elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
            mods.add(n.module.split(".")[0])
    return mods


# ----------------------------------------------------------------------------------------------------------
# one run


_SANDBOX_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}

# the harness runs with -S; it appends these so programs can still import what the venv has (numpy, ...)
_SITE_DIRS = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]

_UID_BASE = 100000 + (os.getpid() % 20000) * 256  # slots of different trainer processes rarely collide

# the host's shared temp dirs, cleaned of what a fallback run's uid left there
_SHARED_TMP = ("/tmp", "/var/tmp", "/dev/shm")


def _execute(job: Job, slot: int, mode: str) -> JobResult:
    lim = job.limits
    root = os.getuid() == 0
    uid = _UID_BASE + slot if root else None
    nonce = secrets.token_hex(16)
    tmpdir = None
    env = _SANDBOX_ENV
    if mode == "bwrap":
        cwd = "/tmp"
    else:
        # the fallback's private dir: cwd, HOME and TMPDIR, removed afterwards
        tmpdir = tempfile.mkdtemp(prefix="rolecast-sbx-")
        if uid is not None:
            os.chown(tmpdir, uid, uid)
        os.chmod(tmpdir, 0o700)
        cwd = tmpdir
        env = {**_SANDBOX_ENV, "HOME": tmpdir, "TMPDIR": tmpdir}
    nproc = lim.nproc if root else _procs_of_uid(os.getuid()) + lim.nproc
    n_cases = max(1, len(job.inputs))
    payload: dict[str, Any] = {
        "mode": job.mode,
        "program": job.program,
        "uid": uid,
        "cwd": cwd,
        "env": env,
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
    preimport: set[str] = set()
    if mode == "fallback" and root and not all(_world_readable(d) for d in _interpreter_dirs()):
        # the dropped uid cannot read the interpreter's files: load what the program needs while we still can
        preimport.update(_PREIMPORT)
        preimport.update(_program_imports(job.program))
    if job.mode == "asserts":
        if "re" in _program_imports(job.program):
            preimport.add("re")  # so the harness knows the genuine re.Match (a plain result: `assert matches(s)`)
        tracked: set[str] = {"builtins"}
        for src in (job.prelude, job.setup, job.pinned, *job.tests):
            tracked.update(_modules_used(src))
        preimport.update(tracked)
        payload.update(
            nonce=nonce, prelude=job.prelude, pinned=job.pinned, provided=job.provided, tracked=sorted(tracked),
            setup=_guard_code(job.setup, "<test setup>"),
            tests=[_guard_code(t, f"<test {i}>") for i, t in enumerate(job.tests)],
            bind=job.bind,
        )  # fmt: skip
        wall = lim.timeout_s
    elif job.mode in ("stdio", "functional"):
        payload.update(cases=[{"input": x} for x in job.inputs], fn_name=job.fn_name, case_timeout_s=lim.timeout_s)
        wall = lim.timeout_s * n_cases + 2.0
    else:
        raise ValueError(f"unknown sandbox job mode {job.mode!r}; expected asserts, stdio or functional")
    payload["preimport"] = sorted(preimport)

    job_r, job_w = os.pipe()
    res_r, res_w = os.pipe()
    code_r, code_w = os.pipe()
    # -S: site's start-up work (and its .pth imports) costs ~5 ms a run; the harness appends site-packages itself
    argv = [sys.executable, "-I", "-S", "-c", _BOOT, str(job_r), str(res_w), str(code_r)]
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
            pass_fds=(job_r, res_w, code_r),
            start_new_session=True,
            cwd=cwd if mode == "fallback" else None,
            env=env,
        )
    except OSError as e:
        for fd in (job_r, job_w, res_r, res_w, code_r, code_w):
            os.close(fd)
        if tmpdir:
            shutil.rmtree(tmpdir, ignore_errors=True)
        out.reason = f"sandbox_error: {e}"
        return out
    os.close(job_r)
    os.close(res_w)
    os.close(code_r)
    writers = []
    for fd, data in ((code_w, _HARNESS_CODE), (job_w, marshal.dumps(payload))):
        if len(data) <= 65536:  # fits in the pipe buffer: no writer thread needed
            _write_all(fd, data)
        else:
            writers.append(threading.Thread(target=_write_all, args=(fd, data), daemon=True))
            writers[-1].start()
    try:
        _collect(proc, res_r, out, nonce, job, t0 + wall, lim.output_bytes * (n_cases + 1) * 2 + (1 << 16))
    finally:
        os.close(res_r)
        _kill(proc)
        for w in writers:
            w.join(timeout=5)
        if tmpdir:
            if uid is not None:
                # no pid namespace here: daemons (double-forked, setsid, descriptors closed) outlive the group
                _kill_uid(uid)
                _remove_files_of_uid(uid, _SHARED_TMP)
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
    """Kill every process of `uid` (fallback mode has no pid namespace to do it for us)."""
    for _ in range(50):
        subprocess.run(
            # kill(-1) as that uid reaches every process it owns (but the caller), whatever its group, session
            # or descriptors; sh, as the uid may not be able to run our interpreter (Python under /root)
            ["/bin/sh", "-c", "kill -9 -1 2>/dev/null; true"],
            user=uid, group=uid, extra_groups=[], timeout=10, check=False,
        )  # fmt: skip
        if _procs_of_uid(uid) == 0:
            return
        time.sleep(0.01)  # one forked between our scan and the kill
    log.error("sandbox uid %d still has processes after repeated kills", uid)


def _remove_files_of_uid(uid: int, dirs: Sequence[str]) -> None:
    """Remove what `uid` left at the top of the shared temp dirs (all it can create there: they are sticky)."""
    for d in dirs:
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            try:
                if e.stat(follow_symlinks=False).st_uid != uid:
                    continue
                if e.is_dir(follow_symlinks=False):
                    shutil.rmtree(e.path, ignore_errors=True)
                else:
                    os.unlink(e.path)
            except OSError:
                pass


def _collect(
    proc: subprocess.Popen, res_fd: int, out: JobResult, nonce: str, job: Job, deadline: float, res_cap: int
) -> None:
    cap = job.limits.output_bytes
    assert proc.stdout is not None and proc.stderr is not None  # Popen(stdout=PIPE, stderr=PIPE)
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
            if words[0] in ("pass", "fail") and len(words) in (2, 3) and words[1].isdigit():
                i = int(words[1])
                if i not in out.verdicts:  # first verdict per test wins
                    out.verdicts[i] = words[0] == "pass"
                    if words[2:] == ["non_plain"]:
                        out.non_plain.add(i)
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
        c = CaseResult(
            rc=msg["rc"], stdout=msg["stdout"], stderr=msg["stderr"], value=msg.get("value"), reason=msg.get("reason")
        )
        out.cases.append(c)
        if job.stop_on is not None and job.stop_on(len(out.cases) - 1, c):
            out.reason = out.reason or "stopped_early"
            return True


# ----------------------------------------------------------------------------------------------------------
# pool


class SandboxPool:
    """Runs jobs concurrently: `workers` threads, each driving one sandbox process at a time on its own uid."""

    def __init__(self, workers: int | None = None, *, mode: str | None = None):
        """`mode`: None = the best this machine supports (:func:`sandbox_mode`); "fallback" forces the weaker
        one (what a machine without bubblewrap gets); "bwrap" insists on bubblewrap."""
        self.workers = workers or max(1, os.cpu_count() or 1)
        if self.workers > 256:
            raise ValueError("SandboxPool: at most 256 workers (one uid slot each)")
        if mode not in (None, "bwrap", "fallback"):
            raise ValueError(f"SandboxPool: mode must be None, 'bwrap' or 'fallback', got {mode!r}")
        found, why = sandbox_status()  # probe (and warn) up front, not inside the first batch
        if mode == "bwrap" and found != "bwrap":
            raise RuntimeError(f"SandboxPool(mode='bwrap'): {why}")
        self.mode = mode or found
        self._slots: list[int] = list(range(self.workers))
        self._slot_lock = threading.Lock()
        self._ex = ThreadPoolExecutor(self.workers, thread_name_prefix="sandbox")

    def _run_slot(self, job: Job) -> JobResult:
        with self._slot_lock:
            slot = self._slots.pop()
        try:
            return _execute(job, slot, self.mode)
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
