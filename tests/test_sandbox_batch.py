"""Batches: several programs judged one after another in one container (issue 36; docs/sandbox.md, "Batches").

Each program must be as alone as in a container of its own: it cannot read another program of the batch (its
text, its tests, what it printed), leave it anything (files, processes, sockets, IPC objects, a full /tmp), forge its
verdicts, or cost it anything by timing out, running out of memory or flooding its output. The programs report
what they found (`REPORT <json>`, from inside the tested function), and the tests check the reports as well as the
scores: a sandbox that merely crashed an attack would not show the attack's own account of its failure. Programs
also report their container (the start time of its init, /proc/1/stat) where the test depends on which one ran them.
"""

from __future__ import annotations

import json
import marshal
import os
import secrets

import pytest

from rolecast.rewards.code import CodeTests, build_job, judge
from rolecast.sandbox import SandboxPool, batch, sandbox_mode

pytestmark = pytest.mark.skipif(
    sandbox_mode() != "bwrap" or os.getuid() != 0, reason="batches run with bubblewrap as root"
)

GOOD = "def add(a, b):\n    return a + b\n"
WRONG = "def add(a, b):\n    return None\n"


def add_tests(mark: str) -> CodeTests:
    """add()'s tests, carrying `mark` (in the tests only: a program that finds it has read them)."""
    return CodeTests(kind="asserts", asserts=(f"assert add(1, 2) == 3, {mark!r}", f"assert add(-1, 1) == 0, {mark!r}"))


def report(res) -> dict:
    line = [x for x in res.stdout.decode("utf-8", "replace").splitlines() if x.startswith("REPORT ")][-1]
    return json.loads(line[len("REPORT ") :])


def scores(results, tests) -> list[tuple[float, str | None]]:
    return [(s.reward, s.reason) for s in (judge(r, t) for r, t in zip(results, tests, strict=True))]


CONTAINER = "def container():\n    return open('/proc/1/stat').read().split(')')[1].split()[19]  # init's start time\n"


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(1, batch=32) as p:
        assert p.batching
        yield p


def test_batches_group_by_container_and_spread_over_workers():
    from rolecast.sandbox import Job, Limits

    small, big = Limits(), Limits(memory_mb=2048)
    jobs = [Job(mode="asserts", program="", limits=small if k % 3 else big) for k in range(10)]
    # 4 big jobs: 2 workers, 2 a batch; 6 small ones: at most 3 a batch
    assert batch.batches(jobs, workers=2, size=3) == [[0, 3], [6, 9], [1, 2, 4], [5, 7, 8]]
    assert batch.batches(jobs[:4], workers=8, size=32) == [[0], [3], [1], [2]]
    assert batch.batches(jobs, workers=1, size=32) == [[0, 3, 6, 9], [1, 2, 4, 5, 7, 8]]


WHO = (
    CONTAINER + "import os, json\n"
    "def add(a, b):\n"
    "    others = sorted(int(p) for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid())\n"
    "    print('REPORT ' + json.dumps({'container': container(), 'uid': os.getuid(), 'others': others}))\n"
    "    return a + b\n"
)


def test_one_container_one_program_at_a_time_each_its_own_uid(pool):
    mark = "m-" + secrets.token_hex(8)
    results = pool.run_many([build_job(WHO, add_tests(mark)) for _ in range(4)])
    reps = [report(r) for r in results]
    assert scores(results, [add_tests(mark)] * 4) == [(1.0, None)] * 4
    assert len({r["container"] for r in reps}) == 1  # all four in one container
    assert len({r["uid"] for r in reps}) == 4 and all(r["uid"] >= 1 << 24 for r in reps)  # fresh uids each
    # besides itself: the supervisor (pid 1), its member supervisor, its judge; nothing of the programs before
    assert [len(r["others"]) for r in reps] == [3] * 4


