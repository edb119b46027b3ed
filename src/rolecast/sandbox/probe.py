"""Which isolation this machine gives: ``bwrap`` when bubblewrap can start our interpreter here, else
``fallback`` (and why), probed once per process."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import threading

from rolecast.sandbox.container import SANDBOX_ENV, bwrap_cmd, interpreter
from rolecast.sandbox.guard import seccomp_filter
from rolecast.sandbox.jobs import Limits

log = logging.getLogger(__name__)

_PROBED: tuple[str, str] | None = None  # (mode, why the fallback) of this machine, probed once
_MODE_LOCK = threading.Lock()

UNISOLATED_HELP = (
    "install bubblewrap (bash scripts/install-sandbox.sh, or apt-get install bubblewrap), or allow the weaker "
    "fallback with `sandbox: {allow_unisolated: true}` in the config (--set sandbox.allow_unisolated=true)"
)


def run_bare(code: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """`python -I -S -c code` in the container alone, as the sandbox starts it (the same mounts and seccomp
    filter, no harness): the probe below, and the container-floor benchmark (bench/sandbox_throughput.py)."""
    bpf = seccomp_filter()
    r = None
    try:
        if bpf is not None:
            r, w = os.pipe()
            os.write(w, bpf)
            os.close(w)
        return subprocess.run(
            bwrap_cmd(Limits(), r) + [interpreter()[0], "-I", "-S", "-c", code],
            capture_output=True, text=True, timeout=timeout, env=SANDBOX_ENV,
            pass_fds=() if r is None else (r,),
        )  # fmt: skip
    finally:
        if r is not None:
            os.close(r)


def _probe() -> tuple[str, str]:
    """("bwrap", "") when bubblewrap can run our interpreter here, else ("fallback", why not)."""
    if shutil.which("bwrap") is None:
        return "fallback", "bubblewrap (bwrap) is not installed"
    try:
        probe = run_bare("print('ok')")
    except (OSError, subprocess.TimeoutExpired) as e:
        return "fallback", f"bubblewrap is installed but cannot start a sandbox here ({e})"
    if probe.returncode == 0 and probe.stdout.strip() == "ok":
        return "bwrap", ""
    return "fallback", f"bubblewrap is installed but cannot start a sandbox here ({probe.stderr.strip()[:300]})"


def sandbox_status() -> tuple[str, str]:
    """(mode, why) for this machine: ("bwrap", "") or ("fallback", the reason bubblewrap is not used).

    The probe runs once per process; ROLECAST_SANDBOX=fallback forces the fallback (read on every call).
    """
    global _PROBED
    if os.environ.get("ROLECAST_SANDBOX") == "fallback":
        return "fallback", "ROLECAST_SANDBOX=fallback is set"
    with _MODE_LOCK:
        if _PROBED is None:
            _PROBED = _probe()
            if _PROBED[0] == "fallback":
                log.warning(
                    "%s: the code sandbox falls back to rlimits + an unprivileged uid + a private temp dir, with no "
                    "network or filesystem isolation. Run scripts/install-sandbox.sh (or apt-get install bubblewrap).",
                    _PROBED[1],
                )
        return _PROBED


def sandbox_mode() -> str:
    """ "bwrap" or "fallback" for this machine (see :func:`sandbox_status`)."""
    return sandbox_status()[0]
