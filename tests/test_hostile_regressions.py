"""Issue 33's eight findings, one test each, through the public scoring API as training calls it: what a
completion or its program says can neither crash nor stall the trainer, nor get a wrong answer paid. Each of these
failed at 879f012 (raised, stalled, paid, or left processes behind) and passes now; docs/sandbox.md, "Host-side
parsers", has the rules they pin."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from rolecast.rewards.code import CodeTests, extract_program, score_code, score_code_many
from rolecast.sandbox import Job, Limits, SandboxPool, sandbox_mode, uids

ADD = CodeTests(kind="asserts", asserts=("assert add(1, 2) == 3", "assert add(2, 2) == 4"))
GOOD = "def add(a, b):\n    return a + b\n"
MINUS_LINE = "x = " + "-" * 3000 + "1\n"  # ~50 tokens; CPython's parser gives up on it (RecursionError)
STDIO = CodeTests.livecodebench([{"input": "1\n", "output": "2\n", "testtype": "stdin"}])
FUNCTIONAL = CodeTests.livecodebench([{"input": "1", "output": "2", "testtype": "functional"}], "f")
HUMANEVAL = CodeTests(
    kind="humaneval",
    prompt="def add(a, b):\n",
    test="def check(candidate):\n    assert candidate(1, 2) == 3\n",
    entry_point="add",
)


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(2) as p:
        yield p


def test_1_a_line_the_parser_refuses_in_a_fenced_program_costs_only_its_own_score(pool):
    """879f012: RecursionError from the host's test planning (ast.parse in testcode._imports_in) ended
    score_code_many, and every other job of the batch was lost with it."""
    texts = [
        f"```python\n{GOOD}{MINUS_LINE}```",  # a correct solution carrying the line
        f"```python\n{MINUS_LINE}{GOOD}```",
        f"```python\n{GOOD}```",
        "```python\ndef add(a, b):\n    return a - b\n```",
    ]
    scores = score_code_many(texts, [ADD] * len(texts), pool=pool)
    assert [s.reward for s in scores] == [0.0, 0.0, 1.0, 0.0]
    # the program itself cannot be compiled inside the sandbox either: a load error, not a grader error
    assert scores[0].reason is not None and scores[0].reason.startswith("load_error")
    assert scores[3].reason is None  # plainly wrong


@pytest.mark.parametrize(
    "tests", [ADD, HUMANEVAL, STDIO, FUNCTIONAL], ids=["asserts", "humaneval", "stdio", "functional"]
)
def test_2_an_unfenced_program_the_parser_refuses_is_scored(pool, tests):
    """879f012: RecursionError from extract_program (bare code is parsed to drop trailing prose), every task."""
    text = "def add(a, b):\n    return " + "-" * 3000 + "1\n"
    assert extract_program(text) == text  # it does not parse: taken whole, as any unparseable bare code
    s = score_code(text, tests, pool=pool)
    assert s.reward == 0.0 and s.reason != "grader_error"


DEEP = (
    "import sys\n"
    "sys.setrecursionlimit(20000)\n"  # so that the sandbox's json.dumps can write it
    "def f(x):\n"
    "    v = []\n"
    "    for _ in range(5000):\n"
    "        v = [v]\n"
    "    return v\n"
)


@pytest.mark.parametrize("grader", ["rolecast", "rllm"])
@pytest.mark.parametrize("partial", [False, True])
def test_3_a_5000_deep_return_value_is_a_wrong_answer(pool, grader, partial):
    """879f012: RecursionError from value_matches (json.loads) under both graders, partial credit included."""
    s = score_code(f"```python\n{DEEP}```", FUNCTIONAL, pool=pool, grader=grader, partial=partial)
    assert (s.reward, s.reason) == (0.0, None)


@pytest.mark.parametrize("partial", [False, True])
@pytest.mark.parametrize("printed", ["sNaN", "-sNaN", "sNaN123", "1 sNaN"])
def test_4_a_signalling_nan_is_a_failed_test_under_the_study_grader(pool, partial, printed):
    """879f012: decimal.InvalidOperation escaped from the study's stdout comparison (only the parse was guarded);
    that is the path of configs/study/*.yaml."""
    tests = CodeTests.livecodebench(
        [{"input": "1\n", "output": "1 2\n" if " " in printed else "1\n", "testtype": "stdin"}]
    )
    s = score_code(f"```python\nprint({printed!r})\n```", tests, pool=pool, grader="rllm", partial=partial)
    assert s.reward == 0.0 and s.reason is None


@pytest.mark.parametrize(
    "text",
    ["```" + " " * 64_000, "```python" + " " * 64_000 + "x", "`" * 16_000, "```\n" + "`" * 16_000, "``` ```" * 8_000],
    ids=["fence+64k spaces", "python fence+64k spaces", "16k backticks", "fence+16k backticks", "8k fences"],
)
def test_5_extraction_is_linear(text):
    """879f012: the fence regex backtracked quadratically: 14.3 s of the trainer's CPU for a fence and 64,000
    spaces, 3.0 s for 16,000 backticks. Now a few ms (bench/hostile_cpu.py); the bound leaves room for a busy
    machine."""
    t = time.process_time()
    extract_program(text)
    assert time.process_time() - t < 0.5


PAID = [
    ("print(2001001)", "2001000"),
    ("print(500000000000000000)", "500000000500000000"),
    ("print('2001000 500000000000000000')", "2001000 500000000500000000"),
    ("print(2000999.9999)", "2001000"),
]


@pytest.mark.parametrize("program, expected", PAID)
def test_6_a_wrong_integer_is_not_paid_on_stdio(pool, program, expected):
    """879f012: the 1e-6 relative tolerance applied to integers, so 2001001 was paid for 2001000 and
    500000000000000000 for 500000000500000000 (off by 5e8)."""
    tests = CodeTests.livecodebench([{"input": "1\n", "output": expected, "testtype": "stdin"}])
    assert score_code(f"```python\n{program}\n```", tests, pool=pool).reward == 0.0


@pytest.mark.parametrize("value, expected", [("2001001", "2001000"), ("500000000000000000", "500000000500000000")])
def test_6_a_wrong_integer_is_not_paid_on_functional(pool, value, expected):
    tests = CodeTests.livecodebench([{"input": "1", "output": expected, "testtype": "functional"}], "f")
    assert score_code(f"```python\ndef f(x):\n    return {value}\n```", tests, pool=pool).reward == 0.0


def test_6_integers_written_otherwise_and_close_floats_are_still_paid(pool):
    tests = CodeTests.livecodebench([{"input": "1\n", "output": "2001000 0.333333333", "testtype": "stdin"}])
    assert score_code("```python\nprint('2001000.0 0.3333333')\n```", tests, pool=pool).reward == 1.0


PROBE = (
    "import os, json\n"
    "def limits(pid):\n"
    "    rows = {}\n"
    "    for line in open(f'/proc/{pid}/limits'):\n"
    "        for name in ('Max cpu time', 'Max address space', 'Max core file size'):\n"
    "            if line.startswith(name):\n"
    "                rows[name] = line[len(name):].split()[0]\n"
    "    return rows\n"
    "def add(a, b):\n"
    "    me = os.getpid()\n"
    "    judge = [p for p in os.listdir('/proc') if p.isdigit() and int(p) not in (1, me)][0]\n"
    "    report = {who: {'adj': int(open(f'/proc/{pid}/oom_score_adj').read()), **limits(pid)}\n"
    "              for who, pid in (('program', me), ('judge', judge), ('supervisor', 1))}\n"
    "    print('REPORT ' + json.dumps(report))\n"
    "    return a + b\n"
)


@pytest.mark.skipif(sandbox_mode() != "bwrap" or os.getuid() != 0, reason="reads the container's processes as root")
@pytest.mark.parametrize("cgroups", ["1", "0"])
def test_7_the_judge_and_the_supervisor_have_limits_of_their_own(monkeypatch, cgroups):
    """879f012: without a memory cgroup the judge had no limits of its own (a 16 MB answer of empty deques grew it
    to 1.19 GB), and with one the OOM killer once chose the supervisor before the program. Now each trusted
    process sets its own address space, CPU and core limits, and oom_score_adj orders program > judge >
    supervisor."""
    monkeypatch.setenv("ROLECAST_SANDBOX_CGROUPS", cgroups)
    with SandboxPool(1) as p:
        res = p.run(
            Job(mode="asserts", program=PROBE, tests=ADD.asserts[:1], limits=Limits(timeout_s=5, memory_mb=256))
        )
    line = [x for x in res.stdout.decode().splitlines() if x.startswith("REPORT ")][-1]
    r = json.loads(line[len("REPORT ") :])
    assert res.verdicts == {0: True}
    assert r["program"]["adj"] == 1000 and r["program"]["Max address space"] == str(256 << 20)
    assert r["program"]["adj"] > r["judge"]["adj"] > r["supervisor"]["adj"] >= 0
    for who in ("judge", "supervisor"):
        assert r[who]["Max address space"] == str(512 << 20), r  # the program's, at least 512 MB
        assert r[who]["Max core file size"] == "0"
        assert r[who]["Max cpu time"] != "unlimited"


@pytest.mark.skipif(sandbox_mode() != "bwrap" or os.getuid() != 0, reason="watches the job's uids as root")
def test_7_an_answer_that_inflates_in_the_judge_is_bounded_without_a_cgroup(monkeypatch):
    """The attack itself: an answer of 2,500,000 references to one empty deque (13 MB on the channel) decodes into
    2,500,000 deques in the judge (~1.5 GB). Without a cgroup the judge's own address-space limit (the program's,
    600 MB here) stops it within a few seconds; at 879f012 it grew until the job's time ran out (0.6-1.2 GB in
    10 s, as fast as the judge decodes)."""
    monkeypatch.setenv("ROLECAST_SANDBOX_CGROUPS", "0")
    prog = "from collections import deque\nd = deque()\ndef add(a, b):\n    return [d] * 2_500_000\n"
    peak: dict[int, int] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_watch_job_rss, args=(peak, stop))
    watcher.start()
    try:
        with SandboxPool(1) as p:
            res = p.run(
                Job(mode="asserts", program=prog, tests=ADD.asserts[:1], limits=Limits(timeout_s=30, memory_mb=600))
            )
    finally:
        stop.set()
        watcher.join()
    assert res.verdicts.get(0) is not True and res.reason != "timeout"  # the judge stopped: out of memory
    judge_mb = max((mb for uid, mb in peak.items() if uid % 2 == 1), default=0)  # judges have the odd uids
    assert 0 < judge_mb <= 600, peak


def _watch_job_rss(peak: dict[int, int], stop: threading.Event) -> None:
    """Peak resident MB per uid of this process's sandbox uid block, until `stop`."""
    while not stop.is_set():
        for _pid, uid, status in _sandbox_processes():
            for line in status.splitlines():
                if line.startswith("VmHWM:"):
                    peak[uid] = max(peak.get(uid, 0), int(line.split()[1]) // 1024)
        time.sleep(0.02)


def _sandbox_processes() -> list[tuple[int, int, str]]:
    """(pid, uid, /proc status) of every process running as one of this process's sandbox uids."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/status") as f:
                status = f.read()
        except OSError:
            continue
        uid = int(next(x for x in status.splitlines() if x.startswith("Uid:")).split()[1])
        if uids.UID_BASE <= uid < uids.UID_BASE + uids.UID_BLOCK:
            out.append((int(d), uid, status))
    return out


@pytest.mark.skipif(sandbox_mode() != "bwrap" or os.getuid() != 0, reason="watches the job's uids as root")
def test_8_scoring_returns_when_every_process_of_its_job_is_gone():
    """879f012: on a timeout, a program that had filled its /tmp with empty files was still running or exiting
    after the call returned, in 3 of 4 runs (killing bubblewrap first left its container to die later)."""
    flood = "import os\ni = 0\nwhile True:\n    open(f'/tmp/{i}', 'w').close()\n    i += 1\n"
    with SandboxPool(1) as p:
        for _ in range(3):
            res = p.run(Job(mode="asserts", program=flood, tests=ADD.asserts[:1], limits=Limits(timeout_s=2)))
            left = [(pid, status.split("State:")[1].split("\n")[0].strip()) for pid, _, status in _sandbox_processes()]
            assert res.reason == "timeout"
            assert left == []
