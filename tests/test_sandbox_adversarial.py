"""Programs that attack the grader instead of solving the problem (issue 21), run through the code reward as
training runs it: each scores 0, with the reason recorded, one at a time and all at once in a concurrent pool,
while correct programs still score 1. Each attack also prints what it found, and the test checks that too: a
sandbox that merely crashed the attack would not show the attack's own report of failure.

The classes: forging verdicts from inside the program's process (frame walking, the garbage collector, a
memory scan for the tests and the verdict channel), reading the answer key from the file system, kernel
state carried from one job to the next on the same slot (keyrings, SysV shared memory, files, abstract
sockets, processes), memory fanned out over forked children, floods of the result channel, and namespace
creation and the other system calls the seccomp filter denies. Everything here contacts loopback at most.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path

import pytest

from rolecast import sandbox
from rolecast.rewards.code import CodeTests, build_job, judge
from rolecast.sandbox import Job, JobResult, SandboxPool, channel, container, run_python, sandbox_mode

pytestmark = pytest.mark.skipif(sandbox_mode() != "bwrap", reason="the adversarial suite needs bubblewrap")

REPO = Path(__file__).resolve().parents[1]
MARK = "m-" + secrets.token_hex(8)  # in the tests only: a program that finds it has read the judge's memory
ADD = CodeTests(kind="asserts", asserts=(f"assert add(1, 2) == 3, {MARK!r}", f"assert add(-1, 1) == 0, {MARK!r}"))
GOOD = "def add(a, b):\n    return a + b\n"
WRONG = "def add(a, b):\n    return None\n"


def grade(pool: SandboxPool, prog: str, tests: CodeTests = ADD, **kw) -> tuple[float, str | None, str]:
    """(reward, reason, what the program printed)."""
    res = pool.run(build_job(prog, tests, **kw))
    s = judge(res, tests, program=prog)
    return s.reward, s.reason, res.stdout.decode("utf-8", "replace")


def report(out: str) -> dict:
    """The attack's own findings: its last line starting with REPORT."""
    line = [x for x in out.splitlines() if x.startswith("REPORT ")][-1]
    return json.loads(line[len("REPORT ") :])


# ---------------------------------------------------------------------------------------------- the attacks
# each program prints `REPORT <json>` from inside add() (so after the tests started) and returns the right
# answer only if its attack got somewhere

FRAMES = (
    "import sys, os, json\n"
    "seen, writes = [], []\n"
    "def hunt():\n"
    "    f = sys._getframe()\n"
    "    while f is not None:\n"
    "        for scope in (f.f_locals, f.f_globals):\n"
    "            for k, v in list(scope.items()):\n"
    "                if isinstance(v, (list, tuple)) and v and all(hasattr(x, 'co_filename') for x in v):\n"
    "                    seen.append(('code list', f.f_code.co_name, k))\n"
    "                    if isinstance(v, list):\n"
    "                        v[:] = [compile('pass', '<test>', 'exec')] * len(v)\n"
    "                if k == 'res_fd' and isinstance(v, int):  # the old harness's verdict descriptor\n"
    "                    try:\n"
    "                        os.write(v, b'pass 0\\npass 1\\ndone\\n')\n"
    "                        seen.append(('wrote to res_fd', f.f_code.co_name, k))\n"
    "                    except OSError as e:\n"
    "                        writes.append(e.strerror)\n"
    "                if isinstance(v, dict) and '__rc_cmp' in v:\n"
    "                    v['__rc_cmp'] = lambda *a: True\n"
    "                    seen.append(('test namespace', f.f_code.co_name, k))\n"
    "        f = f.f_back\n"
    "def frames():\n"
    "    f = sys._getframe(1)\n"
    "    while f is not None:\n"
    "        yield f\n"
    "        f = f.f_back\n"
    "hunt()\n"
    "def add(a, b):\n"
    "    hunt()\n"
    "    print('REPORT ' + json.dumps({'seen': seen, 'writes': writes, 'frames': [f.f_code.co_name for f in frames()]}))\n"
    "    return None\n"
)

