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

from rolecast import sandbox
from rolecast.rewards.code import CodeTests, build_job, score_code_many, score_program
from rolecast.sandbox import Job, Limits, SandboxPool, container, run_python, sandbox_mode, uids

ADD = CodeTests(kind="asserts", asserts=("assert add(1, 2) == 3", "assert add(-1, 1) == 0"))
GOOD = "def add(a, b):\n    return a + b\n"


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(2) as p:
        yield p


def rr(score):
    """(reward, reason): a test expecting 0 checks why, so a sandbox that crashed cannot pass it."""
    return score.reward, score.reason


def _sandbox_uid_procs() -> list[int]:
    lo, hi = uids.UID_BASE, uids.UID_BASE + uids.UID_BLOCK
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
    """This process can still fork/exec and nothing of the sandbox's uids is left running (a generous wait: the
    processes are gone when the run returns, but a loaded machine may be slow to show it)."""
    assert subprocess.run([sys.executable, "-c", "print(7)"], capture_output=True, text=True).stdout == "7\n"
    deadline = time.monotonic() + 30
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
    r = run_python(
        "import os\nprint(os.getuid(), os.getgid(), os.getcwd())\nopen('x', 'w').write('1')\nprint(sorted(os.listdir('.')))",
        pool=pool,
    )
    uid, gid, cwd = r.stdout.split("\n")[0].split()
    assert int(uid) != 0 and int(gid) != 0
    # a private, empty temp dir: only the file it wrote, and (bwrap, with the interpreter installed under
    # /tmp) the read-only path down to it
    extra = []
    if sandbox_mode() == "bwrap":
        assert cwd == "/tmp"
        extra = [d.split("/")[2] for d in container.interpreter()[1] if d.startswith("/tmp/")]
    assert r.returncode == 0 and r.stdout.split("\n")[1] == str(sorted({"x", *extra}))


def test_run_python_stdin_exit_code_and_stderr(pool):
    r = run_python(
        "import sys\nx = int(input())\nprint(x * 2)\nprint('warn', file=sys.stderr)\nsys.exit(3)",
        stdin="21\n",
        pool=pool,
    )
    assert (r.returncode, r.stdout, r.stderr, r.timed_out, r.reason) == (3, "42\n", "warn\n", False, None)


# The tests below check what stopped a run (its reason: the deadline, a limit) and that nothing of it is left
# running, not how long it took: wall time on a loaded machine says little.


def test_infinite_loop(pool):
    s = score_program("while True:\n    pass\n" + GOOD, ADD, timeout_s=2, pool=pool)
    assert s.reward == 0.0 and s.reason == "timeout"  # the job's deadline ended it
    r = run_python("while True: pass", timeout_s=1.5, pool=pool)
    assert r.timed_out or r.reason == "cpu_limit"  # the case's deadline, or its CPU limit (= the timeout)
    _machine_ok()


def test_sleeping_program_is_killed_at_the_wall_clock(pool):
    r = run_python("import time\ntime.sleep(60)", timeout_s=1, pool=pool)
    # a wall-clock deadline fired (a sleep uses no CPU: the CPU limit cannot), and nothing of the run is left
    assert r.timed_out and r.reason == "timeout"
    _machine_ok()


def test_fork_bomb(pool):
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    s = score_program(bomb + GOOD, ADD, timeout_s=3, pool=pool)
    assert (s.reward, s.reason) == (0.0, "timeout")  # forks fail at RLIMIT_NPROC; the loop runs out the clock
    _machine_ok()


def test_memory_bomb(pool):
    bomb = "blocks = []\nwhile True:\n    blocks.append(bytearray(50 << 20))\n"
    job = Job(mode="asserts", program=bomb + GOOD, tests=ADD.asserts, limits=Limits(timeout_s=10, memory_mb=256))
    res = pool.run(job)
    assert res.load_error == "MemoryError"  # its memory limit stopped it (a job that runs out the clock has none)
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
            f"OK = reach(('127.0.0.1', {port}))  # loopback only: never dial off this machine\n"
            "def add(a, b):\n    return a + b if OK else None\n"
        )
        s = score_program(prog, ADD, timeout_s=10, pool=pool)
        if pool.mode == "fallback":  # no network namespace there (docs/sandbox.md): the listener is reachable
            assert (s.reward, s.reason) == (1.0, None)
        else:
            assert (s.reward, s.reason) == (0.0, None)  # ran to the end: the listener was simply unreachable
    finally:
        srv.close()


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
    assert (s.reward, s.reason) == (0.0, None)
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
    assert rr(score_program(prog, ADD, pool=pool)) == (0.0, None)
    r = run_python(f"import os\nprint(os.path.exists({str(secret)!r}))", pool=pool)
    assert r.stdout == "False\n"


