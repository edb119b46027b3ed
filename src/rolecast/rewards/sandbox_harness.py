"""The trusted harness that runs inside every sandbox (see rolecast.rewards.sandbox for the whole design).

The host runs this file's source as a script: ``python -I -S -c <source> <job_fd> <result_fd>``. It reads its
job (a marshal dict) from ``job_fd``, and forks one child per program run (asserts mode) or per test case
(stdio/functional modes); only a child runs untrusted code, after limits and the uid drop.

Rules for this file: stdlib only, and only modules that are cheap to import. Not `signal`/`json`/`base64`/
`types`/`typing` at start-up: their imports (enum, re, ...) would double the interpreter's start-up time,
which is most of the cost of a sandbox run. Everything the asserts child calls after the program has run is
bound to a local first, because the program may replace any builtin, module attribute or `__main__` global.

Assert checks (asserts mode): the host compiles each test with every call, comparison and assert guarded
(see ``sandbox._guard_code``): ``__rc_call`` requires what a call returns to be a plain built-in value unless
the callee is one of the genuine builtins / tracked modules' functions or a class constructing its own
instance; ``__rc_cmp`` compares only plain values; ``__rc_truth`` asserts only plain values. "Plain" is an
exact built-in type (None, bool, int, float, complex, str, bytes, range; re's Match/Pattern when the program
imports re) or a list/tuple/set/frozenset/dict (and the C types deque/OrderedDict/defaultdict, whose methods
cannot be patched) of plain values, checked deeply; a dict subclass (Counter) is read as the dict it stores. So an object that claims equality with anything, a subclass of int/str/list with its own comparisons,
or a patched builtin or module function cannot turn a wrong answer into a pass. The test namespace takes
builtins from a copy made before the program ran, the prelude's and the pinned (trusted) source's names
from before the program, and restores the tracked modules after every call.
"""

import marshal
import os
import resource
import select
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_SIGKILL, _SIGXCPU = 9, 24