GC = (
    "import gc, json\n"
    "hits = []\n"
    "def hunt():\n"
    "    for o in gc.get_objects():\n"
    "        if isinstance(o, list) and o and all(type(x).__name__ == 'code' for x in o):\n"
    "            if any(str(x.co_filename).startswith('<test') for x in o):\n"
    "                o[:] = [compile('pass', '<test 0>', 'exec')] * len(o)\n"
    "                hits.append('compiled tests')\n"
    "        elif isinstance(o, dict) and ('__rc_cmp' in o or '__rc_truth' in o):\n"
    "            o['__rc_cmp'] = lambda *a: True\n"
    "            o['__rc_truth'] = lambda v: True\n"
    "            hits.append('test namespace')\n"
    "        elif type(o).__name__ == 'function' and o.__name__ in ('rep', 'rc_cmp', 'rc_truth', 'checked'):\n"
    "            hits.append('judge function ' + o.__name__)\n"
    "def add(a, b):\n"
    "    hunt()\n"
    "    print('REPORT ' + json.dumps({'hits': hits}))\n"
    "    return None\n"
)

# the verdict tag's and the tests' format is known, their value is not: scan every readable mapping of every
# process in view (own memory included) for text in that format, and take descriptor numbers from argv
SCAN = (
    "import os, re, json, ctypes\n"
    "PAT = re.compile(rb'm-[0-9a-f]{16}')\n"
    "def scan(pid):\n"
    "    own = pid == os.getpid()\n"
    "    try:\n"
    "        maps = open(f'/proc/{pid}/maps').read().splitlines()\n"
    "        mem = None if own else open(f'/proc/{pid}/mem', 'rb', 0)\n"
    "    except OSError as e:\n"
    "        return 'denied ' + type(e).__name__\n"
    "    hits = set()\n"
    "    for line in maps:\n"
    "        addr, perms = line.split()[:2]\n"
    "        lo, hi = (int(x, 16) for x in addr.split('-'))\n"
    "        path = line.split()[5] if len(line.split()) > 5 else ''\n"
    "        if 'r' not in perms or hi - lo > (256 << 20) or (own and path not in ('', '[heap]', '[stack]')):\n"
    "            continue\n"
    "        try:\n"
    "            if own:  # its own memory, read directly (its /proc/self/mem is root's after the uid drop)\n"
    "                data = ctypes.string_at(lo, hi - lo)\n"
    "            else:\n"
    "                mem.seek(lo)\n"
    "                data = mem.read(hi - lo)\n"
    "            hits.update(m.decode() for m in PAT.findall(data))\n"
    "        except (OSError, ValueError, OverflowError):\n"
    "            pass\n"
    "    return sorted(hits)\n"
    "def cmdline(pid):\n"
    "    try:\n"
    "        return open(f'/proc/{pid}/cmdline', 'rb').read().decode('utf-8', 'replace')\n"
    "    except OSError as e:\n"
    "        return 'denied ' + type(e).__name__\n"
    "def add(a, b):\n"
    "    pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
    "    found = {p: scan(p) for p in pids}\n"
    "    fds = {p: (sorted(os.listdir(f'/proc/{p}/fd')) if os.access(f'/proc/{p}/fd', os.R_OK) else 'denied') for p in pids}\n"
    "    print('REPORT ' + json.dumps({'me': os.getpid(), 'mem': found, 'fds': fds, 'argv': {p: cmdline(p) for p in pids}}))\n"
    "    return None\n"
)

# the answer key: the shared data (MBPP with its reference solutions) and the project tree; the program is told
# exactly where they are on the host, and also walks everything in view for data files
FS_SEARCH = (
    "import os, json\n"
    "PLACES = {places!r}\n"
    "there = {{p: os.path.exists(p) for p in PLACES}}\n"
    "hits = []\n"
    "for dp, dns, fns in os.walk('/'):\n"
    "    if dp.startswith(('/proc', '/sys', '/dev')):\n"
    "        dns[:] = []\n"
    "        continue\n"
    "    for fn in fns:\n"
    "        low = fn.lower()\n"
    "        if 'mbpp' in low or 'humaneval' in low or low.endswith(('.jsonl', '.parquet')):\n"
    "            hits.append(os.path.join(dp, fn))\n"
    "ref = None\n"
    "for path in hits + [p for p in PLACES if p.endswith('.jsonl')]:\n"
    "    try:\n"
    "        for line in open(path):\n"
    "            row = json.loads(line)\n"
    "            if row.get('task_id') == 2:\n"
    "                ref = row['code']\n"
    "    except (OSError, ValueError):\n"
    "        pass\n"
    "if ref:\n"
    "    exec(ref)\n"
    "else:\n"
    "    def similar_elements(a, b):\n"
    "        return None\n"
    "hidden = {{d: sorted(os.listdir(d)) for d in {hidden!r} if os.path.isdir(d)}}\n"
    "print('REPORT ' + json.dumps({{'there': there, 'hits': hits, 'ref': bool(ref), 'hidden': hidden, 'root': sorted(os.listdir('/root')) if os.path.isdir('/root') else [],\n"
    "                            'top': sorted(os.listdir('/'))}}))\n"
)