def test_huge_output_is_cut(pool):
    prog = "import sys\nchunk = 'x' * (1 << 16)\nfor _ in range(1 << 14):\n    sys.stdout.write(chunk)\n" + GOOD
    s = score_program(prog, ADD, timeout_s=20, pool=pool)
    assert (s.reward, s.reason) == (0.0, "output_limit")  # cut at the cap, not at the deadline
    r = run_python("for _ in range(1 << 10):\n    print('y' * (1 << 20))", timeout_s=20, pool=pool)
    assert r.reason == "output_limit" and len(r.stdout) <= Limits().output_bytes
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


@pytest.mark.parametrize("exit_call, reason", [
    ("import sys\nsys.exit(0)\n", "load_error: SystemExit"),  # caught: the program did not load
    ("import os\nos._exit(0)\n", "no_verdict"),  # the process is gone before any test ran
    ("raise SystemExit\n", "load_error: SystemExit"),
])  # fmt: skip
def test_exit_before_the_tests_run(pool, exit_call, reason):
    s = score_program(GOOD + exit_call, ADD, pool=pool)
    assert (s.reward, s.reason) == (0.0, reason)
    s = score_program(GOOD + exit_call, ADD, partial=True, pool=pool)
    assert (s.reward, s.reason) == (0.0, reason)


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
    # the program's garbage on its own channel to the judge ends that channel: no verdicts at all
    assert rr(score_program(prog, ADD, partial=True, pool=pool)) == (0.0, "no_verdict")


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
    assert rr(score_program(prog, ADD, partial=True, pool=pool)) == (0.0, None)
    # HumanEval: redefining check() does not help, the test's own check runs after the program
    tests = CodeTests(
        kind="humaneval",
        prompt="def inc(x):\n    '''x + 1'''\n",
        test="def check(candidate):\n    assert candidate(1) == 2\n    assert candidate(5) == 6\n",
        entry_point="inc",
    )
    prog = "def inc(x):\n    return x\ndef check(candidate):\n    return True\n"
    assert rr(score_program(prog, tests, partial=True, pool=pool)) == (0.0, None)


def test_always_equal_object_cannot_fake_functional_results(pool):
    tests = CodeTests.livecodebench([{"input": "3", "output": "9", "testtype": "functional"}], "square")
    prog = "class Any:\n    def __eq__(self, other):\n        return True\nclass Solution:\n    def square(self, x):\n        return Any()\n"
    # not JSON-serialisable: the case's child dies with a traceback (rc 1), nothing to compare
    res = pool.run(build_job(prog, tests))
    assert [(c.rc, c.value) for c in res.cases] == [(1, "")] and b"TypeError" in res.cases[0].stderr
    assert rr(score_program(prog, tests, pool=pool)) == (0.0, None)


def test_invalid_utf8_output(pool):
    tests = CodeTests.livecodebench([{"input": "", "output": "hello", "testtype": "stdin"}])
    prog = "import sys\nsys.stdout.buffer.write(b'\\xff\\xfehello\\n')\n"
    assert rr(score_program(prog, tests, pool=pool)) == (0.0, None)
    r = run_python(prog, pool=pool)
    assert r.returncode == 0 and r.stdout_bytes == b"\xff\xfehello\n" and r.stdout.endswith("hello\n")