# reads everything it can reach for the marks of the programs before and after it: its own memory (forked from a
# member supervisor, forked from the supervisor), and every other process's memory, environment and descriptors
SCAN = (
    CONTAINER + "import os, re, json, ctypes\n"
    "PAT = re.compile(rb'm-[0-9a-f]{{16}}')\n"
    "MINE = {mine!r}\n"
    "def scan_memory(pid):\n"
    "    own = pid == os.getpid()\n"
    "    hits = set()\n"
    "    try:\n"
    "        maps = open(f'/proc/{{pid}}/maps').read().splitlines()\n"
    "        mem = None if own else open(f'/proc/{{pid}}/mem', 'rb', 0)\n"
    "    except OSError as e:\n"
    "        return 'denied ' + type(e).__name__\n"
    "    for line in maps:\n"
    "        addr, perms = line.split()[:2]\n"
    "        path = line.split()[5] if len(line.split()) > 5 else ''\n"
    "        lo, hi = (int(x, 16) for x in addr.split('-'))\n"
    "        if 'r' not in perms or hi - lo > 256 << 20 or (own and path not in ('', '[heap]', '[stack]')):\n"
    "            continue\n"
    "        try:\n"
    "            if own:  # read directly: its /proc/self/mem is root's after the uid drop\n"
    "                data = ctypes.string_at(lo, hi - lo)\n"
    "            else:\n"
    "                mem.seek(lo)\n"
    "                data = mem.read(hi - lo)\n"
    "            hits.update(m.decode() for m in PAT.findall(data))\n"
    "        except (OSError, ValueError, OverflowError):\n"
    "            pass\n"
    "    return sorted(hits - {{MINE}}) + (['own mark'] if own and MINE in hits else [])\n"
    "def probe(pid):\n"
    "    out = {{}}\n"
    "    for f in ('environ', 'cmdline'):\n"
    "        try:\n"
    "            out[f] = sorted(set(PAT.findall(open(f'/proc/{{pid}}/{{f}}', 'rb').read())) - {{MINE.encode()}})\n"
    "            out[f] = [x.decode() for x in out[f]]\n"
    "        except OSError as e:\n"
    "            out[f] = type(e).__name__\n"
    "    try:\n"
    "        out['fd'] = len(os.listdir(f'/proc/{{pid}}/fd'))\n"
    "    except OSError as e:\n"
    "        out['fd'] = type(e).__name__\n"
    "    return out\n"
    "print({mine!r})  # what it printed: the next program's to look for\n"
    "def add(a, b):\n"
    "    me = os.getpid()\n"
    "    found = {{'own': scan_memory(me), 'container': container()}}\n"
    "    for p in [x for x in os.listdir('/proc') if x.isdigit() and int(x) != me]:\n"
    "        found[p] = {{'memory': scan_memory(int(p)), **probe(int(p))}}\n"
    "    print('REPORT ' + json.dumps(found))\n"
    "    return None\n"
)


def test_a_program_finds_nothing_of_the_others_in_its_batch(pool):
    """Three programs, each with its own mark in its text, what it printed and its tests: none finds another's,
    in its own memory or any other process's it can reach (the supervisor never read a program, the member
    supervisor and the judge are another uid's)."""
    marks = ["m-" + secrets.token_hex(8) for _ in range(3)]
    jobs = [build_job(SCAN.format(mine=m), add_tests(m)) for m in marks]
    results = pool.run_many(jobs)
    assert scores(results, [add_tests(m) for m in marks]) == [(0.0, None)] * 3
    reps = [report(r) for r in results]
    assert len({r["container"] for r in reps}) == 1
    for r in reps:
        # its own mark (the scan works), nothing of another program's, not even in freed memory
        assert r.pop("own") == ["own mark"], r
        r.pop("container")
        assert len(r) == 3, r  # the supervisor, the member supervisor, the judge
        for pid, got in r.items():
            assert got["memory"] == "denied PermissionError", (pid, got)
            assert got["environ"] == "PermissionError" and got["fd"] == "PermissionError", (pid, got)
            assert got["cmdline"] in ([], "PermissionError"), (pid, got)


def forged_records() -> bytes:
    """What the host reads from a batch: frames of records. These claim the next program passed."""
    out = b""
    for rec in (
        {"i": 1, "reason": None, "verdicts": b"pass 0\npass 1\ndone\n", "stdout": b"", "stderr": b""},
        {"end": 0, "clean": True, "overran": False},
        {"end": 1, "clean": True, "overran": False},
    ):
        data = marshal.dumps(rec)
        out += b"%d\n" % len(data) + data
    return out