# kernel state planted by one job, looked for by the next one on the same slot
PLANT = (
    "import ctypes, os, socket, json, time\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "got = {{}}\n"
    "def err():\n"
    "    return os.strerror(ctypes.get_errno())\n"
    "for name, ring in (('user', -4), ('session', -3)):\n"
    "    r = libc.syscall(248, b'user', b'{tag}', b'secret', 6, ring)  # add_key\n"
    "    got['add_key ' + name] = 'ok' if r >= 0 else err()\n"
    "r = libc.shmget({shmkey}, 4096, 0o1666)  # IPC_CREAT | 0666\n"
    "got['shmget'] = 'ok' if r >= 0 else err()\n"
    "for p in ('/dev/shm/{tag}', '/tmp/{tag}'):\n"
    "    try:\n"
    "        open(p, 'w').write('x')\n"
    "        got[p] = 'ok'\n"
    "    except OSError as e:\n"
    "        got[p] = str(e)\n"
    "if os.fork() == 0:  # a daemon holding an abstract socket, in a new session, all descriptors closed\n"
    "    os.setsid()\n"
    "    if os.fork() == 0:\n"
    "        s = socket.socket(socket.AF_UNIX)\n"
    "        s.bind('\\0{tag}')\n"
    "        s.listen(1)\n"
    "        os.closerange(0, 3)\n"
    "        time.sleep(60)\n"
    "    os._exit(0)\n"
    "time.sleep(0.2)\n"
    "def add(a, b):\n"
    "    print('REPORT ' + json.dumps(got))\n"
    "    return None\n"
)
LOOK = (
    "import ctypes, os, socket, json\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "found = {{}}\n"
    "def err():\n"
    "    return os.strerror(ctypes.get_errno())\n"
    "for name, ring in (('user', -4), ('session', -3)):\n"
    "    r = libc.syscall(250, 10, ring, b'user', b'{tag}', 0)  # keyctl(KEYCTL_SEARCH)\n"
    "    found['key ' + name] = 'found' if r >= 0 else err()\n"
    "r = libc.shmget({shmkey}, 0, 0)\n"
    "found['shm'] = 'found' if r >= 0 else err()\n"
    "for p in ('/dev/shm/{tag}', '/tmp/{tag}'):\n"
    "    found[p] = 'found' if os.path.exists(p) else 'absent'\n"
    "s = socket.socket(socket.AF_UNIX)\n"
    "try:\n"
    "    s.connect('\\0{tag}')\n"
    "    found['socket'] = 'found'\n"
    "except OSError as e:\n"
    "    found['socket'] = e.strerror\n"
    "def add(a, b):\n"
    "    found['processes'] = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
    "    print('REPORT ' + json.dumps(found))\n"
    "    return a + b if any(v == 'found' for v in found.values()) else None\n"
)

# three children holding 700 MB each under a 1 GB limit: the job's memory cap, not the process's, decides
FAN_OUT = (
    "import os, json, time\n"
    "held = 0\n"
    "kids = []\n"
    "for i in range(3):\n"
    "    r, w = os.pipe()\n"
    "    pid = os.fork()\n"
    "    if pid == 0:\n"
    "        block = bytearray(b'x') * (700 << 20)  # written: every page is really held\n"
    "        os.write(w, b'k')\n"
    "        time.sleep(30)\n"
    "        os._exit(0)\n"
    "    os.close(w)\n"
    "    kids.append(r)\n"
    "held = sum(os.read(r, 1) == b'k' for r in kids)\n"
    "def add(a, b):\n"
    "    print('REPORT ' + json.dumps({'held': held}))\n"
    "    return a + b if held == 3 else None\n"
)