def test_fallback_mode_still_contains_the_basics(tmp_path):
    """Without bwrap: rlimits, uid drop (as root) and a temp cwd still stop loops and parent kills."""
    with SandboxPool(1, mode="fallback") as p:
        assert rr(score_program(GOOD, ADD, pool=p)) == (1.0, None)
        s = score_program("while True: pass\n" + GOOD, ADD, timeout_s=1.5, pool=p)
        assert rr(s) == (0.0, "timeout")
        me = os.getpid()
        prog = f"import os, signal\nos.kill({me}, signal.SIGKILL)\n" + GOOD
        if os.getuid() == 0:
            assert rr(score_program(prog, ADD, pool=p)) == (0.0, "load_error: PermissionError")
        r = run_python("import os\nprint(os.getcwd())", pool=p)
        assert r.stdout.startswith(tempfile_dir())
    _machine_ok()


def tempfile_dir() -> str:
    import tempfile

    return os.path.realpath(tempfile.gettempdir())


# ---------------------------------------------------------------------------------------------- where it is installed

_IN_SANDBOX = """
import json, sys
from rolecast.sandbox import Job, SandboxPool, run_python, sandbox_status

venv, parent = sys.argv[1], sys.argv[2]
prog = (
    "import os, sys, rc_probe_mod\\n"
    "print(rc_probe_mod.VALUE)\\n"
    f"print(os.path.exists({parent!r}), os.path.exists({venv!r}))\\n"
    "print(os.getcwd(), sorted(os.listdir('/tmp')) == sorted(os.listdir('.')))\\n"
)
with SandboxPool(1) as pool:
    r = run_python(prog, pool=pool)
    a = pool.run(Job(mode="asserts", program="def add(a, b):\\n    return a + b\\n", tests=("assert add(1, 2) == 3",)))
print(json.dumps({"status": sandbox_status(), "stdout": r.stdout, "stderr": r.stderr, "verdicts": a.verdicts}))
"""


def _venv_in(parent) -> str:
    """A real virtual environment (symlinks to this interpreter's base) with a module of its own."""
    venv = parent / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "rc_probe_mod.py").write_text("VALUE = 42\n")
    return str(venv)


def _home_parent():
    home = os.path.realpath(os.path.expanduser("~"))
    if not home.startswith(("/root/", "/home/")) and home != "/root":
        pytest.skip(f"home directory {home} is not under /root or /home")
    import tempfile

    return tempfile.mkdtemp(prefix="rolecast-sbx-test-", dir=home)


