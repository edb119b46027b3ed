"""Per-job memory caps over the whole container: a memory cgroup per pool slot (as root, where the machine
lets us: cgroup v1's memory hierarchy or a delegated v2)."""

from __future__ import annotations

import os
import re
import time


class Cgroups:
    """A memory cgroup per pool slot (jobs on a slot run one after another), under this process's own cgroup:
    cgroup v1 (the memory hierarchy) or v2 (unified). The process cap is RLIMIT_NPROC on the job's own uid
    (joining a cgroup costs an RCU grace period, several ms on a busy machine: one hierarchy, not two). Unavailable (not root, read-only
    cgroupfs, controllers not delegated): every method is a no-op and `ok` is False."""

    def __init__(self, tag: str) -> None:
        self.ok = False
        self.v2 = False
        self.dirs: dict[str, str] = {}  # controller -> our directory for it
        self.made: list[str] = []
        self.slots: list[Slot] = []
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

    def slot(self, i: int) -> Slot | None:
        if not self.ok:
            return None
        dirs = {c: os.path.join(d, f"slot{i}") for c, d in self.dirs.items()}
        for d in set(dirs.values()):
            os.makedirs(d, exist_ok=True)
            self.made.append(d)
            if self.v2:
                _write_file(os.path.join(d, "cgroup.subtree_control"), "+memory")
        self.slots.append(Slot(self, dirs))
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


class Slot:
    """One slot's memory cgroup, reused by the slot's jobs (they run one after another): set the job's cap,
    join it, tell whether the job hit it. Reused rather than made per job: a job's processes are all reaped
    before the next job starts on the slot, zombies hold no memory, and a fresh memory cgroup per job costs
    a few ms more on each run."""

    def __init__(self, cg: Cgroups, dirs: dict[str, str]) -> None:
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

    def wait_empty(self, timeout_s: float) -> bool:
        """Wait until no process is left in this slot's cgroup (the run's are all gone: a process that is still
        exiting, freeing what it held, is listed until it is done), killing any it finds; False on timeout."""
        procs = self._path("cgroup.procs", "cgroup.procs")
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with open(procs) as f:
                    pids = [int(p) for p in f.read().split()]
            except (OSError, ValueError):
                return True  # nothing to read: nothing to wait for
            if not pids:
                return True
            if time.monotonic() > deadline:
                return False
            for pid in pids:
                try:
                    os.kill(pid, 9)
                except OSError:
                    pass
            time.sleep(0.002)

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