# namespaces, mounts, ptrace, keyrings, bpf, io_uring... each call's outcome
SYSCALLS = (
    "import ctypes, os, json, subprocess\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "out = {}\n"
    "def call(name, fn):\n"
    "    ctypes.set_errno(0)\n"
    "    r = fn()\n"
    "    if r == 0 and name.startswith('clone'):\n"
    "        os._exit(0)  # the child of a clone that worked\n"
    "    out[name] = 'ok' if r >= 0 else os.strerror(ctypes.get_errno())\n"
    "os.makedirs('/tmp/m', exist_ok=True)\n"
    "call('unshare(CLONE_NEWUSER)', lambda: libc.unshare(0x10000000))\n"
    "call('unshare(CLONE_NEWNS)', lambda: libc.unshare(0x00020000))\n"
    "call('unshare(CLONE_NEWNET)', lambda: libc.unshare(0x40000000))\n"
    "call('clone(CLONE_NEWUSER)', lambda: libc.syscall(56, 0x10000000 | 17, 0, 0, 0, 0))\n"
    "call('clone(CLONE_NEWPID)', lambda: libc.syscall(56, 0x20000000 | 17, 0, 0, 0, 0))\n"
    "call('setns', lambda: libc.setns(os.open('/proc/self/ns/net', os.O_RDONLY), 0))\n"
    "call('mount', lambda: libc.mount(b'none', b'/tmp/m', b'tmpfs', 0, None))\n"
    "call('ptrace(ATTACH, parent)', lambda: libc.ptrace(16, os.getppid(), 0, 0))\n"
    "call('process_vm_readv', lambda: libc.syscall(310, os.getppid(), 0, 0, 0, 0, 0))\n"
    "call('keyctl', lambda: libc.syscall(250, 0, -3, 0))\n"
    "call('add_key', lambda: libc.syscall(248, b'user', b'k', b'v', 1, -4))\n"
    "call('bpf', lambda: libc.syscall(321, 0, 0, 0))\n"
    "call('userfaultfd', lambda: libc.syscall(323, 0))\n"
    "call('io_uring_setup', lambda: libc.syscall(425, 1, ctypes.create_string_buffer(120)))\n"
    "call('perf_event_open', lambda: libc.syscall(298, ctypes.create_string_buffer(128), 0, -1, -1, 0))\n"
    "r = subprocess.run(['unshare', '-r', 'true'], capture_output=True)\n"
    "out['unshare -r (command)'] = 'ok' if r.returncode == 0 else 'failed'\n"
    "def add(a, b):\n"
    "    print('REPORT ' + json.dumps(out))\n"
    "    return a + b if 'ok' in out.values() else None\n"
)

# the judge's process: signal it, read it
HIT_JUDGE = (
    "import os, json, signal\n"
    "out = {}\n"
    "def add(a, b):\n"
    "    me = os.getpid()\n"
    "    for p in sorted(int(x) for x in os.listdir('/proc') if x.isdigit()):\n"
    "        if p == me:\n"
    "            continue\n"
    "        for sig in (signal.SIGSTOP, signal.SIGKILL):\n"
    "            try:\n"
    "                os.kill(p, sig)\n"
    "                out[f'{p} {sig.name}'] = 'ok'\n"
    "            except OSError as e:\n"
    "                out[f'{p} {sig.name}'] = e.strerror\n"
    "        for f in ('environ', 'mem', 'fd/3'):\n"
    "            try:\n"
    "                open(f'/proc/{p}/{f}', 'rb').read(1)\n"
    "                out[f'{p} {f}'] = 'ok'\n"
    "            except OSError as e:\n"
    "                out[f'{p} {f}'] = e.strerror\n"
    "    print('REPORT ' + json.dumps(out), flush=True)\n"
    "    return None\n"
)

# floods: bare newlines down every descriptor the program has (its stdout, stderr and channel to the judge)
FLOOD = (
    "import os\n"
    "for fd in range(1, 32):\n"
    "    try:\n"
    "        os.write(fd, b'\\n' * (8 << 20))\n"
    "    except OSError:\n"
    "        pass\n" + GOOD
)
FLOOD_CHANNEL = (
    "import os, sys\n"
    "sys.stdout = sys.stderr = open(os.devnull, 'w')\n"
    "for fd in range(3, 32):\n"
    "    try:\n"
    "        os.write(fd, b'\\n' * (8 << 20))\n"
    "    except OSError:\n"
    "        pass\n" + GOOD
)


def _places() -> list[str]:
    data = REPO.parent / "shared" / "data"
    return [
        str(REPO),
        str(REPO / "src" / "rolecast" / "rewards" / "code.py"),
        str(data),
        str(data / "mbpp" / "mbpp.jsonl"),
        os.path.expanduser("~/.bash_history"),
        "/work",
        "/home",
    ]


