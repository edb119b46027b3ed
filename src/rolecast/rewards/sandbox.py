"""Run untrusted Python programs in a sandbox, many at once. Overview for users, threat model, the seccomp
list and what is out of scope: docs/sandbox.md.

Isolation, strongest available first:

``bwrap`` (bubblewrap found and working; ``scripts/install-sandbox.sh`` installs it)
    Each run is a fresh bubblewrap container: new pid/net/ipc/uts namespaces (no network, only its own
    processes visible, everything dies with the container) and a root holding only ``/usr``, the
    interpreter's installation prefix, the allowed packages (``ALLOWED_PACKAGES``, bound at ``SITE_DIR``),
    a fresh ``/proc`` and ``/dev``, and private size-capped ``/tmp`` (the cwd) and ``/dev/shm``: no project
    tree, no data, no home. A seccomp filter (``SECCOMP_DENY``, built with libseccomp) denies namespace
    creation, mounts, ptrace and other processes' memory, keyrings and more. As root no user namespace is
    used (its root would be the host's root, owner of root's files): the harness drops to two fresh
    unprivileged uids per run (the program's and the judge's) from a block of this process, and bwrap keeps
    only CAP_SETUID/SETGID/KILL for that. Not as root: a fresh user namespace per run (``--unshare-user``,
    ``--disable-userns``). Where the machine lets us (root, cgroup v1 or a delegated v2), each run also runs
    in its pool slot's memory cgroup (one run at a time), capping all its processes together; without one, the program may not start a
    second process, so its per-process limit bounds the run. RLIMIT_NPROC on the run's own uid caps its
    processes.
``fallback`` (no usable bwrap: a logged warning; training refuses it unless ``sandbox.allow_unisolated``)
    rlimits + the same uid drops (when root) + a private directory as cwd, HOME and TMPDIR, removed
    afterwards. As root it also kills every process of the run's uids after each run (daemons that left the
    process group included) and removes what they left at the top of /tmp, /var/tmp and /dev/shm. When the
    uids cannot read the interpreter (Python under /root), the harness imports what the program and tests
    import before dropping privileges. No network or filesystem isolation beyond what an unprivileged uid
    cannot touch.

Inside, a small trusted harness (``sandbox_harness.py``, sent as a code object) reads what the program may
know from one pipe, and:

- asserts (MBPP, HumanEval): forks the **program's process** before anything about the tests has been read;
  it runs the program and then answers requests on a pair of pipes (look up a name, call a function, get or
  set an attribute) with plain built-in data or an opaque handle. Then it forks the **judge**, which reads
  the tests from its own pipe, runs them in its own interpreter and uid with the program's names as proxies,
  and alone writes the verdicts to the result channel. The judge compiles nothing of the program's and
  decodes its answers with a small parser of its own (never marshal or pickle); calls, comparisons and
  asserts in the tests are guarded (:func:`_guard_code`) so a handle is never compared or asserted
  (``non_plain``). Frame walking, the garbage collector or a memory scan in the program find only the
  program's own process.
- stdio/functional: forks one child per case; the harness (which never runs untrusted code) sends each
  case's captured stdout / JSON return value; the host compares them with the expected outputs, which never
  enter the sandbox.

The supervisor then ends and reaps what is left inside the container. Outputs are read at most
``output_bytes`` per stream (then the run is killed, reason ``output_limit``), the result channel is parsed
in linear time and capped (``result_limit``), and a wall-clock deadline kills the whole container.

Measured overhead (bench/sandbox_throughput.py): the "Code sandbox throughput" section of docs/benchmarks.md.
"""

from __future__ import annotations

import ast
import functools
import itertools
import logging
import marshal
import os
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
import weakref
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
# the harness runs in a namespace of its own, not __main__ (where `import __main__` would hand it to the program)
_BOOT = (
    "import marshal,sys;f=open(int(sys.argv[1]),'rb');c=f.read();f.close();del f;"
    "exec(marshal.loads(c),{'__name__':'__rolecast_harness__','__builtins__':__builtins__})"
)

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
    # stdio/functional: run each case as the reference study's runner does (rolecast.rewards.code_study), with
    # these options ({"reliability_guard": bool}); None: as a plain script / a plain call
    study: dict[str, Any] | None = None
    preimport: Sequence[str] = ()  # modules the harness imports before it forks the cases (trusted, stdlib+allowed)


