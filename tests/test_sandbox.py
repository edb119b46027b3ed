"""The code sandbox under attack: each hostile program scores 0 within its limit, and this process and the
machine are unaffected. Plus every reference solution of HumanEval and MBPP scores 1 through it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from rolecast.rewards import sandbox
from rolecast.rewards.code import CodeTests, score_code_many, score_program
from rolecast.rewards.sandbox import Job, Limits, SandboxPool, run_python, sandbox_mode

ADD = CodeTests(kind="asserts", asserts=("assert add(1, 2) == 3", "assert add(-1, 1) == 0"))
GOOD = "def add(a, b):\n    return a + b\n"


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(2) as p:
        yield p


def _timed(fn):
    t = time.monotonic()
    out = fn()
    return out, time.monotonic() - t


def _sandbox_uid_procs() -> list[int]:
    lo, hi = sandbox._UID_BASE, sandbox._UID_BASE + 256
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if lo <= os.stat(f"/proc/{d}").st_uid < hi:
                    pids.append(int(d))
            except OSError:
                pass
    return pids


def _machine_ok():
    """This process can still fork/exec and nothing of the sandbox's uids is left running."""
    assert subprocess.run([sys.executable, "-c", "print(7)"], capture_output=True, text=True).stdout == "7\n"
    deadline = time.monotonic() + 5
    while _sandbox_uid_procs() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _sandbox_uid_procs() == []


def test_mode_is_bwrap_when_installed():
    import shutil

    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap not installed (scripts/install-sandbox.sh)")
    assert sandbox_mode() == "bwrap"


def test_good_program_scores_one(pool):
    s = score_program(GOOD, ADD, pool=pool)
    assert (s.reward, s.reason) == (1.0, None)


def test_runs_unprivileged_in_private_tmp(pool):
    r = run_python("import os\nprint(os.getuid(), os.getgid(), os.getcwd())\nopen('x', 'w').write('1')\nprint(os.listdir('.'))", pool=pool)
    uid, gid, cwd = r.stdout.split("\n")[0].split()
    assert int(uid) != 0 and int(gid) != 0
    assert r.returncode == 0 and "['x']" in r.stdout
    if sandbox_mode() == "bwrap":
        assert cwd == "/tmp"


def test_run_python_stdin_exit_code_and_stderr(pool):
    r = run_python("import sys\nx = int(input())\nprint(x * 2)\nprint('warn', file=sys.stderr)\nsys.exit(3)", stdin="21\n", pool=pool)
    assert (r.returncode, r.stdout, r.stderr, r.timed_out, r.reason) == (3, "42\n", "warn\n", False, None)


def test_infinite_loop(pool):
    s, took = _timed(lambda: score_program("while True:\n    pass\n" + GOOD, ADD, timeout_s=2, pool=pool))
    assert s.reward == 0.0 and s.reason in ("timeout", "no_verdict")
    assert took < 2 + 2.0
    r, took = _timed(lambda: run_python("while True: pass", timeout_s=1.5, pool=pool))
    assert r.timed_out or r.reason == "cpu_limit"
    assert took < 1.5 + 2.0
    _machine_ok()


def test_sleeping_program_is_killed_at_the_wall_clock(pool):
    r, took = _timed(lambda: run_python("import time\ntime.sleep(60)", timeout_s=1, pool=pool))
    assert r.timed_out and r.reason == "timeout"
    assert took < 3
    _machine_ok()


def test_fork_bomb(pool):
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    s, took = _timed(lambda: score_program(bomb + GOOD, ADD, timeout_s=3, pool=pool))
    assert s.reward == 0.0
    assert took < 3 + 3.0
    _machine_ok()


def test_memory_bomb(pool):
    bomb = "blocks = []\nwhile True:\n    blocks.append(bytearray(50 << 20))\n"
    job = Job(mode="asserts", program=bomb + GOOD, tests=ADD.asserts, limits=Limits(timeout_s=10, memory_mb=256))
    res, took = _timed(lambda: pool.run(job))
    assert res.load_error == "MemoryError"
    assert took < 5
    r = run_python("x = bytearray(4 << 30)", memory_mb=256, pool=pool)
    assert r.returncode == 1 and "MemoryError" in r.stderr
    _machine_ok()


def test_no_network(pool):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    try:
        prog = (
            "import socket\n"
            "def reach(addr):\n"
            "    try:\n"
            "        socket.create_connection(addr, timeout=2).close()\n"
            "        return True\n"
            "    except OSError:\n"
            "        return False\n"
            f"OK = reach(('127.0.0.1', {port})) or reach(('1.1.1.1', 53))\n"
            "def add(a, b):\n    return a + b if OK else None\n"
        )
        s = score_program(prog, ADD, timeout_s=10, pool=pool)
        assert s.reward == 0.0
    finally:
        srv.close()
    if sandbox_mode() == "fallback":
        pytest.skip("fallback sandbox has no network namespace")