MBPP2 = CodeTests.mbpp({
    "task_id": 2,
    "test_list": [
        "assert set(similar_elements((3, 4, 5, 6),(5, 7, 4, 10))) == set((4, 5))",
        "assert set(similar_elements((1, 2, 3, 4),(5, 4, 3, 7))) == set((3, 4))",
    ],
})  # fmt: skip


# ---------------------------------------------------------------------------------------------- checks


def check_frames(reward, reason, out):
    r = report(out)
    # the program's own frames only: its function, and the candidate's serving loop; no tests, no verdicts
    assert (reward, reason) == (0.0, None)
    assert r["seen"] == [] and "add" in r["frames"] and "_serve" in r["frames"] and "_judge" not in r["frames"]
    assert r["writes"] and set(r["writes"]) == {"Bad file descriptor"}  # the result channel is not in this process


def check_gc(reward, reason, out):
    assert (reward, reason) == (0.0, None)
    assert report(out)["hits"] == []


def check_scan(reward, reason, out):
    assert (reward, reason) == (0.0, None)
    r = report(out)
    me = str(r["me"])
    assert r["mem"][me] == []  # its own memory holds no test (the marker is only in the tests)
    others = {p: v for p, v in r["mem"].items() if p != me}
    assert others and all(str(v).startswith("denied") for v in others.values()), others  # judge, supervisor, init
    assert all(v == "denied" for p, v in r["fds"].items() if p != me)
    assert MARK not in json.dumps(r["argv"])


def check_fs(reward, reason, out):
    assert (reward, reason) == (0.0, None)
    r = report(out)
    assert not any(r["there"].values()), r["there"]
    assert r["hits"] == [] and r["ref"] is False
    assert all(v == [] for v in r["hidden"].values()), r["hidden"]  # the interpreter's own third-party packages
    # of root's home only the way down to the interpreter (pyenv's Python lives in /root/.pyenv)
    assert all(any(d.startswith(f"/root/{e}/") for d in container.interpreter()[1]) for e in r["root"]), r["root"]
    assert set(r["top"]) <= {
        "bin",
        "dev",
        "etc",
        "lib",
        "lib32",
        "lib64",
        "libx32",
        "opt",
        "proc",
        "root",
        "sbin",
        "tmp",
        "usr",
    }


def check_syscalls(reward, reason, out):
    assert (reward, reason) == (0.0, None)
    r = report(out)
    assert r.pop("unshare -r (command)") == "failed"
    assert r and set(r.values()) == {"Operation not permitted"}, r


def check_hit_judge(reward, reason, out):
    assert (reward, reason) == (0.0, None)  # the judge ran every test to the end
    r = report(out)
    assert r and all(v != "ok" for v in r.values()), {k: v for k, v in r.items() if v == "ok"}


def check_fan_out(reward, reason, out):
    assert (reward, reason) == (0.0, "memory_limit")


def check_flood(reward, reason, out):
    assert (reward, reason) == (0.0, "output_limit")


def check_flood_channel(reward, reason, out):
    assert (reward, reason) == (0.0, "no_verdict")  # its own channel to the judge is garbage: no answer counts


ATTACKS = {
    "frames": (FRAMES, ADD, check_frames),
    "gc": (GC, ADD, check_gc),
    "memory scan": (SCAN, ADD, check_scan),
    "fs search": (FS_SEARCH.format(places=_places(), hidden=container.hidden_site_dirs()), MBPP2, check_fs),
    "syscalls": (SYSCALLS, ADD, check_syscalls),
    "hit the judge": (HIT_JUDGE, ADD, check_hit_judge),
    "fan-out": (FAN_OUT, ADD, check_fan_out),
    "flood": (FLOOD, ADD, check_flood),
    "flood the channel": (FLOOD_CHANNEL, ADD, check_flood_channel),
}


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(1) as p:
        yield p


@pytest.mark.parametrize("name", list(ATTACKS))
def test_attack_scores_zero_sequential(pool, name):
    prog, tests, check = ATTACKS[name]
    if name == "fan-out" and not pool.cgroups:
        pytest.skip("no per-job memory cgroup here (see test_fan_out_without_cgroups)")
    check(*grade(pool, prog, tests, timeout_s=20))
    assert grade(pool, GOOD)[:2] == (1.0, None)  # and the slot still grades correctly