FORGE = (
    "import os, sys, json\n"
    "FAKE = {fake!r}\n"
    "tried = {{}}\n"
    "sys.stdout.buffer.write(FAKE + b'\\n'); sys.stdout.flush()\n"
    "sys.stderr.buffer.write(FAKE); sys.stderr.flush()\n"
    "for name, pid in (('supervisor', 1), ('member', os.getppid())):  # their result channel\n"
    "    try:\n"
    "        tried[name] = os.listdir(f'/proc/{{pid}}/fd')\n"
    "    except OSError as e:\n"
    "        tried[name] = type(e).__name__\n"
    "print('REPORT ' + json.dumps(tried))\n"
    "sys.stdout.flush()\n"
    "for fd in range(3, 256):  # every descriptor it has (its pipe to its judge among them) takes them too\n"
    "    try:\n"
    "        os.write(fd, FAKE)\n"
    "    except OSError:\n"
    "        pass\n"
    "def add(a, b):\n"
    "    return None\n"
)


def test_a_program_cannot_forge_the_next_programs_verdicts(pool):
    """Frames claiming that the next program passed, written to stdout, stderr and every descriptor the program
    has: they are the program's own output, inside its own record (or break its own judge's channel); the next
    program, a wrong one, still fails."""
    forge = FORGE.format(fake=forged_records())
    tests = [add_tests("m-" + secrets.token_hex(8)) for _ in range(3)]
    results = pool.run_many([build_job(forge, tests[0]), build_job(WRONG, tests[1]), build_job(GOOD, tests[2])])
    # the frames on its pipe to its own judge were no answer to loading: its judge stopped, no verdicts
    assert scores(results, tests) == [(0.0, "no_verdict"), (0.0, None), (1.0, None)]
    r = report(results[0])
    assert r == {"supervisor": "PermissionError", "member": "PermissionError"}
    assert results[1].verdicts == {0: False, 1: False}
    assert forged_records() in results[0].stdout and forged_records() in results[0].stderr


LEAVE = (
    CONTAINER + "import os, socket, json, time, ctypes\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "left = {{}}\n"
    "for d in ('/tmp', '/dev/shm'):\n"
    "    open(f'{{d}}/{tag}', 'w').write('secret')\n"
    "    os.makedirs(f'{{d}}/{tag}-dir/deep/er')\n"
    "    open(f'{{d}}/{tag}-dir/deep/er/f', 'w').write('x')\n"
    "    os.chmod(f'{{d}}/{tag}-dir/deep', 0)\n"
    "    os.chmod(f'{{d}}/{tag}-dir', 0)\n"
    "    os.mkfifo(f'{{d}}/{tag}-fifo')\n"
    "try:  # fill /tmp to its cap (in files under the 16 MB a file may have): the next program must have all of it\n"
    "    for k in range(8):\n"
    "        with open(f'/tmp/{tag}-fill{{k}}', 'wb') as f:\n"
    "            for _ in range(15):\n"
    "                f.write(b'x' * (1 << 20))\n"
    "except OSError as e:\n"
    "    left['fill'] = e.strerror\n"
    "left['shmget'] = 'ok' if libc.shmget({key}, 4096, 0o1666) >= 0 else os.strerror(ctypes.get_errno())\n"
    "left['mq_open'] = 'ok' if libc.mq_open(b'/{tag}', 0o102, 0o666, None) >= 0 else os.strerror(ctypes.get_errno())\n"
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
    "    left['container'] = container()\n"
    "    print('REPORT ' + json.dumps(left))\n"
    "    return None\n"
)
FIND = (
    CONTAINER + "import os, socket, json, ctypes\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "found = {{'tmp': os.listdir('/tmp'), 'shm': os.listdir('/dev/shm')}}\n"
    "found['shmget'] = 'found' if libc.shmget({key}, 0, 0) >= 0 else os.strerror(ctypes.get_errno())\n"
    "found['mq_open'] = 'found' if libc.mq_open(b'/{tag}', 0) >= 0 else os.strerror(ctypes.get_errno())\n"
    "s = socket.socket(socket.AF_UNIX)\n"
    "try:\n"
    "    s.connect('\\0{tag}')\n"
    "    found['socket'] = 'found'\n"
    "except OSError as e:\n"
    "    found['socket'] = e.strerror\n"
    "try:  # all of /tmp is free again: 60 of its 64 MB, in files of 15\n"
    "    for k in range(4):\n"
    "        with open(f'/tmp/room{{k}}', 'wb') as f:\n"
    "            f.write(b'x' * (15 << 20))\n"
    "    found['room'] = 'ok'\n"
    "except OSError as e:\n"
    "    found['room'] = e.strerror\n"
    "for k in range(4):\n"
    "    if os.path.exists(f'/tmp/room{{k}}'):\n"
    "        os.unlink(f'/tmp/room{{k}}')\n"
    "def add(a, b):\n"
    "    found['others'] = len([p for p in os.listdir('/proc') if p.isdigit()]) - 1\n"
    "    found['container'] = container()\n"
    "    print('REPORT ' + json.dumps(found))\n"
    "    return a + b if found['tmp'] or found['shm'] or 'found' in found.values() else None\n"
)