# ----------------------------------------------------------------------------------------------------------
# environment detection and the container's file-system view

_PROBED: tuple[str, str] | None = None  # (mode, why the fallback) of this machine, probed once
_MODE_LOCK = threading.Lock()
SITE_DIR = "/opt/rolecast-site"  # where the allowed packages appear inside the container
# packages a program may import besides the standard library (their directories in site-packages are bound
# read-only at SITE_DIR; nothing else of the environment is visible). ROLECAST_SANDBOX_PACKAGES overrides it
# (comma-separated distribution or top-level module names).
ALLOWED_PACKAGES = ("numpy",)
_ROOT_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")  # merged-/usr links (or real dirs)
_ETC_FILES = ("/etc/ld.so.cache", "/etc/localtime")  # the loader's cache (faster start-up), the time zone


def _site_dirs() -> list[str]:
    return [p for p in sys.path if p.endswith(("site-packages", "dist-packages")) and os.path.isdir(p)]


def _interpreter() -> tuple[str, list[str]]:
    """(the real interpreter binary, the directories it needs outside /usr: its installation prefix)."""
    exe = os.path.realpath(sys.executable)
    dirs = set()
    for p in (sys.base_prefix, sys.base_exec_prefix):
        q = os.path.realpath(p)
        if os.path.isdir(q) and q != "/usr" and not q.startswith("/usr/"):
            dirs.add(q)
    return exe, sorted(dirs)


def _interpreter_dirs() -> list[str]:
    """Every directory the sandboxed program may read besides /usr: the interpreter's prefix and the allowed
    packages (for the fallback's readability check)."""
    return _interpreter()[1] + [src for src, _ in _package_binds()]