def test_attacks_score_zero_concurrently():
    """Every attack at once, with correct programs between them, in a pool of 3."""
    names = [n for n in ATTACKS if n != "fan-out"]
    with SandboxPool(3) as p:
        if p.cgroups:
            names.append("fan-out")
        jobs, expect = [], []
        for n in names:
            prog, tests, check = ATTACKS[n]
            jobs += [build_job(prog, tests, timeout_s=30), build_job(GOOD, ADD)]
            expect += [(n, prog, tests, check), ("good", GOOD, ADD, None)]
        results = p.run_many(jobs)
    for (n, prog, tests, check), res in zip(expect, results, strict=True):
        s = judge(res, tests, program=prog)
        if check is None:
            assert (s.reward, s.reason) == (1.0, None), n
        else:
            check(s.reward, s.reason, res.stdout.decode("utf-8", "replace"))


@pytest.mark.parametrize("workers", [1, 2])
def test_nothing_crosses_between_jobs(workers):
    """Plant kernel-held state in one job, look for it in the next ones on the same slot (one worker: every job
    on the same slot; two: planting and looking interleaved across slots)."""
    tag = "rolecast-plant-" + secrets.token_hex(4)
    shmkey = int.from_bytes(secrets.token_bytes(3), "big") + 1
    plant = PLANT.format(tag=tag, shmkey=shmkey)
    look = LOOK.format(tag=tag, shmkey=shmkey)
    with SandboxPool(workers) as p:
        jobs = [build_job(plant, ADD), build_job(look, ADD)] * 2
        results = p.run_many(jobs)
        batched = p.batching  # as root with bubblewrap: one or two containers, each judging its jobs in turn
    for i, res in enumerate(results):
        s = judge(res, ADD)
        r = report(res.stdout.decode())
        assert (s.reward, s.reason) == (0.0, None), (i, r)
        if i % 2 == 0:  # keyrings and SysV IPC are closed by the filter; the rest lands in places that are cleared
            assert r["add_key user"] == r["add_key session"] == r["shmget"] == "Operation not permitted"
            assert r["/dev/shm/" + tag] == "ok" and r["/tmp/" + tag] == "ok"
        else:
            assert {k: v for k, v in r.items() if k != "processes"} == {
                "key user": "Operation not permitted",
                "key session": "Operation not permitted",
                "shm": "Operation not permitted",
                "/dev/shm/" + tag: "absent",
                "/tmp/" + tag: "absent",
                "socket": "Connection refused",
            }
            # the supervisor (the container's init), the judge, the program (and bwrap's own init where bwrap
            # cannot run the harness as pid 1; in a batch, the program's member supervisor): no daemon of the
            # planting job
            expect = (3 if container.bwrap_has("--as-pid-1") else 4) + (1 if batched else 0)
            assert len(r["processes"]) == expect, r["processes"]


@pytest.mark.skipif(os.getuid() != 0, reason="without root the fallback for a missing cgroup is not used")
def test_fan_out_without_cgroups(monkeypatch):
    """No memory cgroup: the program gets no second process, so the per-process limit bounds the job."""
    monkeypatch.setenv("ROLECAST_SANDBOX_CGROUPS", "0")
    with SandboxPool(1) as p:
        assert not p.cgroups
        reward, reason, _ = grade(p, FAN_OUT)
        assert (reward, reason) == (0.0, "load_error: BlockingIOError")
        assert grade(p, GOOD)[:2] == (1.0, None)


def test_fan_out_within_the_cap_is_fine(pool):
    """The cap is on the job: children that stay under it together run normally."""
    prog = FAN_OUT.replace("700 << 20", "100 << 20")
    assert grade(pool, prog)[:2] == (1.0, None)


def test_flood_costs_the_trainer_no_time(pool):
    """The newline floods cost this process (the trainer) little CPU, and parsing a result channel is linear."""
    t = time.process_time()
    for prog in (FLOOD, FLOOD_CHANNEL):
        pool.run(build_job(prog, ADD))
    assert time.process_time() - t < 2.0
    job = Job(mode="asserts", program="", tests=("assert 1",) * 3)
    for data in (b"\n" * (16 << 20), b"pass 0\n" * (1 << 18)):
        out = JobResult(mode="asserts")
        t = time.process_time()
        channel.parse_results(bytearray(data), out, job)
        assert time.process_time() - t < 1.0
    assert out.verdicts == {0: True}  # the first verdict counts; the judge never repeats one


