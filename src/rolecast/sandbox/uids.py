"""The uids a run's processes drop to as root, two fresh ones per run (the program's and the judge's); and, in
the fallback (no pid namespace, shared temp dirs), removing everything such a uid left behind."""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Sequence

log = logging.getLogger(__name__)

# as root every run gets two fresh uids (its program's and its judge's) from this process's block, so no
# uid-keyed kernel state (a keyring, a process count, a file in a shared dir) carries from one run to the next
# until the block wraps (32768 runs later); blocks of different trainer processes rarely collide
UID_BLOCK = 1 << 16
UID_BASE = (1 << 24) + (os.getpid() % (1 << 14)) * UID_BLOCK
_UID_NEXT = itertools.count()
_UID_LOCK = threading.Lock()

# the host's shared temp dirs, cleaned of what a fallback run's uid left there
_SHARED_TMP = ("/tmp", "/var/tmp", "/dev/shm")


def fresh_uids() -> tuple[int, int]:
    """(program's uid, judge's uid) for one run."""
    with _UID_LOCK:
        n = next(_UID_NEXT) % (UID_BLOCK // 2)
    return UID_BASE + 2 * n, UID_BASE + 2 * n + 1


def procs_of_uid(uid: int) -> int:
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


def clean_up_uid(uid: int) -> None:
    """After a fallback run: kill every process of `uid` and remove what it left in the shared temp dirs. No
    pid namespace here: daemons (double-forked, setsid, descriptors closed) outlive the process group."""
    _kill_uid(uid)
    _remove_files_of_uid(uid, _SHARED_TMP)


def _kill_uid(uid: int) -> None:
    """Kill every process of `uid` (fallback mode has no pid namespace to do it for us)."""
    for _ in range(50):
        if procs_of_uid(uid) == 0:
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