def _main() -> None:
    job_fd, res_fd = int(sys.argv[1]), int(sys.argv[2])
    chunks = []
    while True:
        b = os.read(job_fd, 1 << 20)
        if not b:
            break
        chunks.append(b)
    os.close(job_fd)
    job: dict[str, Any] = marshal.loads(b"".join(chunks))
    del chunks
    _write = os.write
    _exit = os._exit

    def send(obj: "Any") -> None:
        data = marshal.dumps(obj)
        data = b"%d\n" % len(data) + data
        while data:
            n = _write(res_fd, data)
            data = data[n:]

    sys.path.extend(job["sys_path"])
    mode = job["mode"]
    if mode == "functional":
        import json  # before forking, so each case's child does not pay for it
    for m in job.get("preimport", ()):
        # the modules the tests use (snapshotted before the program runs), and in the fallback with an
        # interpreter the dropped uid cannot read: what the program imports, loaded while we still can
        try:
            __import__(m)
        except Exception:
            pass
    lim = job["limits"]

    def enter_child(keep_fds: set[int], own_group: bool) -> None:
        """Runs first in every child: limits, privileges, cwd; nothing untrusted has run yet."""
        if own_group:  # per-case children: the harness kills the group after each case
            os.setpgid(0, 0)
        lo = 3
        for fd in sorted(k for k in keep_fds if k >= 3):
            os.closerange(lo, fd)
            lo = fd + 1
        os.closerange(lo, 1024)
        cpu = int(lim["cpu_s"])
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_AS, (lim["as_bytes"], lim["as_bytes"]))
        resource.setrlimit(resource.RLIMIT_FSIZE, (lim["fsize_bytes"], lim["fsize_bytes"]))
        resource.setrlimit(resource.RLIMIT_NOFILE, (lim["nofile"], lim["nofile"]))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if lim.get("nproc"):
            resource.setrlimit(resource.RLIMIT_NPROC, (lim["nproc"], lim["nproc"]))
        uid = job.get("uid")
        if uid is not None and os.getuid() == 0:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            if os.getuid() == 0:
                _exit(125)
        os.chdir(job["cwd"])
        os.environ.clear()
        os.environ.update(job["env"])

    def run_main(src: str, name: str) -> int:
        """Execute a program as a script; returns its exit status (flushing what it printed)."""
        status = 0
        try:
            code = compile(src, "<program>", "exec")
            exec(code, {"__name__": name, "__builtins__": __builtins__})
        except SystemExit as e:
            c = e.code
            status = c if isinstance(c, int) else (0 if c is None else 1)
        except BaseException:
            import traceback

            try:
                traceback.print_exc()
            except BaseException:
                pass
            status = 1
        for s in (sys.stdout, sys.stderr):
            try:
                s.flush()
            except BaseException:
                pass
        return status & 0xFF

    def wait_child(pid: int, deadline_s: float, pipes: dict[str, int]) -> tuple[dict[str, bytearray], int, str | None]:
        """Collect the child's pipes (name -> fd) up to the output cap, within the deadline."""
        import time

        cap = lim["output_bytes"]
        got = {k: bytearray() for k in pipes}
        open_fds = {fd: k for k, fd in pipes.items()}
        pidfd = os.pidfd_open(pid)
        status = None
        reason = None
        end = time.monotonic() + deadline_s
        while open_fds or status is None:
            left = end - time.monotonic()
            if left <= 0:
                reason = "timeout"
                break
            watch = list(open_fds) + ([pidfd] if status is None else [])
            r, _, _ = select.select(watch, [], [], left)
            for fd in r:
                if fd == pidfd:
                    _, st = os.waitpid(pid, 0)
                    status = st
                    try:
                        os.killpg(pid, _SIGKILL)  # leftovers holding the pipes open
                    except OSError:
                        pass
                    continue
                b = os.read(fd, 65536)
                k = open_fds[fd]
                if not b:
                    del open_fds[fd]
                    continue
                got[k] += b
                if len(got[k]) > cap:
                    reason = "output_limit"
                    del got[k][cap:]
            if reason:
                break
        try:
            os.killpg(pid, _SIGKILL)
        except OSError:
            pass
        if status is None:
            try:
                os.kill(pid, _SIGKILL)
            except OSError:
                pass
            _, status = os.waitpid(pid, 0)
        for fd in pipes.values():
            try:
                os.close(fd)
            except OSError:
                pass
        os.close(pidfd)
        return got, status, reason

    def decode_status(st: int) -> tuple[int, str | None]:
        if os.WIFEXITED(st):
            return os.WEXITSTATUS(st), None
        sig = os.WTERMSIG(st)
        return -sig, ("cpu_limit" if sig == _SIGXCPU else None)

    if mode == "asserts":
        import builtins
        from _collections import OrderedDict, defaultdict, deque

        pid = os.fork()
        if pid == 0:
            try:
                enter_child({0, 1, 2, res_fd}, False)
                _run_asserts(job, res_fd, builtins, (deque, OrderedDict, defaultdict))
            finally:
                _exit(0)
        # stdout/stderr go straight to the host, which caps them; the host also owns the deadline
        _, st = os.waitpid(pid, 0)
        rc, why = decode_status(st)
        data = f"exit {rc} {why}\n".encode()
        while data:
            data = data[_write(res_fd, data) :]
        return

    # stdio / functional: one child per case; the parent only shuttles bytes
    for i, case in enumerate(job["cases"]):
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        val_r, val_w = os.pipe()
        in_fd = os.memfd_create("stdin")
        data = case["input"].encode()
        while data:
            data = data[os.write(in_fd, data) :]
        os.lseek(in_fd, 0, 0)
        pid = os.fork()
        if pid == 0:
            try:
                os.dup2(in_fd, 0)
                os.dup2(out_w, 1)
                os.dup2(err_w, 2)
                val_fd = val_w
                if val_fd < 3:
                    val_fd = os.dup(val_fd)
                enter_child({0, 1, 2, val_fd}, True)
                prog = job["program"]
                if mode == "stdio":
                    _exit(run_main(prog, "__main__"))
                fn = job["fn_name"]
                args = [json.loads(line) for line in case["input"].split("\n") if line.strip()]
                del job, case
                g: dict[str, Any] = {"__name__": "__solution__", "__builtins__": __builtins__}
                exec(compile(prog, "<program>", "exec"), g)
                sol = g.get("Solution")
                f = getattr(sol(), fn) if sol is not None and hasattr(sol, fn) else g[fn]
                res = f(*args)
                data = json.dumps(res).encode()
                while data:
                    data = data[_write(val_fd, data) :]
                for s in (sys.stdout, sys.stderr):
                    try:
                        s.flush()
                    except BaseException:
                        pass
                _exit(0)
            except SystemExit as e:
                _exit(e.code if isinstance(e.code, int) else 1)
            except BaseException:
                import traceback

                try:
                    traceback.print_exc()
                    sys.stderr.flush()
                except BaseException:
                    pass
                _exit(1)
            finally:
                _exit(1)
        for fd in (out_w, err_w, val_w, in_fd):
            os.close(fd)
        got, st, reason = wait_child(pid, job["case_timeout_s"], {"stdout": out_r, "stderr": err_r, "value": val_r})
        rc, why = decode_status(st)
        send({
            "case": i,
            "rc": rc,
            "reason": reason or why,
            "stdout": bytes(got["stdout"]),
            "stderr": bytes(got["stderr"][-4096:]),
            "value": bytes(got["value"]).decode("utf-8", "replace") if mode == "functional" else None,
        })  # fmt: skip
    send({"done": True})