FORGE_LOAD = (
    "import os\n"
    "# the judge's first message from the program: 'r' (loaded) or 'l' + the exception's name. Send a 'name' that\n"
    "# carries verdict lines, on every descriptor that takes it (one of them is the pipe to the judge), and leave\n"
    "msg = b'lX\\npass 0\\npass 1\\ndone'\n"
    "for fd in range(3, 64):\n"
    "    try:\n"
    "        os.write(fd, len(msg).to_bytes(4, 'big') + msg)\n"
    "    except OSError:\n"
    "        pass\n"
    "os._exit(0)\n"
)


def test_load_error_name_cannot_carry_verdicts(pool):
    """The name of the exception a program raised while loading is the program's own text: written into the
    judge's `load` line as it came, its newlines forged a verdict per test (1.0 at 7906c95). The judge now writes
    only an identifier, and the host reads no verdict after a `load` or `done` line."""
    res = pool.run(build_job(FORGE_LOAD, ADD))
    assert res.verdicts == {}
    assert judge(res, ADD).reward == 0.0 and judge(res, ADD).reason == "load_error: malformed"
    assert grade(pool, GOOD)[:2] == (1.0, None)
    out = JobResult(mode="asserts")
    job = Job(mode="asserts", program="", tests=("assert 1",) * 2)
    channel.parse_results(bytearray(b"load X\npass 0\npass 1\ndone\n"), out, job)
    assert (out.verdicts, out.load_error) == ({}, "X")
    out = JobResult(mode="asserts")
    channel.parse_results(bytearray(b"pass 0\ndone\npass 1\n"), out, job)
    assert out.verdicts == {0: True}


def test_oversized_answer_stops_the_judge(pool):
    """An answer larger than the channel's cap (16 MB) is not read: the judge stops with the reason."""
    prog = "def add(a, b):\n    return 'x' * (20 << 20)\n"
    assert grade(pool, prog)[:2] == (0.0, "value_limit")


def test_result_channel_is_capped(pool):
    """A job's result channel larger than its cap stops the job (only the judge writes to it; this is the bound
    on a judge gone wrong)."""
    out = JobResult(mode="asserts")
    job = Job(mode="asserts", program="", tests=("assert 1",))
    assert channel.parse_results(bytearray(b"x" * 4096), out, job) is True
    assert out.reason == "result_limit"


def test_exit_and_quit_work_in_every_mode(pool):
    for prog, rc in (("print(1)\nexit(3)", 3), ("print(1)\nquit()", 0), ("print(1)\nexit('bye')", 1)):
        r = run_python(prog, pool=pool)
        assert (r.returncode, r.stdout) == (rc, "1\n"), r.stderr
    stdio = CodeTests.livecodebench([{"input": "2\n", "output": "4", "testtype": "stdin"}])
    assert grade(pool, "print(int(input()) * 2)\nexit()", stdio)[:2] == (1.0, None)
    functional = CodeTests.livecodebench([{"input": "3", "output": "9", "testtype": "functional"}], "square")
    prog = "class Solution:\n    def square(self, x):\n        if x < 0:\n            quit()\n        return x * x\n"
    assert grade(pool, prog, functional)[:2] == (1.0, None)
    assert grade(pool, GOOD + "if __name__ != '__main__':\n    exit()\n")[:2] == (1.0, None)
    assert grade(pool, GOOD + "exit()\n")[:2] == (0.0, "load_error: SystemExit")  # not NameError


def test_program_objects_cross_as_handles(pool):
    """MBPP's Node/Pair style: the program's own objects are built, linked and passed back to it by the tests,
    but a handle is never a value the tests can compare or assert."""
    tests = CodeTests.mbpp({
        "task_id": 0,
        "test_setup_code": "root = Node(1)\nroot.left = Node(2)\nroot.left.left = Node(3)\n",
        "test_list": ["assert depth(root) == 3", "assert depth(root.left) == 2", "assert depth(None) == 0"],
    })  # fmt: skip
    prog = (
        "class Node:\n"
        "    def __init__(self, v):\n"
        "        self.v, self.left, self.right = v, None, None\n"
        "def depth(n):\n"
        "    return 0 if n is None else 1 + max(depth(n.left), depth(n.right))\n"
    )
    assert grade(pool, prog, tests)[:2] == (1.0, None)
    cheat = "class Node:\n    def __init__(self, v):\n        pass\n    def __eq__(self, o):\n        return True\ndef depth(n):\n    return Node(0)\n"
    assert grade(pool, cheat, tests)[:2] == (0.0, "non_plain_value")