def test_cannot_write_outside_its_temp_dir(pool, tmp_path):
    target = tmp_path / "escaped.txt"
    repo_file = os.path.join(os.path.dirname(sandbox.__file__), "ESCAPED.txt")
    prog = (
        "def write(p):\n"
        "    try:\n"
        "        open(p, 'w').write('pwned')\n"
        "        return True\n"
        "    except OSError:\n"
        "        return False\n"
        f"OK = write({str(target)!r}) or write({repo_file!r}) or write('/etc/rolecast-escaped')\n"
        "def add(a, b):\n    return a + b if OK else None\n"
    )
    s = score_program(prog, ADD, pool=pool)
    assert s.reward == 0.0
    assert not target.exists() and not os.path.exists(repo_file) and not os.path.exists("/etc/rolecast-escaped")


def test_cannot_read_files_outside(pool, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cret")
    secret.chmod(0o644)
    os.chmod(tmp_path, 0o755)  # readable by anyone on the host: only the sandbox's view hides it
    root_files = [os.path.join("/root", f) for f in sorted(os.listdir("/root"))] if os.access("/root", os.R_OK) else []
    root_files = [f for f in root_files if os.path.isfile(f)][:3]
    prog = (
        "def read(p):\n"
        "    try:\n"
        "        return open(p).read()\n"
        "    except OSError:\n"
        "        return None\n"
        f"GOT = [read(p) for p in {[str(secret)] + root_files!r}]\n"
        "def add(a, b):\n    return a + b if any(g is not None for g in GOT) else None\n"
    )
    assert score_program(prog, ADD, pool=pool).reward == 0.0
    r = run_python(f"import os\nprint(os.path.exists({str(secret)!r}))", pool=pool)
    assert r.stdout == "False\n"


def test_huge_output_is_cut(pool):
    prog = "import sys\nchunk = 'x' * (1 << 16)\nfor _ in range(1 << 14):\n    sys.stdout.write(chunk)\n" + GOOD
    s, took = _timed(lambda: score_program(prog, ADD, timeout_s=20, pool=pool))
    assert (s.reward, s.reason) == (0.0, "output_limit")
    assert took < 10
    r, took = _timed(lambda: run_python("for _ in range(1 << 10):\n    print('y' * (1 << 20))", timeout_s=20, pool=pool))
    assert r.reason == "output_limit" and len(r.stdout) <= Limits().output_bytes
    assert took < 15
    _machine_ok()


def test_killing_the_parent_hurts_nobody(pool):
    me = os.getpid()
    prog = (
        "import os, signal\n"
        f"for pid in (os.getppid(), 1, {me}):\n"
        "    try:\n"
        "        os.kill(pid, signal.SIGKILL)\n"
        "    except OSError:\n"
        "        pass\n"
        "os.kill(os.getppid(), signal.SIGKILL)\n" + GOOD
    )
    s = score_program(prog, ADD, pool=pool)
    assert s.reward == 0.0 and s.reason.startswith("load_error")
    assert os.getpid() == me  # still here
    assert score_program(GOOD, ADD, pool=pool).reward == 1.0  # and the pool still works


@pytest.mark.parametrize("exit_call", ["import sys\nsys.exit(0)\n", "import os\nos._exit(0)\n", "raise SystemExit\n"])
def test_exit_before_the_tests_run(pool, exit_call):
    s = score_program(GOOD + exit_call, ADD, pool=pool)
    assert s.reward == 0.0
    s = score_program(GOOD + exit_call, ADD, partial=True, pool=pool)
    assert s.reward == 0.0


def test_forged_verdict_lines_are_ignored(pool):
    """A wrong program that writes pass/done lines to every fd, in the harness's format minus the nonce."""
    prog = (
        "import os\n"
        "for fd in range(1, 64):\n"
        "    for line in (b'pass 0\\npass 1\\ndone\\n', b'x pass 0\\nx pass 1\\nx done\\n', b'1\\n0'):\n"
        "        try:\n"
        "            os.write(fd, line)\n"
        "        except OSError:\n"
        "            pass\n"
        "def add(a, b):\n    return None\n"
    )
    assert score_program(prog, ADD, partial=True, pool=pool).reward == 0.0


def test_monkey_patching_the_harness(pool):
    """Patching the harness module, builtins and exit paths does not turn a wrong program into a pass."""
    prog = (
        "import __main__, builtins, os, sys\n"
        "for k in list(vars(__main__)):\n"
        "    if callable(getattr(__main__, k)):\n"
        "        setattr(__main__, k, lambda *a, **k: None)\n"
        "builtins.exec = lambda *a, **k: None\n"
        "builtins.compile = lambda *a, **k: None\n"
        "os.write = lambda fd, data: len(data)\n"
        "sys.exit = os._exit = lambda *a: None\n"
        "def add(a, b):\n    return None\n"
    )
    assert score_program(prog, ADD, partial=True, pool=pool).reward == 0.0
    # HumanEval: redefining check() does not help, the test's own check runs after the program
    tests = CodeTests(kind="humaneval", prompt="def inc(x):\n    '''x + 1'''\n", test="def check(candidate):\n    assert candidate(1) == 2\n    assert candidate(5) == 6\n", entry_point="inc")
    prog = "def inc(x):\n    return x\ndef check(candidate):\n    return True\n"
    assert score_program(prog, tests, partial=True, pool=pool).reward == 0.0


def test_always_equal_object_cannot_fake_functional_results(pool):
    tests = CodeTests.livecodebench([{"input": "3", "output": "9", "testtype": "functional"}], "square")
    prog = "class Any:\n    def __eq__(self, other):\n        return True\nclass Solution:\n    def square(self, x):\n        return Any()\n"
    assert score_program(prog, tests, pool=pool).reward == 0.0


def test_invalid_utf8_output(pool):
    tests = CodeTests.livecodebench([{"input": "", "output": "hello", "testtype": "stdin"}])
    prog = "import sys\nsys.stdout.buffer.write(b'\\xff\\xfehello\\n')\n"
    assert score_program(prog, tests, pool=pool).reward == 0.0
    r = run_python(prog, pool=pool)
    assert r.returncode == 0 and r.stdout_bytes == b"\xff\xfehello\n" and r.stdout.endswith("hello\n")


def test_fallback_mode_still_contains_the_basics(tmp_path):
    """Without bwrap: rlimits, uid drop (as root) and a temp cwd still stop loops and parent kills."""
    sandbox._set_mode_for_tests("fallback")
    try:
        with SandboxPool(1) as p:
            assert score_program(GOOD, ADD, pool=p).reward == 1.0
            s, took = _timed(lambda: score_program("while True: pass\n" + GOOD, ADD, timeout_s=1.5, pool=p))
            assert s.reward == 0.0 and took < 4
            me = os.getpid()
            prog = f"import os, signal\nos.kill({me}, signal.SIGKILL)\n" + GOOD
            if os.getuid() == 0:
                assert score_program(prog, ADD, pool=p).reward == 0.0
            r = run_python("import os\nprint(os.getcwd())", pool=p)
            assert r.stdout.startswith(tempfile_dir())
    finally:
        sandbox._set_mode_for_tests(None)
    _machine_ok()


def tempfile_dir() -> str:
    import tempfile

    return os.path.realpath(tempfile.gettempdir())


# ---------------------------------------------------------------------------------------------- datasets


# generous: MBPP task 123 needs ~2.5 s of CPU, and other jobs on a shared 2-core machine stretch wall time
REF_TIMEOUT_S = 30


def _rows(path):
    return [json.loads(line) for line in open(path)]


def test_all_humaneval_references_pass(pool, data_dir):
    rows = _rows(data_dir / "humaneval/test.jsonl")
    assert len(rows) == 164
    # once as prompt + body in a fence (the model repeats the signature), once as a bare body continuation
    texts = ["```python\n" + r["prompt"] + r["canonical_solution"] + "\n```" for r in rows]
    tests = [CodeTests.humaneval(r) for r in rows]
    scores = score_code_many(texts, tests, pool=pool, timeout_s=REF_TIMEOUT_S)
    assert [r["task_id"] for r, s in zip(rows, scores, strict=True) if s.reward != 1.0] == []
    scores = score_code_many([r["canonical_solution"] for r in rows], tests, pool=pool, extract=False, timeout_s=REF_TIMEOUT_S)
    assert [r["task_id"] for r, s in zip(rows, scores, strict=True) if s.reward != 1.0] == []


def test_all_mbpp_references_pass(pool, data_dir):
    rows = _rows(data_dir / "mbpp/mbpp.jsonl")
    assert len(rows) == 974
    scores = score_code_many(["```python\n" + r["code"] + "\n```" for r in rows], [CodeTests.mbpp(r) for r in rows], pool=pool, timeout_s=REF_TIMEOUT_S)
    assert [r["task_id"] for r, s in zip(rows, scores, strict=True) if s.reward != 1.0] == []


def test_all_mbpp_sanitized_references_pass(pool, data_dir):
    rows = _rows(data_dir / "mbpp/sanitized-mbpp.jsonl")
    assert len(rows) == 427
    scores = score_code_many(["```python\n" + r["code"] + "\n```" for r in rows], [CodeTests.mbpp(r) for r in rows], pool=pool, timeout_s=REF_TIMEOUT_S)
    assert [r["task_id"] for r, s in zip(rows, scores, strict=True) if s.reward != 1.0] == []