def _run_asserts(job: "dict[str, Any]", res_fd: int, builtins: "Any", c_types: tuple[type, ...]) -> None:
    """The asserts child, after the uid drop: prelude, program, setup, then each test with its verdict.

    Verdicts go to the result pipe tagged with a per-run nonce the program never sees. Nothing here may look
    anything up in a namespace the program can change once the program has started: all of it is bound now.
    """
    _exec, _compile, _dict, _enumerate, _type, _id, _isinstance, _zip = (
        exec,
        compile,
        dict,
        enumerate,
        type,
        id,
        isinstance,
        zip,
    )
    _BaseException, _str, _write, _exit, _set = BaseException, str, os.write, os._exit, set
    _tuple, _issubclass = tuple, issubclass
    _dict_items = dict.items
    sys_modules = sys.modules
    nonce = job["nonce"]
    prog = job["program"]
    prelude, pinned_src, setup, tests, bind = job["prelude"], job["pinned"], job["setup"], job["tests"], job["bind"]
    provided = job["provided"]  # None: the program may shadow builtins the tests call (no list of its names)
    tracked_names = job["tracked"]
    del job

    def rep(msg: str) -> None:
        data = (nonce + " " + msg + "\n").encode()
        while data:
            data = data[_write(res_fd, data) :]

    # ---- trusted state, captured before any untrusted code runs
    bdict = _dict(builtins.__dict__)  # the tests' builtins: a private copy the program cannot patch
    g: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    try:
        _exec(_compile(prelude, "<prelude>", "exec"), g)
    except _BaseException as e:
        rep("load " + _type(e).__name__)
        _exit(0)
    pins = {k: v for k, v in g.items() if k not in ("__name__", "__builtins__")}
    if pinned_src:  # e.g. a HumanEval prompt: its helpers, not the program's redefinitions, serve the tests
        gp: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
        try:
            _exec(_compile(pinned_src, "<pinned>", "exec"), gp)
            pins.update(
                (k, v) for k, v in gp.items() if k not in ("__name__", "__builtins__") and k not in (provided or ())
            )
        except _BaseException:
            pass
    tracked = [(n, sys_modules[n], _dict(sys_modules[n].__dict__)) for n in tracked_names if n in sys_modules]
    trusted_ids = {_id(v) for v in bdict.values()}
    for _, _, snap in tracked:
        trusted_ids.update(_id(v) for v in snap.values())
    for v in pins.values():
        trusted_ids.add(_id(v))
    leaf_ids = {_id(t) for t in (type(None), bool, int, float, complex, str, bytes, range)}
    re_mod = sys_modules.get("re")  # imported before the program when it imports re: genuine Match/Pattern
    if re_mod is not None:  # C types that cannot be subclassed or patched (MBPP's `assert re_based(s)`)
        leaf_ids.update((_id(re_mod.Match), _id(re_mod.Pattern)))
    seq_ids = {_id(t) for t in (list, tuple, set, frozenset, c_types[0])}
    map_ids = {_id(t) for t in (dict, c_types[1], c_types[2])}
    shadowable = [k for k in bdict if not k.startswith("__")]
    missing = object()
    list_id, tuple_id = _id(list), _id(tuple)

    class NonPlain(Exception):
        """A guarded value was not a plain built-in value."""

    def plain(v: object) -> int:
        """0: not plain data; 1: plain; 2: plain once dict subclasses (Counter) are read as the dicts they
        store (their own methods may lie, so comparisons must see :func:`canon`'s copy)."""
        stack: list[Any] = [v]
        seen: set[int] = _set()
        out = 1
        while stack:
            x = stack.pop()
            tp = _type(x)
            t = _id(tp)
            if t in leaf_ids:
                continue
            i = _id(x)
            if i in seen:
                continue
            seen.add(i)
            if t in seq_ids:
                stack.extend(x)
            elif t in map_ids or _issubclass(tp, dict):
                if t not in map_ids:
                    out = 2
                for k, w in _dict_items(x):
                    stack.append(k)
                    stack.append(w)
            else:
                return 0
        return out

    def canon(x: "Any") -> "Any":
        """A copy of plain data with every dict subclass replaced by a dict of what it stores."""
        t = _id(_type(x))
        if t in leaf_ids or t in seq_ids and t != list_id and t != tuple_id:
            return x  # sets hold no dicts; deques of Counters are not worth a case
        if t == list_id:
            return [canon(e) for e in x]
        if t == tuple_id:
            return _tuple(canon(e) for e in x)
        return {k: canon(w) for k, w in _dict_items(x)}

    def restore() -> None:
        """Undo what the program did to the modules the tests use (attributes and sys.modules entries)."""
        for name, mod, snap in tracked:
            if sys_modules.get(name) is not mod:
                sys_modules[name] = mod
            d = mod.__dict__
            for k, v in _dict_items(snap):
                if d.get(k, missing) is not v:
                    d[k] = v

    def rc_call(f: "Any", *args: "Any", **kwargs: "Any") -> "Any":
        r = f(*args, **kwargs)
        restore()
        if _id(f) in trusted_ids or plain(r):
            return r
        if _isinstance(f, _type) and _id(_type(r)) == _id(f):
            return r  # a class the program defines, constructing its own instance (MBPP's Pair, Node)
        raise NonPlain("call")

    cmp_ops = (
        lambda a, b: a == b, lambda a, b: a != b, lambda a, b: a < b, lambda a, b: a <= b,
        lambda a, b: a > b, lambda a, b: a >= b, lambda a, b: a is b, lambda a, b: a is not b,
        lambda a, b: a in b, lambda a, b: a not in b,
    )  # fmt: skip

    def checked(v: object, where: str) -> object:
        p = plain(v)
        if not p:
            raise NonPlain(where)
        return canon(v) if p == 2 else v

    def rc_cmp(ops: tuple[int, ...], left: object, *rights: object) -> bool:
        left = checked(left, "compare")
        for op, right in _zip(ops, rights):
            right = checked(right, "compare")
            if not cmp_ops[op](left, right):
                return False
            left = right
        return True

    def rc_truth(v: object) -> object:
        return checked(v, "assert")

    # ---- the program
    try:
        _exec(_compile(prog, "<program>", "exec"), g)
    except _BaseException as e:
        rep("load " + _type(e).__name__)
        _exit(0)
    restore()
    ns = _dict(g)
    for k in shadowable:
        if k in ns and (provided is None or k not in provided):
            del ns[k]  # a program's `abs` or `sorted` must not answer for the tests' own calls
    ns.update(pins)
    for name, mod, _ in tracked:
        if name in ns:
            ns[name] = mod
    ns["__builtins__"] = bdict
    ns["__rc_call"], ns["__rc_cmp"], ns["__rc_truth"] = rc_call, rc_cmp, rc_truth
    try:
        if bind:
            ns[bind[0]] = g[bind[1]]
        _exec(setup if _type(setup) is not _str else _compile(setup, "<test setup>", "exec"), ns)
    except _BaseException as e:
        rep("load " + _type(e).__name__)
        _exit(0)
    for i, t in _enumerate(tests):
        try:
            _exec(t if _type(t) is not _str else _compile(t, f"<test {i}>", "exec"), ns)
            verdict = f"pass {i}"
        except NonPlain:
            verdict = f"fail {i} non_plain"
        except _BaseException:
            verdict = f"fail {i}"
        rep(verdict)
    rep("done")
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except _BaseException:
            pass


if __name__ == "__main__":
    _main()
    os._exit(0)  # skip interpreter teardown: a few ms per run