def test_builtins_and_module_functions_cross_by_name(pool):
    """MBPP 533 hands the program `int`; a test may hand it `math.sqrt`: they cross as names."""
    tests = CodeTests.mbpp({
        "task_id": 0,
        "test_list": ["assert drop((1, 2.5, 'a'), int) == [2.5, 'a']", "import math\nassert apply(math.sqrt, 16) == 4.0"],
    })  # fmt: skip
    prog = "def drop(t, tp):\n    return [x for x in t if not isinstance(x, tp)]\ndef apply(f, x):\n    return f(x)\n"
    assert grade(pool, prog, tests)[:2] == (1.0, None)


def test_seccomp_list_is_documented():
    doc = (REPO / "docs" / "sandbox.md").read_text()
    for names in sandbox.SECCOMP_DENY.values():
        for name in names:
            assert f"`{name}`" in doc, name


NON_ROOT = """
import json, sys
sys.path.insert(0, sys.argv[1])
from rolecast import sandbox
from rolecast.sandbox import Job, SandboxPool
prog = sys.argv[2]
with SandboxPool(1) as p:
    r = p.run(Job(mode="asserts", program=prog, tests=("assert add(1, 2) == 3",)))
    g = p.run(Job(mode="asserts", program="def add(a, b):\\n    return a + b\\n", tests=("assert add(1, 2) == 3",)))
print(json.dumps({"status": sandbox.sandbox_status(), "verdicts": [r.verdicts, g.verdicts], "out": r.stdout.decode()}))
"""
PROBE_OTHERS = (
    "import os, json, ctypes\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "res = {'uid': os.getuid(), 'unshare': libc.unshare(0x10000000)}\n"
    "for q in [x for x in os.listdir('/proc') if x.isdigit() and int(x) != os.getpid()]:\n"
    "    for f in ('mem', 'fd', 'environ'):\n"
    "        try:\n"
    "            (os.listdir if f == 'fd' else open)(f'/proc/{q}/{f}')\n"
    "            res[q + ' ' + f] = 'ok'\n"
    "        except OSError as e:\n"
    "            res[q + ' ' + f] = e.strerror\n"
    "def add(a, b):\n"
    "    print('REPORT ' + json.dumps(res))\n"
    "    return None\n"
)


@pytest.mark.skipif(os.getuid() != 0, reason="switches to an unprivileged user to run the sandbox without root")
def test_without_root_one_uid_is_still_a_boundary():
    """bubblewrap run by an ordinary user: a fresh user namespace, one uid for the supervisor, the judge and
    the program; the program still opens none of the others' /proc files and creates no namespace."""
    import shutil
    import subprocess
    import tempfile

    import pyseccomp

    py = "/usr/bin/python3"
    if not os.path.exists(py) or not shutil.which("setpriv"):
        pytest.skip("needs the system's python3 (world-readable) and setpriv")
    d = tempfile.mkdtemp(prefix="rolecast-nonroot-")  # in /tmp itself: the user must reach it
    try:
        # the sandbox package alone, under an empty `rolecast` (it needs nothing else of it), and pyseccomp
        shutil.copytree(os.path.dirname(sandbox.__file__), os.path.join(d, "rolecast", "sandbox"),
                        ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
        Path(d, "rolecast", "__init__.py").touch()
        shutil.copy(pyseccomp.__file__, d)
        for dp, _, fns in os.walk(d):
            os.chmod(dp, 0o755)
            for fn in fns:
                os.chmod(os.path.join(dp, fn), 0o644)
        out = subprocess.run(
            ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", py, "-c", NON_ROOT, d, PROBE_OTHERS],
            capture_output=True, text=True, timeout=120, cwd=d, env={"PATH": "/usr/bin:/bin", "HOME": d},
        )  # fmt: skip
    finally:
        shutil.rmtree(d, ignore_errors=True)
    if "ModuleNotFoundError" in out.stderr or "SyntaxError" in out.stderr:
        pytest.skip(f"the system's python3 cannot run the sandbox module: {out.stderr[-200:]}")
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["status"] == ["bwrap", ""]
    assert got["verdicts"] == [{"0": False}, {"0": True}]
    r = report(got["out"])
    assert r.pop("uid") == 65534 and r.pop("unshare") == -1
    assert r and set(r.values()) == {"Permission denied"}, r