def test_a_program_leaves_nothing_for_the_next(pool):
    """Files (a full /tmp, a fifo, directories it made unreadable), IPC objects, a daemon with an abstract socket:
    the next program of the batch finds none of them and has all of /tmp."""
    tag = "rolecast-leave-" + secrets.token_hex(4)
    key = int.from_bytes(secrets.token_bytes(3), "big") + 1
    tests = add_tests("m-" + secrets.token_hex(8))
    leave, find = LEAVE.format(tag=tag, key=key), FIND.format(tag=tag, key=key)
    results = pool.run_many([build_job(p, tests) for p in (leave, find, leave, find)])
    assert scores(results, [tests] * 4) == [(0.0, None)] * 4
    reps = [report(r) for r in results]
    assert len({r.pop("container") for r in reps}) == 1  # one container: the supervisor restored /tmp and /dev/shm
    for r in reps[0::2]:
        assert r == {"fill": "No space left on device", "shmget": "Operation not permitted",
                     "mq_open": "Operation not permitted"}  # fmt: skip
    for r in reps[1::2]:
        assert r == {"tmp": [], "shm": [], "shmget": "Operation not permitted", "mq_open": "Operation not permitted",
                     "socket": "Connection refused", "room": "ok", "others": 3}  # fmt: skip


SLEEP = "import time\ndef add(a, b):\n    time.sleep(60)\n"
FLOOD = "import sys\ndef add(a, b):\n    sys.stdout.write('x' * (4 << 20))\n    return a + b\n"
FAN_OUT = (  # three children holding 700 MB each under the job's 1 GB: paid only if all three held it
    "import os, time\n"
    "kids = []\n"
    "for i in range(3):\n"
    "    r, w = os.pipe()\n"
    "    if os.fork() == 0:\n"
    "        block = bytearray(b'x') * (700 << 20)\n"
    "        os.write(w, b'k')\n"
    "        time.sleep(30)\n"
    "        os._exit(0)\n"
    "    os.close(w)\n"
    "    kids.append(r)\n"
    "held = sum(os.read(r, 1) == b'k' for r in kids)\n"
    "def add(a, b):\n"
    "    return a + b if held == 3 else None\n"
)
CRASH = "import os\ndef add(a, b):\n    os._exit(0)\n"
DAEMON = (
    "import os, sys, time\n"
    "if os.fork() == 0:  # holds the program's stdout open after it is done\n"
    "    time.sleep(60)\n"
    "def add(a, b):\n"
    "    return a + b\n"
)


def test_what_one_program_does_costs_only_itself(pool):
    """A timeout, the job's memory cap, an output flood, an early exit, a daemon holding stdout: each program gets
    its own reason, and the correct programs between them score 1, in one container."""
    tests = add_tests("m-" + secrets.token_hex(8))
    progs = [(GOOD, 1.0, None), (SLEEP, 0.0, "timeout"), (GOOD, 1.0, None), (FLOOD, 0.0, "output_limit")]
    progs += [(GOOD, 1.0, None), (CRASH, 0.0, "no_verdict"), (GOOD, 1.0, None)]
    if pool.cgroups:  # without a memory cgroup the program gets no second process (test_fan_out_without_cgroups)
        progs += [(DAEMON, 1.0, None), (FAN_OUT, 0.0, "memory_limit")]
    progs += [(GOOD, 1.0, None)]
    results = pool.run_many([build_job(p, tests, timeout_s=3 if p == SLEEP else 20) for p, _, _ in progs])
    assert scores(results, [tests] * len(progs)) == [(r, why) for _, r, why in progs]
    assert len(results[3].stdout) <= 1 << 20