@functools.lru_cache(maxsize=8)
def _package_binds_for(names: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """(host path, path in the container) of each allowed package's top-level files in site-packages."""
    from importlib import metadata

    out: dict[str, str] = {}
    for site in _site_dirs():
        for name in names:
            tops: set[str] = set()
            try:
                dist = metadata.distribution(name)
                if os.path.realpath(str(dist.locate_file(""))) == os.path.realpath(site):
                    tops.update(str(f).split("/")[0] for f in dist.files or () if not str(f).startswith(".."))
            except metadata.PackageNotFoundError:
                pass
            for cand in (name, name + ".py"):
                if os.path.exists(os.path.join(site, cand)):
                    tops.add(cand)
            for top in sorted(tops):
                if top.endswith(".dist-info") or top == "__pycache__":
                    continue
                src = os.path.join(site, top)
                if os.path.exists(src) and top not in out.values():
                    out[src] = top
    return tuple((src, f"{SITE_DIR}/{top}") for src, top in sorted(out.items(), key=lambda kv: kv[1]))


@functools.lru_cache(maxsize=1)
def _hidden_site_dirs() -> tuple[str, ...]:
    """Third-party package directories inside what the container binds (the interpreter's prefix, /usr):
    covered by empty mounts, so only the allowed packages (at SITE_DIR) are in view."""
    ver = f"{sys.version_info[0]}.{sys.version_info[1]}"
    cands = []
    for prefix in {sys.base_prefix, sys.base_exec_prefix, "/usr", "/usr/local"}:
        for lib in ("lib", "lib64"):
            for leaf in ("site-packages", "dist-packages"):
                cands.append(os.path.join(prefix, lib, f"python{ver}", leaf))
    cands.append("/usr/lib/python3/dist-packages")
    out = set()
    for c in cands:
        r = os.path.realpath(c)
        if os.path.isdir(r) and not os.path.islink(c):
            out.add(r)
    return tuple(sorted(out))


def _package_binds() -> tuple[tuple[str, str], ...]:
    env = os.environ.get("ROLECAST_SANDBOX_PACKAGES")
    names = tuple(n.strip() for n in env.split(",") if n.strip()) if env is not None else ALLOWED_PACKAGES
    return _package_binds_for(names)


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


def _bwrap_cmd(limits: Limits, seccomp_fd: int | None = None) -> list[str]:
    """bubblewrap's command line: new namespaces, and a root holding only /usr, the interpreter's prefix, the
    allowed packages (at SITE_DIR), a fresh /proc and /dev and a private size-capped /tmp (the cwd)."""
    cmd = [
        shutil.which("bwrap") or "bwrap",
        "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
        "--die-with-parent", "--new-session",
        "--ro-bind", "/usr", "/usr",
    ]  # fmt: skip
    for p in _ROOT_LINKS:
        if os.path.islink(p):
            cmd += ["--symlink", os.readlink(p), p]
        elif os.path.isdir(p):
            cmd += ["--ro-bind", p, p]
    for f in _ETC_FILES:
        if os.path.isfile(f):
            cmd += ["--ro-bind", f, f]
    made = {"/", "/usr"}

    def parents(path: str) -> list[str]:
        # bwrap would create missing parents as 0700 dirs, unreadable after the uid drop
        out = []
        parts = path.strip("/").split("/")[:-1]
        for i in range(1, len(parts) + 1):
            d = "/" + "/".join(parts[:i])
            if d not in made and not d.startswith("/usr/"):
                made.add(d)
                out += ["--perms", "0755", "--dir", d]
        return out

    for d in _interpreter()[1]:
        cmd += parents(d) + ["--ro-bind", d, d]
    for d in _hidden_site_dirs():  # the interpreter's own third-party packages: not the program's to see
        cmd += ["--perms", "0755", "--size", "4096", "--tmpfs", d]
    binds = _package_binds()
    if binds:
        cmd += parents(SITE_DIR + "/x")
        for src, dest in binds:
            cmd += ["--ro-bind", src, dest]
    cmd += ["--proc", "/proc", "--dev", "/dev"]
    for d in ("/tmp", "/dev/shm"):  # private, size-capped, world-writable like the real ones; /tmp is the cwd
        cmd += ["--perms", "1777", "--size", str(limits.tmpfs_mb << 20), "--tmpfs", d]
    cmd += ["--chdir", "/tmp"]
    if os.getuid() == 0:
        # as root: no user namespace (its root would be the host's root, owner of root's files); the harness
        # drops to fresh unprivileged uids instead, keeping only what that needs
        cmd += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_KILL"]
    else:
        cmd += ["--unshare-user"]  # a fresh user namespace per run
        if _bwrap_has("--disable-userns"):  # bubblewrap >= 0.8: and no nested ones (the filter denies them too)
            cmd += ["--disable-userns"]
    if _bwrap_has("--as-pid-1"):
        # the harness is the container's init: no bwrap reaper beside it whose memory (dumpable, outside the
        # filter) a program of the same uid could open; signals from inside cannot kill it; it reaps everything
        cmd += ["--as-pid-1"]
    if seccomp_fd is not None:
        cmd += ["--seccomp", str(seccomp_fd)]
    return cmd


@functools.cache
def _bwrap_has(option: str) -> bool:
    """Does this bubblewrap know `option` (from its --help)?"""
    try:
        out = subprocess.run([shutil.which("bwrap") or "bwrap", "--help"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return option in out.stdout + out.stderr


def run_bare(code: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """`python -I -S -c code` in the container alone, as the sandbox starts it (the same mounts and seccomp
    filter, no harness): the probe below, and the container-floor benchmark (bench/sandbox_throughput.py)."""
    bpf = seccomp_filter()
    r = None
    try:
        if bpf is not None:
            r, w = os.pipe()
            os.write(w, bpf)
            os.close(w)
        return subprocess.run(
            _bwrap_cmd(Limits(), r) + [_interpreter()[0], "-I", "-S", "-c", code],
            capture_output=True, text=True, timeout=timeout, env=_SANDBOX_ENV,
            pass_fds=() if r is None else (r,),
        )  # fmt: skip
    finally:
        if r is not None:
            os.close(r)


def _probe() -> tuple[str, str]:
    """("bwrap", "") when bubblewrap can run our interpreter here, else ("fallback", why not)."""
    if shutil.which("bwrap") is None:
        return "fallback", "bubblewrap (bwrap) is not installed"
    try:
        probe = run_bare("print('ok')")
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


# ----------------------------------------------------------------------------------------------------------
# the system-call filter (bwrap --seccomp): built once with libseccomp (PyPI `pyseccomp`, or libseccomp's own
# `seccomp` bindings where installed). Each listed call fails with EPERM; clone3 with ENOSYS (its flags sit
# in memory a filter cannot read, and libc falls back to clone, whose flags it can); anything of another
# architecture (i386/x32 calls on x86-64) kills the process.

_CLONE_NEW = {
    "CLONE_NEWNS": 0x00020000, "CLONE_NEWCGROUP": 0x02000000, "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000, "CLONE_NEWUSER": 0x10000000, "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000, "CLONE_NEWTIME": 0x00000080,
}  # fmt: skip
SECCOMP_DENY = {
    "namespaces": ("unshare", "setns"),
    "mounts": (
        "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount",
        "fspick", "mount_setattr",
    ),
    "other processes' memory": ("ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp"),
    "kernel keyrings": ("keyctl", "add_key", "request_key"),
    "kernel attack surface": (
        "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
        "open_by_handle_at", "name_to_handle_at", "lookup_dcookie", "fanotify_init", "uselib", "personality",
    ),
    "the machine": (
        "reboot", "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "swapon",
        "swapoff", "acct", "quotactl", "syslog", "iopl", "ioperm", "settimeofday", "clock_settime",
        "clock_adjtime", "adjtimex", "sethostname", "setdomainname", "vhangup",
    ),
}  # fmt: skip
_TIOCSTI = 0x5412  # ioctl that pushes input into a terminal


_SECCOMP: tuple[bytes | None, str] | None = None
_SECCOMP_LOCK = threading.Lock()


def _seccomp_lib() -> Any:
    import importlib

    err: Exception | None = None
    for name in ("seccomp", "pyseccomp"):
        try:
            return importlib.import_module(name)
        except Exception as e:  # ImportError, or RuntimeError("Unable to find libseccomp")
            err = err or e
    raise ImportError(f"no libseccomp bindings (pip install pyseccomp, and libseccomp2): {err}")


def _build_seccomp() -> bytes:
    import errno

    sc = _seccomp_lib()
    f = sc.SyscallFilter(sc.ALLOW)
    deny = sc.ERRNO(errno.EPERM)
    for names in SECCOMP_DENY.values():
        for name in names:
            try:
                f.add_rule(deny, name)
            except Exception:  # unknown to this libseccomp / architecture
                pass
    for bit in _CLONE_NEW.values():  # clone(2) with any CLONE_NEW* flag; a plain fork or thread is allowed
        f.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, bit, bit))
    f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    f.add_rule(deny, "ioctl", sc.Arg(1, sc.MASKED_EQ, 0xFFFFFFFF, _TIOCSTI))
    with tempfile.TemporaryFile() as tmp:
        f.export_bpf(tmp)
        tmp.seek(0)
        return tmp.read()


def seccomp_filter() -> bytes | None:
    """The compiled filter (BPF program) passed to bubblewrap, or None (logged once) without libseccomp."""
    global _SECCOMP
    with _SECCOMP_LOCK:
        if _SECCOMP is None:
            try:
                _SECCOMP = (_build_seccomp(), "")
            except Exception as e:
                _SECCOMP = (None, f"no seccomp filter: {e}")
                log.warning("code sandbox: %s; run scripts/install-sandbox.sh", _SECCOMP[1])
        return _SECCOMP[0]


# ----------------------------------------------------------------------------------------------------------
# per-job cgroups (memory and process caps over the whole container, as root where the machine lets us)


class _Cgroups:
    """A memory cgroup per pool slot (jobs on a slot run one after another), under this process's own cgroup:
    cgroup v1 (the memory hierarchy) or v2 (unified). The process cap is RLIMIT_NPROC on the job's own uid
    (joining a cgroup costs an RCU grace period, several ms on a busy machine: one hierarchy, not two). Unavailable (not root, read-only
    cgroupfs, controllers not delegated): every method is a no-op and `ok` is False."""

    def __init__(self, tag: str) -> None:
        self.ok = False
        self.v2 = False
        self.dirs: dict[str, str] = {}  # controller -> our directory for it
        self.made: list[str] = []
        self.slots: list[_Slot] = []
        if os.getuid() != 0 or os.environ.get("ROLECAST_SANDBOX_CGROUPS") == "0":
            return
        try:
            own = {}
            for line in open("/proc/self/cgroup").read().splitlines():
                _, ctrls, path = line.split(":", 2)
                for c in ctrls.split(",") if ctrls else [""]:
                    own[c] = path
            for c in ("memory",):
                base = f"/sys/fs/cgroup/{c}"
                if c in own and os.path.isdir(base):
                    self.dirs[c] = os.path.join(base + own[c], tag)
            if not self.dirs and "" in own and os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
                self.v2 = True
                parent = "/sys/fs/cgroup" + own[""]
                for c in ("memory",):
                    self.dirs[c] = os.path.join(parent, tag)
            if set(self.dirs) != {"memory"}:
                self.dirs = {}
                return
            for d in set(self.dirs.values()):
                _remove_dead_pools(os.path.dirname(d))
                os.makedirs(d, exist_ok=True)
                self.made.append(d)
            if self.v2:  # let the slots and jobs below use both controllers (fails where not delegated)
                pool_dir = self.dirs["memory"]
                _write_file(os.path.join(pool_dir, "cgroup.subtree_control"), "+memory")
            self.ok = True
            trial = self.slot(-1)  # one job's worth of cgroup work, so a machine that refuses it is found now
            assert trial is not None
            trial.begin(256 << 20)
        except OSError:
            self.close()

    def slot(self, i: int) -> _Slot | None:
        if not self.ok:
            return None
        dirs = {c: os.path.join(d, f"slot{i}") for c, d in self.dirs.items()}
        for d in set(dirs.values()):
            os.makedirs(d, exist_ok=True)
            self.made.append(d)
            if self.v2:
                _write_file(os.path.join(d, "cgroup.subtree_control"), "+memory")
        self.slots.append(_Slot(self, dirs))
        return self.slots[-1]

    def close(self) -> None:
        for d in reversed(self.made):
            try:
                os.rmdir(d)
            except OSError:
                pass
        self.made = []
        self.ok = False


def _remove_dead_pools(parent: str) -> None:
    """Remove the cgroup directories of pools whose process has died (their last jobs' zombies kept them)."""
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        m = re.fullmatch(r"rolecast-sbx-(\d+)-[0-9a-f]+", name)
        if not m or os.path.exists(f"/proc/{m.group(1)}"):
            continue
        for dp, dns, _ in sorted(os.walk(os.path.join(parent, name)), key=lambda w: -len(w[0])):
            for d in dns:
                try:
                    os.rmdir(os.path.join(dp, d))
                except OSError:
                    pass
        try:
            os.rmdir(os.path.join(parent, name))
        except OSError:
            pass


class _Slot:
    """One slot's memory cgroup, reused by the slot's jobs (they run one after another): set the job's cap,
    join it, tell whether the job hit it. Reused rather than made per job: a job's processes are all reaped
    before the next job starts on the slot, zombies hold no memory, and a fresh memory cgroup per job costs
    a few ms more on each run."""

    def __init__(self, cg: _Cgroups, dirs: dict[str, str]) -> None:
        self.cg, self.dirs = cg, dirs
        self.limit = 1 << 62  # unlimited, as a new cgroup starts
        self.ooms = 0

    def _path(self, v1: str, v2: str) -> str:
        return os.path.join(self.dirs["memory"], v2 if self.cg.v2 else v1)

    def begin(self, memory_bytes: int) -> list[str]:
        """Set this job's cap; the files a process writes its pid to, to join the cgroup."""
        if memory_bytes != self.limit:
            if self.cg.v2:
                _write_file(self._path("", "memory.max"), str(memory_bytes))
                _write_file(self._path("", "memory.swap.max"), "0", missing_ok=True)
            else:
                # memory+swap must stay >= memory: order the two writes by the direction of the change
                sw = self._path("memory.memsw.limit_in_bytes", "")
                mem = self._path("memory.limit_in_bytes", "")
                first, then = (sw, mem) if memory_bytes > self.limit else (mem, sw)
                _write_file(first, str(memory_bytes), missing_ok=first == sw)
                _write_file(then, str(memory_bytes), missing_ok=then == sw)
            self.limit = memory_bytes
        self.ooms = self._oom_kills()
        return [self._path("cgroup.procs", "cgroup.procs")]

    def oom_kills(self) -> int:
        """OOM kills in this slot's cgroup since the job began."""
        return self._oom_kills() - self.ooms

    def _oom_kills(self) -> int:
        path = self._path("memory.oom_control", "memory.events")
        try:
            for line in open(path).read().splitlines():
                k, _, v = line.partition(" ")
                if k == "oom_kill":
                    return int(v)
        except (OSError, ValueError):
            pass
        return 0


def _write_file(path: str, text: str, missing_ok: bool = False) -> None:
    try:
        with open(path, "w") as f:
            f.write(text)
    except FileNotFoundError:
        if not missing_ok:
            raise
    except OSError:
        if not missing_ok:
            raise


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


@functools.lru_cache(maxsize=4096)
def _names_used(src: str) -> tuple[str, ...]:
    """Every name a piece of test code mentions: what the judge asks the program for (if it has it)."""
    try:
        tree = parse_quietly(src)
    except (SyntaxError, ValueError):
        return tuple(sorted(set(re.findall(r"[A-Za-z_]\w*", src))))
    return tuple(sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}))


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

