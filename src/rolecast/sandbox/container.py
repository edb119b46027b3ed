"""The container's file-system view and bubblewrap's command line (bwrap mode), and what the fallback needs to
know about the interpreter: where it lives, which package directories a program may see."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from importlib import metadata

from rolecast.sandbox.jobs import Limits

SITE_DIR = "/opt/rolecast-site"  # where the allowed packages appear inside the container
# packages a program may import besides the standard library (their directories in site-packages are bound
# read-only at SITE_DIR; nothing else of the environment is visible). ROLECAST_SANDBOX_PACKAGES overrides it
# (comma-separated distribution or top-level module names).
ALLOWED_PACKAGES = ("numpy",)
_ROOT_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")  # merged-/usr links (or real dirs)
_ETC_FILES = ("/etc/ld.so.cache", "/etc/localtime")  # the loader's cache (faster start-up), the time zone

# the environment of every sandboxed process (the fallback points HOME and TMPDIR at its private dir)
SANDBOX_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}


def site_dirs() -> list[str]:
    return [p for p in sys.path if p.endswith(("site-packages", "dist-packages")) and os.path.isdir(p)]


def interpreter() -> tuple[str, list[str]]:
    """(the real interpreter binary, the directories it needs outside /usr: its installation prefix)."""
    exe = os.path.realpath(sys.executable)
    dirs = set()
    for p in (sys.base_prefix, sys.base_exec_prefix):
        q = os.path.realpath(p)
        if os.path.isdir(q) and q != "/usr" and not q.startswith("/usr/"):
            dirs.add(q)
    return exe, sorted(dirs)


def interpreter_dirs() -> list[str]:
    """Every directory the sandboxed program may read besides /usr: the interpreter's prefix and the allowed
    packages (for the fallback's readability check)."""
    return interpreter()[1] + [src for src, _ in package_binds()]


def _distribution_tops(name: str, site: str) -> set[str]:
    """Top-level entries of site-packages that the installed distribution `name` owns (none if not there)."""
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return set()
    if os.path.realpath(str(dist.locate_file(""))) != os.path.realpath(site):
        return set()
    return {str(f).split("/")[0] for f in dist.files or () if not str(f).startswith("..")}


@functools.lru_cache(maxsize=8)
def _package_binds_for(names: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """(host path, path in the container) of each allowed package's top-level files in site-packages."""
    out: dict[str, str] = {}
    for site in site_dirs():
        for name in names:
            tops = _distribution_tops(name, site)
            tops.update(cand for cand in (name, name + ".py") if os.path.exists(os.path.join(site, cand)))
            for top in sorted(tops):
                if top.endswith(".dist-info") or top == "__pycache__":
                    continue
                src = os.path.join(site, top)
                if os.path.exists(src) and top not in out.values():
                    out[src] = top
    return tuple((src, f"{SITE_DIR}/{top}") for src, top in sorted(out.items(), key=lambda kv: kv[1]))


@functools.lru_cache(maxsize=1)
def hidden_site_dirs() -> tuple[str, ...]:
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


def package_binds() -> tuple[tuple[str, str], ...]:
    env = os.environ.get("ROLECAST_SANDBOX_PACKAGES")
    names = tuple(n.strip() for n in env.split(",") if n.strip()) if env is not None else ALLOWED_PACKAGES
    return _package_binds_for(names)


def world_readable(path: str) -> bool:
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


# ----------------------------------------------------------------------------------------------------------
# bubblewrap's command line


def bwrap_cmd(limits: Limits, seccomp_fd: int | None = None) -> list[str]:
    """bubblewrap's command line: new namespaces, and a root holding only /usr, the interpreter's prefix, the
    allowed packages (at SITE_DIR), a fresh /proc and /dev and a private size-capped /tmp (the cwd)."""
    cmd = [
        shutil.which("bwrap") or "bwrap",
        "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
        "--die-with-parent", "--new-session",
        "--ro-bind", "/usr", "/usr",
    ]  # fmt: skip
    cmd += _host_root_binds()
    cmd += _interpreter_binds()
    cmd += ["--proc", "/proc", "--dev", "/dev"]
    for d in ("/tmp", "/dev/shm"):  # private, size-capped, world-writable like the real ones; /tmp is the cwd
        cmd += ["--perms", "1777", "--size", str(limits.tmpfs_mb << 20), "--tmpfs", d]
    cmd += ["--chdir", "/tmp"]
    cmd += _identity_options()
    if bwrap_has("--as-pid-1"):
        # the harness is the container's init: no bwrap reaper beside it whose memory (dumpable, outside the
        # filter) a program of the same uid could open; signals from inside cannot kill it; it reaps everything
        cmd += ["--as-pid-1"]
    if seccomp_fd is not None:
        cmd += ["--seccomp", str(seccomp_fd)]
    return cmd


def _host_root_binds() -> list[str]:
    """The host's merged-/usr links (or real dirs) at the root, and the few files of /etc a program needs."""
    cmd: list[str] = []
    for p in _ROOT_LINKS:
        if os.path.islink(p):
            cmd += ["--symlink", os.readlink(p), p]
        elif os.path.isdir(p):
            cmd += ["--ro-bind", p, p]
    for f in _ETC_FILES:
        if os.path.isfile(f):
            cmd += ["--ro-bind", f, f]
    return cmd


def _interpreter_binds() -> list[str]:
    """The interpreter's prefix (with the way down to it), its own third-party packages covered, and the
    allowed packages at SITE_DIR."""
    made = {"/", "/usr"}
    cmd: list[str] = []
    for d in interpreter()[1]:
        cmd += _parent_dirs(d, made) + ["--ro-bind", d, d]
    for d in hidden_site_dirs():  # the interpreter's own third-party packages: not the program's to see
        cmd += ["--perms", "0755", "--size", "4096", "--tmpfs", d]
    binds = package_binds()
    if binds:
        cmd += _parent_dirs(SITE_DIR + "/x", made)
        for src, dest in binds:
            cmd += ["--ro-bind", src, dest]
    return cmd


def _parent_dirs(path: str, made: set[str]) -> list[str]:
    """Options creating `path`'s missing parents (not made yet, outside /usr) as 0755 dirs: bwrap would create
    them as 0700 dirs, unreadable after the uid drop. Adds them to `made`."""
    out = []
    parts = path.strip("/").split("/")[:-1]
    for i in range(1, len(parts) + 1):
        d = "/" + "/".join(parts[:i])
        if d not in made and not d.startswith("/usr/"):
            made.add(d)
            out += ["--perms", "0755", "--dir", d]
    return out


def _identity_options() -> list[str]:
    if os.getuid() == 0:
        # as root: no user namespace (its root would be the host's root, owner of root's files); the harness
        # drops to fresh unprivileged uids instead, keeping only what that needs
        return ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_KILL"]
    cmd = ["--unshare-user"]  # a fresh user namespace per run
    if bwrap_has("--disable-userns"):  # bubblewrap >= 0.8: and no nested ones (the filter denies them too)
        cmd += ["--disable-userns"]
    return cmd


@functools.cache
def bwrap_has(option: str) -> bool:
    """Does this bubblewrap know `option` (from its --help)?"""
    try:
        out = subprocess.run([shutil.which("bwrap") or "bwrap", "--help"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return option in out.stdout + out.stderr
