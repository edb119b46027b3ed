"""The system-call filter (bwrap --seccomp): built once with libseccomp (PyPI `pyseccomp`, or libseccomp's own
`seccomp` bindings where installed). Each listed call fails with EPERM; clone3 with ENOSYS (its flags sit in
memory a filter cannot read, and libc falls back to clone, whose flags it can); anything of another
architecture (i386/x32 calls on x86-64) kills the process. docs/sandbox.md lists the calls (a test checks
that list against SECCOMP_DENY)."""

from __future__ import annotations

import errno
import importlib
import logging
import tempfile
import threading
from typing import Any

log = logging.getLogger(__name__)

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
    # objects that outlive every process of a job inside its ipc namespace, shared by the programs of a batch
    "SysV and POSIX message-queue IPC": (
        "shmget", "shmat", "shmctl", "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop", "semtimedop",
        "semctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr",
    ),
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
    err: Exception | None = None
    for name in ("seccomp", "pyseccomp"):  # optional: imported by name, only when the filter is first built
        try:
            return importlib.import_module(name)
        except Exception as e:  # ImportError, or RuntimeError("Unable to find libseccomp")
            err = err or e
    raise ImportError(f"no libseccomp bindings (pip install pyseccomp, and libseccomp2): {err}")


def _build_seccomp() -> bytes:
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
