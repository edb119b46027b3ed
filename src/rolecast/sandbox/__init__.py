"""The code sandbox: runs untrusted Python programs isolated from the machine, many at once. Overview for users,
threat model, the seccomp list and what is out of scope: docs/sandbox.md.

The interface is this module: a :class:`Job` (a program, its tests or inputs, its :class:`Limits`) run by a
:class:`SandboxPool` (or :func:`default_pool`) gives a :class:`JobResult`; :func:`run_python` runs one plain
script; :func:`sandbox_status` says which isolation this machine gives. The rest is internal:

==============  ===========================================================================================
``jobs``        Job, Limits and the results
``probe``       which isolation this machine gives (bubblewrap or the fallback), probed once
``container``   the container's file-system view and bubblewrap's command line
``guard``       the seccomp filter (SECCOMP_DENY)
``testcode``    assert-style tests compiled with their checks guarded; names and modules they use
``execute``     one job: the payloads, starting the container, feeding it, cleaning up
``channel``     reading a run's outputs and result channel (capped, linear time)
``uids``        fresh uids per run (as root); cleaning up after a fallback run's uids
``cgroups``     the per-slot memory cgroups
``batch``       several jobs one after another in one container (bwrap as root): the host's side
``pool``        the pool of slots (run_many batches where it may); run_python
``harness``     the trusted program that runs inside every sandbox (stdlib only, sent as a code object)
==============  ===========================================================================================

The package imports nothing of rolecast outside itself (and only the standard library, plus libseccomp's
bindings when present), so it also runs copied on its own (``test_without_root_one_uid_is_still_a_boundary``).

Isolation, strongest available first:

``bwrap`` (bubblewrap found and working; ``scripts/install-sandbox.sh`` installs it)
    Each run is a fresh bubblewrap container: new pid/net/ipc/uts namespaces (no network, only its own
    processes visible, everything dies with the container) and a root holding only ``/usr``, the
    interpreter's installation prefix, the allowed packages (``ALLOWED_PACKAGES``, bound at ``SITE_DIR``),
    a fresh ``/proc`` and ``/dev``, and private size-capped ``/tmp`` (the cwd) and ``/dev/shm``: no project
    tree, no data, no home. A seccomp filter (``SECCOMP_DENY``, built with libseccomp) denies namespace
    creation, mounts, ptrace and other processes' memory, keyrings and more. As root no user namespace is
    used (its root would be the host's root, owner of root's files): the harness drops to two fresh
    unprivileged uids per run (the program's and the judge's) from a block of this process, and bwrap keeps
    only CAP_SETUID/SETGID/KILL for that. Not as root: a fresh user namespace per run (``--unshare-user``,
    ``--disable-userns``). Where the machine lets us (root, cgroup v1 or a delegated v2), each run also runs
    in its pool slot's memory cgroup (one run at a time), capping all its processes together; without one,
    the program may not start a second process, so its per-process limit bounds the run. RLIMIT_NPROC on the
    run's own uid caps its processes.
``fallback`` (no usable bwrap: a logged warning; training refuses it unless ``sandbox.allow_unisolated``)
    rlimits + the same uid drops (when root) + a private directory as cwd, HOME and TMPDIR, removed
    afterwards. As root it also kills every process of the run's uids after each run (daemons that left the
    process group included) and removes what they left at the top of /tmp, /var/tmp and /dev/shm. When the
    uids cannot read the interpreter (Python under /root), the harness imports what the program and tests
    import before dropping privileges. No network or filesystem isolation beyond what an unprivileged uid
    cannot touch.

Inside, a small trusted harness (``harness.py``, sent as a code object) reads what the program may know from
one pipe, and:

- asserts (MBPP, HumanEval): forks the **program's process** before anything about the tests has been read;
  it runs the program and then answers requests on a pair of pipes (look up a name, call a function, get or
  set an attribute) with plain built-in data or an opaque handle. Then it forks the **judge**, which reads
  the tests from its own pipe, runs them in its own interpreter and uid with the program's names as proxies,
  and alone writes the verdicts to the result channel. The judge compiles nothing of the program's and
  decodes its answers with a small parser of its own (never marshal or pickle); calls, comparisons and
  asserts in the tests are guarded (``testcode.guard_code``) so a handle is never compared or asserted
  (``non_plain``). Frame walking, the garbage collector or a memory scan in the program find only the
  program's own process.
- stdio/functional: forks one child per case; the harness (which never runs untrusted code) sends each
  case's captured stdout / JSON return value; the host compares them with the expected outputs, which never
  enter the sandbox.

Batches (bwrap as root; ``SandboxPool(batch=...)``, default 32): ``run_many`` judges several jobs one after another
in one container, its start-up paid once. The supervisor reads only the batch's head; per program it forks a member
supervisor that reads that program's payload and runs it as a single job runs, capturing its output and verdicts
into one record; then it kills and reaps every other process, has the program's uid clear /tmp and /dev/shm and
checks them back to their start, and waits for the host (which reads the slot's OOM count) before the next. A
program of a batch can read, leave or forge nothing of another's (docs/sandbox.md, "Batches").

The supervisor then ends and reaps what is left inside the container. Outputs are read at most
``output_bytes`` per stream (then the run is killed, reason ``output_limit``), the result channel is parsed
in linear time and capped (``result_limit``), and a wall-clock deadline kills the whole container (its init
first); a run returns only when every process of it is gone. The supervisor and the judge set their own
address-space, CPU and core limits, and the OOM killer's order is the program's processes first, the judge,
then the supervisor (``oom_score_adj`` 1000, 700, 300).

Measured overhead (bench/sandbox_throughput.py): the "Code sandbox throughput" section of docs/benchmarks.md.
"""

from rolecast.sandbox.container import ALLOWED_PACKAGES, SITE_DIR
from rolecast.sandbox.guard import SECCOMP_DENY
from rolecast.sandbox.jobs import CaseResult, Job, JobResult, Limits, RunResult
from rolecast.sandbox.pool import SandboxPool, default_pool, run_python
from rolecast.sandbox.probe import UNISOLATED_HELP, run_bare, sandbox_mode, sandbox_status
from rolecast.sandbox.testcode import parse_quietly

__all__ = [
    "ALLOWED_PACKAGES",
    "SECCOMP_DENY",
    "SITE_DIR",
    "UNISOLATED_HELP",
    "CaseResult",
    "Job",
    "JobResult",
    "Limits",
    "RunResult",
    "SandboxPool",
    "default_pool",
    "parse_quietly",
    "run_bare",
    "run_python",
    "sandbox_mode",
    "sandbox_status",
]