def test_scratch_not_restored_in_time_ends_the_batch(monkeypatch, pool):
    """Where /tmp cannot be restored in time, the batch ends after that program and the rest run in a new
    container (here: no time at all to remove 2,000 files)."""
    monkeypatch.setattr(batch, "_CLEANUP_S", 0.0)
    tests = add_tests("m-" + secrets.token_hex(8))
    litter = (
        CONTAINER + "import json\nfor i in range(2000):\n    open(f'/tmp/f{i}', 'w').close()\n"
        "def add(a, b):\n    print('REPORT ' + json.dumps({'container': container()}))\n    return a + b\n"
    )
    clean = WHO
    results = pool.run_many([build_job(p, tests) for p in (clean, litter, clean, clean)])
    assert scores(results, [tests] * 4) == [(1.0, None)] * 4
    c = [report(r)["container"] for r in results]
    assert c[0] == c[1] != c[2] == c[3]
    assert report(results[2])["others"] == report(results[0])["others"]


def test_stdio_programs_in_a_batch_stop_early_and_partial_runs_all():
    """stdio: without partial credit, the first failing case ends the program's cases (the host tells its member
    supervisor); with it, every case runs. Neighbours are graded as alone."""
    cases = [{"input": f"{k}\n", "output": str(2 * k), "testtype": "stdin"} for k in range(6)]
    tests = CodeTests.livecodebench(cases)
    slow_wrong = "import time\nx = int(input())\ntime.sleep(0.5)\nprint(x * 3)\n"
    right = "print(int(input()) * 2)\n"
    with SandboxPool(1, batch=32) as p:
        # slow_wrong passes case 0 (0 * 3 == 0) and fails the rest
        for partial, n_cases in ((False, (2, 5)), (True, (6, 6))):
            jobs = [build_job(s, tests, partial=partial) for s in (right, slow_wrong, right)]
            results = p.run_many(jobs)
            got = [judge(r, tests, partial=partial) for r in results]
            assert [(s.reward, s.reason) for s in got] == [(1.0, None), (1 / 6 if partial else 0.0, None), (1.0, None)]
            # the stop reaches the member between cases: one or two more may start before it does (not all four)
            assert n_cases[0] <= len(results[1].cases) <= n_cases[1]
            assert len(results[0].cases) == len(results[2].cases) == 6


MIXED = [
    ("asserts", GOOD),
    ("asserts", WRONG),
    ("asserts", "def add(a, b):\n    raise ValueError\n"),
    ("asserts", "import sys\nsys.exit(3)\n"),
    ("asserts", "def add(a, b):\n    return [a + b][0]\n"),
    ("stdio", "a, b = map(int, input().split())\nprint(a + b)\n"),
    ("stdio", "print('nope')\n"),
    ("functional", "class Solution:\n    def add(self, a, b):\n        return a + b\n"),
    ("functional", "def add(a, b):\n    return a - b\n"),
]


def test_a_batch_grades_as_one_container_per_program():
    """The same programs, graded in batches and one container each: the same scores, reasons and verdicts."""
    tests = {
        "asserts": add_tests("m-" + secrets.token_hex(8)),
        "stdio": CodeTests.livecodebench([{"input": "1 2\n", "output": "3", "testtype": "stdin"}] * 2),
        "functional": CodeTests.livecodebench(
            [{"input": "1\n2", "output": "3", "testtype": "functional"}] * 2, fn_name="add"
        ),
    }
    jobs = [build_job(prog, tests[kind]) for kind, prog in MIXED]
    got = {}
    for size in (1, 32):
        with SandboxPool(2, batch=size) as p:
            assert p.batching == (size > 1)
            results = p.run_many(jobs)
        got[size] = [
            (judge(r, tests[kind]).reward, judge(r, tests[kind]).reason, r.verdicts, len(r.cases))
            for (kind, _), r in zip(MIXED, results, strict=True)
        ]
    assert got[32] == got[1]
    assert [g[0] for g in got[1]] == [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0]