# as root every run gets two fresh uids (its program's and its judge's) from this process's block, so no
# uid-keyed kernel state (a keyring, a process count, a file in a shared dir) carries from one run to the next
# until the block wraps (32768 runs later); blocks of different trainer processes rarely collide
_UID_BLOCK = 1 << 16
_UID_BASE = (1 << 24) + (os.getpid() % (1 << 14)) * _UID_BLOCK
_UID_NEXT = itertools.count()
_UID_LOCK = threading.Lock()


def _fresh_uids() -> tuple[int, int]:
    """(program's uid, judge's uid) for one run."""
    with _UID_LOCK:
        n = next(_UID_NEXT) % (_UID_BLOCK // 2)
    return _UID_BASE + 2 * n, _UID_BASE + 2 * n + 1


# the host's shared temp dirs, cleaned of what a fallback run's uid left there
_SHARED_TMP = ("/tmp", "/var/tmp", "/dev/shm")
_CG_HEADROOM_MB = 96  # the judge's interpreter and bwrap, on top of the program's memory_mb


def _execute(job: Job, mode: str, cg: _Slot | None = None) -> JobResult:
    lim = job.limits
    root = os.getuid() == 0
    cand_uid, judge_uid = _fresh_uids() if root else (None, None)
    tmpdir = None
    env = _SANDBOX_ENV
    if mode == "bwrap":
        cwd = "/tmp"
        sys_path = [SITE_DIR] if _package_binds() else []
        python = _interpreter()[0]
    else:
        # the fallback's private dir: cwd, HOME and TMPDIR, removed afterwards
        tmpdir = tempfile.mkdtemp(prefix="rolecast-sbx-")
        if cand_uid is not None:
            os.chown(tmpdir, cand_uid, cand_uid)
        os.chmod(tmpdir, 0o700)
        cwd = tmpdir
        env = {**_SANDBOX_ENV, "HOME": tmpdir, "TMPDIR": tmpdir}
        sys_path = _site_dirs()
        python = sys.executable
    if root:
        # the uid is this run's alone, so RLIMIT_NPROC caps this run's processes. Without a memory cgroup the
        # program gets no second process at all: then the per-process address-space limit bounds the run
        nproc = lim.nproc if cg is not None else 1
    else:
        nproc = _procs_of_uid(os.getuid()) + lim.nproc
    n_cases = max(1, len(job.inputs))
    payload: dict[str, Any] = {
        "mode": job.mode,
        "program": job.program,
        "uid": cand_uid,
        "cwd": cwd,
        "env": env,
        "sys_path": sys_path,
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
    judge: dict[str, Any] | None = None
    if job.mode == "asserts":
        if "re" in _program_imports(job.program):
            preimport.add("re")  # so that a match the program returns crosses as one (`assert matches(s)`)
        tracked: set[str] = {"builtins"}
        names: set[str] = set()
        for src in (job.prelude, job.setup, job.pinned, *job.tests):
            tracked.update(_modules_used(src))
        for src in (job.setup, *job.tests):
            names.update(_names_used(src))
        if "re" in preimport:
            tracked.add("re")
        payload["prelude"] = job.prelude
        judge = dict(
            uid=judge_uid, prelude=job.prelude, pinned=job.pinned, provided=job.provided, tracked=sorted(tracked),
            setup=_guard_code(job.setup, "<test setup>"), names=sorted(names),
            tests=[_guard_code(t, f"<test {i}>") for i, t in enumerate(job.tests)], bind=job.bind,
        )  # fmt: skip
        wall = lim.timeout_s
        res_cap = 4096 + 64 * len(job.tests)
    elif job.mode in ("stdio", "functional"):
        payload.update(cases=[{"input": x} for x in job.inputs], fn_name=job.fn_name, case_timeout_s=lim.timeout_s)
        if job.study is not None:
            payload["study"] = dict(job.study)
        preimport.update(job.preimport)
        wall = lim.timeout_s * n_cases + 2.0
        res_cap = lim.output_bytes * (n_cases + 1) * 2 + (1 << 16)
    else:
        raise ValueError(f"unknown sandbox job mode {job.mode!r}; expected asserts, stdio or functional")
    payload["preimport"] = sorted(preimport)
    payload["pidns"] = mode == "bwrap"  # the harness may kill(-1) inside its own pid namespace

    fds: list[int] = []

    def pipe() -> tuple[int, int]:
        r, w = os.pipe()
        fds.extend((r, w))
        return r, w

    code_r, code_w = pipe()
    cand_r, cand_w = pipe()
    judge_r, judge_w = pipe() if judge is not None else (-1, -1)
    res_r, res_w = pipe()
    child_fds = [code_r, cand_r, res_w] + ([judge_r] if judge is not None else [])
    # -S: site's start-up work (and its .pth imports) costs ~5 ms a run; the harness sets sys.path itself
    argv = [python, "-I", "-S", "-c", _BOOT, str(code_r), str(cand_r), str(judge_r), str(res_w)]
    if mode == "bwrap":
        bpf = seccomp_filter()
        seccomp_r = None
        if bpf is not None:
            seccomp_r, seccomp_w = pipe()
            os.write(seccomp_w, bpf)  # a few hundred bytes: fits in the pipe buffer
            os.close(seccomp_w)
            fds.remove(seccomp_w)
            child_fds.append(seccomp_r)
        argv = _bwrap_cmd(lim, seccomp_r) + argv
    if cg is not None:
        try:
            procs = cg.begin((lim.memory_mb + _CG_HEADROOM_MB) << 20)
        except OSError as e:
            for fd in fds:
                os.close(fd)
            if tmpdir:
                shutil.rmtree(tmpdir, ignore_errors=True)
            return JobResult(mode=job.mode, reason=f"sandbox_error: cgroup: {e}")
        # the shell joins the job's cgroups, then becomes bwrap (or the fallback's python): all it starts is in them
        join = " && ".join(f"echo $$ > {shlex.quote(p)}" for p in procs)
        argv = ["/bin/sh", "-c", join + ' && exec "$@"', "sh", *argv]
    out = JobResult(mode=job.mode)
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=tuple(child_fds),
            start_new_session=True,
            cwd=cwd if mode == "fallback" else None,
            env=env,
        )
    except OSError as e:
        for fd in fds:
            os.close(fd)
        if tmpdir:
            shutil.rmtree(tmpdir, ignore_errors=True)
        out.reason = f"sandbox_error: {e}"
        return out
    for fd in child_fds:
        os.close(fd)
    writers = []
    sends = [(code_w, _HARNESS_CODE), (cand_w, marshal.dumps(payload))]
    if judge is not None:
        sends.append((judge_w, marshal.dumps(judge)))
    for fd, data in sends:
        if len(data) <= 65536:  # fits in the pipe buffer: no writer thread needed
            _write_all(fd, data)
        else:
            writers.append(threading.Thread(target=_write_all, args=(fd, data), daemon=True))
            writers[-1].start()
    try:
        _collect(proc, res_r, out, job, t0 + wall, res_cap)
    finally:
        os.close(res_r)
        _kill(proc)
        for w in writers:
            w.join(timeout=5)
        if tmpdir:
            for uid in (cand_uid, judge_uid):
                if uid is not None:
                    # no pid namespace here: daemons (double-forked, setsid, descriptors closed) outlive the group
                    _kill_uid(uid)
                    _remove_files_of_uid(uid, _SHARED_TMP)
            shutil.rmtree(tmpdir, ignore_errors=True)
    if cg is not None and cg.oom_kills():
        out.reason = "memory_limit"  # the run's processes together passed its memory cap
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
        if _procs_of_uid(uid) == 0:
            return
        subprocess.run(
            # kill(-1) as that uid reaches every process it owns (but the caller), whatever its group, session
            # or descriptors; sh, as the uid may not be able to run our interpreter (Python under /root)
            ["/bin/sh", "-c", "kill -9 -1 2>/dev/null; true"],
            user=uid, group=uid, extra_groups=[], timeout=10, check=False,
        )  # fmt: skip
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


_DONE_GRACE_S = 0.5  # after the judge's last verdict: time for the program's process to flush and exit


def _collect(proc: subprocess.Popen, res_fd: int, out: JobResult, job: Job, deadline: float, res_cap: int) -> None:
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
                if _parse_results(res, out, job):
                    return
                if out.done and not was_done and job.mode == "asserts":
                    deadline = min(deadline, time.monotonic() + _DONE_GRACE_S)
    finally:
        out.stdout = bytes(bufs[so])
        out.stderr = bytes(bufs[se])


_MAX_RESULT_LINE = 256


def _parse_results(buf: bytearray, out: JobResult, job: Job) -> bool:
    """Consume complete records from `buf` (each byte is looked at once: the cost is linear in what arrives);
    True when the job can stop early."""
    if job.mode == "asserts":
        # the judge's lines: "pass I", "fail I [non_plain]", "load EXC", "stop WHY", "done". Split in C (one
        # pass over the bytes), empty lines dropped in C: a flood of newlines costs no Python loop
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
            if not words:
                continue
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
        return False
    # stdio/functional: "<len>\n<marshal record>" frames, written only by the trusted harness parent
    while True:
        nl = buf.find(b"\n", 0, 24)
        if nl < 0:
            if len(buf) >= 24:
                out.reason = out.reason or "result_limit"
                return True
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
        self._cg = _Cgroups(f"rolecast-sbx-{os.getpid()}-{id(self):x}")
        self._finalizer = weakref.finalize(self, self._cg.close)
        self.cgroups = self._cg.ok  # per-job memory and process caps in force
        self._slots: list[_Slot | None] = [self._cg.slot(i) for i in range(self.workers)]
        self._slot_lock = threading.Lock()
        self._ex = ThreadPoolExecutor(self.workers, thread_name_prefix="sandbox")

    def _run_slot(self, job: Job) -> JobResult:
        with self._slot_lock:
            slot = self._slots.pop()
        try:
            return _execute(job, self.mode, slot)
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