@pytest.mark.parametrize("where", ["tmp", "home"])
def test_bwrap_with_an_environment_under_hidden_dirs(tmp_path, where):
    """Project and venv in /tmp/... or ~/...: bubblewrap runs the interpreter, and an allowed package of the venv
    (ROLECAST_SANDBOX_PACKAGES) imports; the venv itself, the directory around it and the host's /tmp are not
    in the sandbox's view."""
    import shutil

    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap not installed (scripts/install-sandbox.sh)")
    from pathlib import Path

    parent = tmp_path if where == "tmp" else Path(_home_parent())
    try:
        os.chmod(parent, 0o755)
        (parent / "secret.txt").write_text("s3cret")
        venv = _venv_in(parent)
        src = os.path.dirname(os.path.dirname(os.path.dirname(sandbox.__file__)))
        out = subprocess.run(
            [os.path.join(venv, "bin", "python"), "-c", _IN_SANDBOX, venv, str(parent)],
            capture_output=True, text=True, timeout=120,
            # the project's own dependencies from this environment (rolecast imports them), after the test venv's
            env={**os.environ, "PYTHONPATH": os.pathsep.join([src, *container.site_dirs()]),
                 "ROLECAST_SANDBOX_PACKAGES": "rc_probe_mod"},
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        got = json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        if where == "home":
            shutil.rmtree(parent, ignore_errors=True)
    assert got["status"] == ["bwrap", ""]
    lines = got["stdout"].splitlines()
    assert lines[0] == "42", got
    assert lines[1] == "False False", got
    assert lines[2] == "/tmp True", got
    assert got["verdicts"] == {"0": True}


# ---------------------------------------------------------------------------------------------- the fallback


def _live_procs_of(uids: range) -> list[int]:
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if os.stat(f"/proc/{d}").st_uid in uids:
                    with open(f"/proc/{d}/stat", "rb") as f:
                        if f.read().rpartition(b")")[2].split()[0] != b"Z":
                            pids.append(int(d))
            except (OSError, IndexError):
                pass
    return pids


def test_fallback_private_home_and_tmpdir_are_removed():
    prog = (
        "import os, tempfile\n"
        "print(os.environ['HOME'] == os.environ['TMPDIR'] == os.getcwd() == tempfile.gettempdir())\n"
        "open(os.path.join(os.environ['HOME'], 'x'), 'w').write('1')\n"
        "print(os.getcwd())\n"
    )
    with SandboxPool(1, mode="fallback") as p:
        r = run_python(prog, pool=p)
    assert r.returncode == 0, r.stderr
    same, private = r.stdout.split()
    assert same == "True" and os.path.basename(private).startswith("rolecast-sbx-")
    assert not os.path.exists(private)


@pytest.mark.skipif(os.getuid() != 0, reason="the uid drop (and so cleaning up by uid) needs root")
def test_fallback_leaves_no_files_and_no_processes():
    """A program that plants files in the host's shared temp dirs and leaves a daemon (double fork, new session,
    every descriptor closed) scores normally, and afterwards neither is left."""
    import secrets

    tag = "rolecast-leftover-" + secrets.token_hex(4)
    planted = [f"/tmp/{tag}", f"/var/tmp/{tag}", f"/dev/shm/{tag}", f"/tmp/{tag}-dir"]
    prog = (
        "import os, time\n"
        f"for p in {planted[:3]!r}:\n"
        "    try:\n"
        "        open(p, 'w').write('x')\n"
        "    except OSError:\n"
        "        pass\n"
        f"os.mkdir({planted[3]!r})\n"
        f"open({planted[3] + '/f'!r}, 'w').write('x')\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        os.closerange(0, 1024)\n"
        "        time.sleep(120)\n"
        "    os._exit(0)\n"
        "time.sleep(0.2)\n" + GOOD
    )
    with SandboxPool(1, mode="fallback") as p:
        assert rr(score_program(prog, ADD, pool=p)) == (1.0, None)
        ours = range(uids.UID_BASE, uids.UID_BASE + uids.UID_BLOCK)
        assert _live_procs_of(ours) == []  # right away: no grace period for the daemon
    assert [f for f in planted if os.path.exists(f)] == []


@pytest.mark.skipif(os.getuid() != 0, reason="the uid drop (and so an unreadable interpreter) needs root")
def test_fallback_imports_the_stdlib_from_an_unreadable_interpreter(tmp_path):
    """An interpreter under a 0700 directory: after the uid drop the program can read none of its files, yet
    an honest program's standard-library imports work (the harness loads them before the drop)."""
    import shutil
    import sysconfig

    locked = tmp_path / "locked"
    (locked / "bin").mkdir(parents=True)
    (locked / "lib").mkdir()
    os.chmod(locked, 0o700)
    real = os.path.realpath(sys.executable)
    shutil.copy2(real, locked / "bin" / "python3")
    stdlib = sysconfig.get_paths()["stdlib"]
    (locked / "lib" / os.path.basename(stdlib)).symlink_to(stdlib)
    for so in os.listdir(os.path.join(sys.base_prefix, "lib")):
        if so.startswith("libpython"):
            (locked / "lib" / so).symlink_to(os.path.join(sys.base_prefix, "lib", so))
    py = str(locked / "bin" / "python3")
    probe = subprocess.run([py, "-c", "import sys; print(sys.prefix)"], capture_output=True, text=True)
    if probe.returncode != 0 or probe.stdout.strip() != str(locked):
        pytest.skip(f"could not build an interpreter under a 0700 directory: {probe.stderr[-200:]}")
    script = (
        "import json, sys\n"
        "from rolecast.rewards.code import CodeTests, score_program\n"
        "from rolecast.sandbox import SandboxPool\n"
        "tests = CodeTests(kind='asserts', asserts=('assert add(1, 2) == 3',))\n"
        "prog = 'import signal, subprocess, threading, fractions, heapq\\ndef add(a, b):\\n    return a + b\\n'\n"
        "leak = 'import os\\nos.listdir(sys.prefix)\\ndef add(a, b):\\n    return a + b\\n'\n"
        "with SandboxPool(1, mode='fallback') as p:\n"
        "    s, t = score_program(prog, tests, pool=p), score_program('import sys\\n' + leak, tests, pool=p)\n"
        "print(json.dumps([s.reward, s.reason, t.reward, t.reason]))\n"
    )
    src = os.path.dirname(os.path.dirname(os.path.dirname(sandbox.__file__)))
    out = subprocess.run(
        [py, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([src, *sys.path[1:]])},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    # honest imports work; the interpreter's own directory stays unreadable for the program
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [1.0, None, 0.0, "load_error: PermissionError"]


def test_code_task_without_bubblewrap_stops_before_the_model_loads(tmp_path, monkeypatch, capsys):
    """No bubblewrap: a run whose task executes code fails at once with how to fix it, unless the config opts in."""
    from rolecast.cli import main
    from rolecast.config import ConfigError
    from rolecast.config.load import load_config
    from rolecast.core.errors import EnvironmentProblem
    from rolecast.runtime import SandboxUnavailable, build_runtime

    monkeypatch.setenv("ROLECAST_SANDBOX", "fallback")
    # a directory that looks like a model (config validation accepts it) but whose files are not readable: loading
    # it fails, so reaching the load shows that the sandbox check let the run through
    empty_model = tmp_path / "model"
    empty_model.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (empty_model / name).write_text("not a model file")
    over = {"task.name": "testbed_code", "model.path": str(empty_model)}
    with pytest.raises(SandboxUnavailable, match="runs model-written code") as e:
        build_runtime(load_config(None, over))
    assert isinstance(e.value, EnvironmentProblem)  # this machine's problem (a UserError: one message, exit 2)
    assert "scripts/install-sandbox.sh" in str(e.value) and "sandbox.allow_unisolated" in str(e.value)
    # opted in: past the check, into loading the (empty) model
    with pytest.raises(Exception) as e2:
        build_runtime(load_config(None, {**over, "sandbox.allow_unisolated": True}))
    assert not isinstance(e2.value, SandboxUnavailable)
    # a task that runs no code is not affected
    with pytest.raises(Exception) as e3:
        build_runtime(load_config(None, {**over, "task.name": "testbed"}))
    assert not isinstance(e3.value, SandboxUnavailable)
    # the command line: one message, no traceback, exit code 2
    rc = main(["eval", "--task", "testbed_code", "--model", str(empty_model), "--out", str(tmp_path / "e.jsonl")])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("rolecast: error: task 'testbed_code' runs model-written code")
    assert "Traceback" not in err and len(err.strip().splitlines()) == 2
    with pytest.raises(ConfigError, match="allow_unisolated"):
        load_config(None, {"sandbox.allow_unisolated": "maybe"})


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
    scores = score_code_many(
        [r["canonical_solution"] for r in rows], tests, pool=pool, extract=False, timeout_s=REF_TIMEOUT_S
    )
    assert [r["task_id"] for r, s in zip(rows, scores, strict=True) if s.reward != 1.0] == []


def test_all_mbpp_references_pass(pool, data_dir):
    rows = _rows(data_dir / "mbpp/mbpp.jsonl")
    assert len(rows) == 974
    scores = score_code_many(
        ["```python\n" + r["code"] + "\n```" for r in rows],
        [CodeTests.mbpp(r) for r in rows],
        pool=pool,
        timeout_s=REF_TIMEOUT_S,
    )
    assert [r["task_id"] for r, s in zip(rows, scores, strict=True) if s.reward != 1.0] == []


def test_all_mbpp_sanitized_references_pass(pool, data_dir):
    rows = _rows(data_dir / "mbpp/sanitized-mbpp.jsonl")
    assert len(rows) == 427
    scores = score_code_many(
        ["```python\n" + r["code"] + "\n```" for r in rows],
        [CodeTests.mbpp(r) for r in rows],
        pool=pool,
        timeout_s=REF_TIMEOUT_S,
    )
    assert [r["task_id"] for r, s in zip(rows, scores, strict=True) if s.reward != 1.0] == []
