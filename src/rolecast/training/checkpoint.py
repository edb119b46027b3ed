"""Atomic, keep-last-N checkpoints of named state entries.

Layout of `run_dir/checkpoints/`:
    step_{N}/manifest.json          {"step": N, "entries": {name: {"file", "format", "bytes", "sha256"}}},
                                    written last
    step_{N}/<quoted name>.<ext>    one file per entry: .safetensors (flat str -> tensor dicts: weights),
                                    .json (plain JSON that round-trips exactly), .pt (anything else)

A .safetensors entry stores each distinct tensor once: a tensor equal byte for byte to an earlier one of the
entry (a tied output head and embedding; LoRA B matrices still at their zero init) is written as an alias in the
file's metadata and read back as its own copy, so the loaded entry equals the saved one.
    latest                          text file holding N of the last checkpoint written

Atomicity: a checkpoint is written into `step_{N}.tmp-<pid>/`, every file fsynced, then the directory is
renamed to `step_{N}` (atomic on POSIX) and `latest` replaced via a temp file + os.replace. A process killed
at any moment leaves either the old or the new checkpoint complete; `load_checkpoint` ignores leftovers
and falls back to the newest complete directory when `latest` is missing, corrupt or stale.

Integrity: the manifest records every file's size and sha256. A checkpoint damaged after it was written
(a truncated or deleted file, a disk error) fails that check on load; `load_checkpoint` then warns, naming
the file, and falls back to the newest intact checkpoint, so a resume never dies in a deserializer.

A trainer checkpoint's own entries (each policy's weights, the step and the RNG state) are built by
`trainer_state` and read back by `restore_trainer_state` / `restore_policies` (which `rolecast eval` and
`export` use); the optimizers' and lr schedules' entries are training/optimizer.py's, the session components'
training/resume.py's.

`.pt` entries are loaded with `torch.load(weights_only=True)`, so state must be built from tensors,
dict/list/tuple and Python scalars/str/None (as optimizer and scheduler state dicts are); `save_checkpoint`
checks this up front instead of failing at resume time. Everything is loaded onto the CPU:
`optimizer.load_state_dict` moves state to its parameters' device, model weights move with `.to()`.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import random
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import numpy as np
import safetensors
import safetensors.torch
import torch

from rolecast.core.errors import CheckpointError
from rolecast.core.rundir import CHECKPOINTS, RunPaths

if TYPE_CHECKING:
    from rolecast.policies.models import PolicySet

log = logging.getLogger(__name__)

_STEP_DIR = re.compile(r"^step_(\d+)$")
_LEFTOVER = re.compile(r"^(?:step_\d+|latest)\.(?:tmp|old)-(\d+)$")
MANIFEST = "manifest.json"


class DiskFullError(CheckpointError):
    """A checkpoint did not fit on its disk: nothing of it is left, the checkpoints before it are intact."""

    def __init__(self, step: int, root: Path, needed: int, free: int):
        self.step, self.root, self.needed, self.free = step, root, needed, free
        newest = latest_step(root.parent)
        kept = f"the newest complete checkpoint is step_{newest}" if newest is not None else "no checkpoint is kept"
        super().__init__(
            f"no space for checkpoint step_{step} in {root}: it needs about {_mb(needed)}, the disk has "
            f"{_mb(free)} free; {kept}"
        )


def _mb(n: int) -> str:
    return f"{n / 2**20:.0f} MB" if n >= 2**20 else f"{n / 2**10:.0f} kB"


def state_bytes(value: Any) -> int:
    """What the tensors of a checkpoint state take on disk (its plain values add little)."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, Mapping):
        return sum(state_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(state_bytes(v) for v in value)
    return 0


_SPACE_MARGIN = 1 << 20  # manifest, JSON entries, file-system overhead


_SAFE_LEAVES = (torch.Tensor, int, float, bool, str, type(None), torch.dtype, torch.device, torch.Size)


# ---------------------------------------------------------------------------------------------------------
# Saving


def save_checkpoint(
    run_dir: str | os.PathLike, step: int, state: dict[str, Any], keep_last: int = 2, keep_every: int = 0
) -> Path:
    """Write `state` as checkpoint `step` atomically, point `latest` at it, prune to `keep_last` (never pruning
    steps that are multiples of `keep_every` > 0, kept to re-evaluate a finished run); return its dir."""
    if keep_last < 1:
        raise ValueError(f"keep_last must be >= 1, got {keep_last}")
    for name, value in state.items():
        _check_loadable(value, name)
    root = Path(run_dir) / CHECKPOINTS
    root.mkdir(parents=True, exist_ok=True)
    final, tmp = root / f"step_{step}", root / f"step_{step}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    # a disk that cannot hold the checkpoint is said before anything is written (cheap: a statvfs call)
    needed = state_bytes(state) + _SPACE_MARGIN
    free = shutil.disk_usage(root).free
    if free < needed:
        raise DiskFullError(step, root, needed, free)
    tmp.mkdir()
    try:
        entries = {name: _write_entry(tmp, name, value) for name, value in state.items()}
        _write_durably(tmp / MANIFEST, json.dumps({"step": step, "entries": entries}, indent=1).encode())
        _fsync_dir(tmp)
    except BaseException as e:
        # the serializers report a full disk each their own way (OSError ENOSPC, safetensors' "No space left on
        # device", torch's "unexpected pos"): a disk left (almost) without space by the failed write tells
        full = isinstance(e, Exception) and (_no_space(e) or shutil.disk_usage(root).free < _SPACE_MARGIN)
        shutil.rmtree(tmp, ignore_errors=True)
        if full:
            raise DiskFullError(step, root, needed, shutil.disk_usage(root).free) from None
        raise
    _replace_dir(tmp, final)
    _fsync_dir(root)
    pointer_tmp = root / f"latest.tmp-{os.getpid()}"
    _write_durably(pointer_tmp, f"{step}\n".encode())
    os.replace(pointer_tmp, root / "latest")
    _fsync_dir(root)
    _prune(root, keep=step, keep_last=keep_last, keep_every=keep_every)
    return final


def _no_space(e: BaseException) -> bool:
    return (isinstance(e, OSError) and e.errno == errno.ENOSPC) or "No space left on device" in str(e)


def _write_entry(directory: Path, name: str, value: Any) -> dict[str, Any]:
    stem = quote(name, safe="")  # "policies/gen" -> "policies%2Fgen": flat dir, reversible, no traversal
    is_weights = isinstance(value, dict) and value and all(isinstance(v, torch.Tensor) for v in value.values())
    if is_weights and all(isinstance(k, str) for k in value):
        path, fmt = directory / f"{stem}.safetensors", "safetensors"
        tensors, aliases = _distinct(value)
        safetensors.torch.save_file(tensors, str(path), metadata={_ALIASES: json.dumps(aliases)} if aliases else None)
        _fsync_file(path)
    elif _json_roundtrips(value):
        path, fmt = directory / f"{stem}.json", "json"
        _write_durably(path, json.dumps(value).encode())
    else:
        path, fmt = directory / f"{stem}.pt", "torch"
        with open(path, "wb") as f:
            torch.save(value, f)
            f.flush()
            os.fsync(f.fileno())
    size, digest = _size_and_sha256(path)
    return {"file": path.name, "format": fmt, "bytes": size, "sha256": digest}


def _size_and_sha256(path: Path) -> tuple[int, str]:
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
    return size, h.hexdigest()


_ALIASES = "rolecast.aliases"  # safetensors metadata: {name: the earlier name whose bytes it repeats}


def _distinct(tensors: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The tensors to write, each distinct one once (safetensors also refuses tensors sharing storage), and the
    aliases: {name: earlier name with the same dtype, shape and bytes}. Candidates are found by (dtype, shape, sum)
    and confirmed on the raw bytes (so -0.0 and 0.0 stay apart)."""
    out: dict[str, torch.Tensor] = {}
    aliases: dict[str, str] = {}
    seen: dict[tuple[Any, ...], list[str]] = {}
    for k, v in tensors.items():
        v = v.detach().to("cpu").contiguous()
        key = (v.dtype, tuple(v.shape), float(v.sum(dtype=torch.float64)) if v.is_floating_point() else None)
        same = next((o for o in seen.get(key, []) if torch.equal(_raw(out[o]), _raw(v))), None)
        if same is not None:
            aliases[k] = same
            continue
        out[k] = v
        seen.setdefault(key, []).append(k)
    return out, aliases


def _raw(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1).view(torch.uint8)


def _json_roundtrips(value: Any) -> bool:
    # Exact round-trip only: tuples, int dict keys or NaN would come back different, so they go to .pt.
    try:
        return json.loads(json.dumps(value)) == value
    except (TypeError, ValueError):
        return False


def _check_loadable(value: Any, where: str) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _check_loadable(k, where)
            _check_loadable(v, f"{where}[{k!r}]")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_loadable(v, f"{where}[{i}]")
    elif not isinstance(value, _SAFE_LEAVES):
        raise TypeError(
            f"checkpoint entry {where} holds a {type(value).__name__}, which torch.load(weights_only=True) "
            "cannot read back; convert it to a tensor or plain Python value"
        )


def _replace_dir(src: Path, dst: Path) -> None:
    """Rename src to dst; an existing dst (re-saving a step) is moved aside first, then deleted."""
    if not dst.exists():
        os.rename(src, dst)
        return
    old = dst.with_name(f"{dst.name}.old-{os.getpid()}")
    shutil.rmtree(old, ignore_errors=True)
    os.rename(dst, old)
    os.rename(src, dst)
    shutil.rmtree(old, ignore_errors=True)


def _prune(root: Path, keep: int, keep_last: int, keep_every: int = 0) -> None:
    """Keep `keep` (just written), the newest keep_last - 1 others and multiples of keep_every; drop leftovers
    of dead writers."""
    others = sorted((s for s in _complete_steps(root) if s != keep), reverse=True)
    for s in others[keep_last - 1 :]:
        if keep_every > 0 and s % keep_every == 0:
            continue
        shutil.rmtree(root / f"step_{s}", ignore_errors=True)
    for p in root.iterdir():
        m = _LEFTOVER.match(p.name)
        if m and not _pid_alive(int(m.group(1))):
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # our own leftovers are from failed earlier saves
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _write_durably(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    # Makes the directory's entries (new files, renames) durable, not just the files' contents.
    _fsync_file(path)


# ---------------------------------------------------------------------------------------------------------
# Loading


def _complete_steps(root: Path) -> list[int]:
    if not root.is_dir():
        return []
    steps = []
    for p in root.iterdir():
        m = _STEP_DIR.match(p.name)
        if m and (p / MANIFEST).is_file():
            steps.append(int(m.group(1)))
    return sorted(steps)


def list_checkpoints(run_dir: str | os.PathLike) -> list[int]:
    """Steps of the complete checkpoints under `run_dir`, ascending (leftovers of killed writes excluded)."""
    return _complete_steps(Path(run_dir) / CHECKPOINTS)


def latest_step(run_dir: str | os.PathLike) -> int | None:
    """The step `load_checkpoint(run_dir)` would load, or None when there is no complete checkpoint."""
    root = Path(run_dir) / CHECKPOINTS
    complete = _complete_steps(root)
    try:
        pointed = int((root / "latest").read_text().strip())
    except (OSError, ValueError):
        pointed = None
    if pointed in complete:
        return pointed
    return complete[-1] if complete else None


def load_checkpoint(run_dir: str | os.PathLike, step: int | None = None) -> tuple[int, dict[str, Any]]:
    """Load checkpoint `step` as `(step, {name: value})`, on the CPU. Without `step`: the latest intact one;
    a damaged newer checkpoint is skipped with a warning naming its bad file (`load_latest_intact` also
    returns those lines). Raises CheckpointError when there is none (or `step` is damaged), never a deserializer's error."""
    step, state, _ = load_latest_intact(run_dir) if step is None else (step, _load_step(run_dir, step), [])
    return step, state


def load_latest_intact(run_dir: str | os.PathLike) -> tuple[int, dict[str, Any], list[str]]:
    """`(step, state, problems)`: the newest intact checkpoint (the `latest` pointer's first, then the
    others newest first) and one line per damaged checkpoint skipped on the way."""
    root = Path(run_dir) / CHECKPOINTS
    pointed = latest_step(run_dir)
    if pointed is None:
        raise CheckpointError(f"no complete checkpoint under {root}")
    order = [pointed] + [s for s in reversed(_complete_steps(root)) if s != pointed]
    problems: list[str] = []
    for step in order:
        try:
            state = _load_step(run_dir, step)
        except CheckpointError as e:
            problems.append(str(e))
            log.warning("%s; trying an older checkpoint", e)
            continue
        if problems:
            log.warning("using checkpoint step_%d (the newest intact one)", step)
        return step, state, problems
    raise CheckpointError(f"no intact checkpoint under {root}: " + "; ".join(problems))


def _load_step(run_dir: str | os.PathLike, step: int) -> dict[str, Any]:
    directory = RunPaths(Path(run_dir)).checkpoint(step)
    if not (directory / MANIFEST).is_file():
        raise CheckpointError(f"no complete checkpoint at {directory}")
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
        entries = manifest["entries"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"checkpoint {directory}: unreadable {MANIFEST} ({e})") from None
    state = {}
    for name, entry in entries.items():
        path = directory / entry["file"]
        problem = _damage(path, entry)
        if problem is None:
            try:
                state[name] = _read_entry(path, entry["format"])
                continue
            except Exception as err:  # any deserializer failure means the same thing here: a damaged file
                problem = f"cannot be read ({type(err).__name__}: {err})"
        raise CheckpointError(f"checkpoint step_{step} is damaged: {path} {problem}")
    return state


def _damage(path: Path, entry: Mapping[str, Any]) -> str | None:
    """What is wrong with an entry's file, or None. Manifests older than the size/sha256 fields are checked
    by reading the file only."""
    if not path.is_file():
        return "is missing"
    if "bytes" in entry and path.stat().st_size != entry["bytes"]:
        return f"has {path.stat().st_size} bytes, the manifest says {entry['bytes']} (truncated?)"
    if "sha256" in entry and _size_and_sha256(path)[1] != entry["sha256"]:
        return "does not match its sha256 in the manifest"
    return None


def _read_entry(path: Path, fmt: str) -> Any:
    if fmt == "safetensors":
        with safetensors.safe_open(str(path), framework="pt", device="cpu") as f:
            tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open is not a mapping)
            aliases = json.loads((f.metadata() or {}).get(_ALIASES, "{}"))
        for k, src in aliases.items():
            tensors[k] = tensors[src].clone()
        return tensors
    if fmt == "json":
        return json.loads(path.read_text())
    if fmt == "torch":
        return torch.load(path, map_location="cpu", weights_only=True)
    raise CheckpointError(f"{path}: unknown checkpoint entry format {fmt!r}")


# ---------------------------------------------------------------------------------------------------------
# RNG state


def capture_rng_state() -> dict[str, Any]:
    """Python `random`, numpy, torch CPU and every CUDA device's RNG state."""
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    legacy = np.random.get_state()  # the legacy tuple form (a dict only with legacy=False)
    assert isinstance(legacy, tuple)
    name, key, pos, has_gauss, gauss = legacy
    # int64 tensor instead of a numpy array so the entry stays weights_only-loadable
    state["numpy"] = (name, torch.from_numpy(key.astype("int64")), int(pos), int(has_gauss), float(gauss))
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    torch.set_rng_state(state["torch"])
    if "numpy" in state:
        name, key, pos, has_gauss, gauss = state["numpy"]
        np.random.set_state((name, key.numpy().astype(np.uint32), pos, has_gauss, gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# ---------------------------------------------------------------------------------------------------------
# What a trainer checkpoint holds besides its components' entries: the weights, the step and counters, the RNG


def weights_entry(pid: str) -> str:
    """The checkpoint entry of a policy's trainable weights."""
    return f"policy/{pid}"


def trainer_state(step: int, policies: PolicySet, **trainer: Any) -> dict[str, Any]:
    """The weights and the run's position: every policy's trainable weights, the step reached (with any other
    JSON-able `trainer` counters) and the process's RNG state. The optimizers' and lr schedules' entries are
    training/optimizer.py's, the other components' training/resume.py's."""
    state: dict[str, Any] = {"trainer": {"step": step, **trainer}, "rng": capture_rng_state()}
    for pid in policies.policy_ids:
        state[weights_entry(pid)] = policies.state_dict(pid)
    return state


def required_entry(state: Mapping[str, Any], key: str, listed: str = "policy/") -> Any:
    """The checkpoint entry `key`, or a CheckpointError naming it and the entries the checkpoint holds under
    `listed` (the policies' weights, or e.g. "optim/" for the optimizers')."""
    if key not in state:
        have = sorted(k for k in state if k.startswith(listed))
        raise CheckpointError(
            f"the checkpoint has no {key!r} entry (it holds {have}); was it written by a run with other policies?"
        )
    return state[key]


def restore_policies(state: Mapping[str, Any], policies: PolicySet) -> None:
    """Load every policy's weights from a trainer checkpoint (what `rolecast eval --checkpoint` needs)."""
    for pid in policies.policy_ids:
        try:
            policies.load_state_dict(pid, required_entry(state, weights_entry(pid)))
        except (ValueError, RuntimeError) as e:
            if isinstance(e, CheckpointError):
                raise
            raise CheckpointError(f"the checkpoint's weights for policy {pid!r} do not fit this model: {e}") from None


def restore_trainer_state(state: Mapping[str, Any], policies: PolicySet) -> dict[str, Any]:
    """The inverse of `trainer_state`: weights and RNG. Returns the trainer entry ({"step": N, ...counters})."""
    restore_policies(state, policies)
    restore_rng_state(required_entry(state, "rng"))
    return dict(required_entry(state, "trainer"))
