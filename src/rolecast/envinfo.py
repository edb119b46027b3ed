"""`rolecast env`: what this machine gives rolecast, on one screen, and what is missing for which feature.

The ecosystem's habit (`accelerate env`, `transformers env`): versions of Python, torch and its CUDA build, the GPUs
torch sees, the libraries rolecast runs on and its optional extras, the code sandbox's isolation here (bubblewrap
or the fallback), the offline data directory and which tasks' files it holds, and the CPU threads. Paste it into
an issue; read it before a long run (docs/gpu.md: `rolecast env`, then `bench/gpu_check.py`, then a 3-step run).

Collecting (`collect_env`) is separate from printing (`format_env`, `missing_features`), so the wording is tested
on hand-built cases and the collection on this machine.
"""

from __future__ import annotations

import logging
import os
import platform
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import torch

from rolecast.core.errors import install_hint
from rolecast.sandbox import sandbox_status
from rolecast.tasks import TASKS
from rolecast.tasks.datasets import data_root

__all__ = ["OPTIONAL", "EnvInfo", "Gpu", "TaskData", "collect_env", "format_env", "missing_features"]

CORE = ("transformers", "peft", "tokenizers", "pydantic")  # the libraries every run uses, by distribution name

# (distribution, pyproject extra, the feature that needs it): each optional extra and what is lost without it
OPTIONAL: tuple[tuple[str, str, str], ...] = (
    ("vllm", "vllm", "rollout.backend: vllm (rollouts on a vLLM engine; a CUDA GPU, docs/gpu.md)"),
    ("numba", "cpu", "fused CPU decode kernels (without: the same steps as torch ops, slower)"),
    ("pyarrow", "parquet", "Parquet datasets (dapo_math, deepcoder)"),
    ("matplotlib", "plots", "the PNG plots of rolecast analyze"),
    ("ray", "ray", "rolecast sweep --executor ray"),
    ("datasets", "hub", "task.options.hub: true (datasets from the Hugging Face hub)"),
    ("tensorboard", "tensorboard", "logging.tensorboard: true"),
    ("wandb", "wandb", "logging.wandb: true"),
)


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    memory_gib: float


@dataclass(frozen=True)
class TaskData:
    """A dataset task's offline files under the data directory: those it needs that are not there."""

    task: str
    missing: tuple[str, ...]
    files: int = 1  # how many files it reads


@dataclass(frozen=True)
class EnvInfo:
    rolecast: str
    python: str
    executable: str
    system: str
    torch: str
    cuda_build: str | None  # torch.version.cuda: None for a CPU wheel
    gpus: tuple[Gpu, ...]
    nvidia_driver: bool  # nvidia-smi is on PATH (a GPU machine, whatever torch's build)
    versions: dict[str, str | None]  # distribution -> version (None: not installed), core and optional
    bwrap: str | None  # bubblewrap's version line, None when not installed
    sandbox_mode: str  # "bwrap" or "fallback"
    sandbox_why: str  # why the fallback ("" under bwrap)
    data_dir: Path
    data_dir_source: str  # how data_dir was chosen
    task_data: tuple[TaskData, ...] = ()
    cpu_count: int = 1
    usable_cpus: int = 1
    torch_threads: int = 1


def _version(dist: str) -> str | None:
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def _bwrap_version() -> str | None:
    path = shutil.which("bwrap")
    if path is None:
        return None
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    return f"{out or 'bubblewrap'} at {path}"


def _task_files(factory: object) -> list[str]:
    """The files under the data directory a dataset task reads (every subset's, for tasks with subsets)."""
    files = list(getattr(factory, "files", {}).values())
    for subset in getattr(factory, "SUBSETS", {}).values():
        files += [f for f in subset.values() if f not in files]
    return files


def _present(root: Path, rel: str) -> bool:
    p = root / rel
    return p.exists() or (p.suffix == ".parquet" and p.with_suffix(".jsonl").exists())  # tasks accept either


def task_data(root: Path) -> tuple[TaskData, ...]:
    """Each registered task that reads offline files, with those missing under `root`."""
    out = []
    for name in TASKS.names():
        files = _task_files(TASKS[name])
        if files:
            out.append(TaskData(name, tuple(f for f in files if not _present(root, f)), len(files)))
    return tuple(out)


def _data_dir_source() -> str:
    if os.environ.get("ROLECAST_DATA_DIR"):
        return "ROLECAST_DATA_DIR"
    return "the default, ../shared/data beside the repository; set ROLECAST_DATA_DIR to change it"


def collect_env() -> EnvInfo:
    """This machine, now. Probes bubblewrap once (as a code task would) and asks torch for its devices."""
    gpus: tuple[Gpu, ...] = ()
    if torch.cuda.is_available():
        gpus = tuple(
            Gpu(i, torch.cuda.get_device_name(i), torch.cuda.get_device_properties(i).total_memory / 2**30)
            for i in range(torch.cuda.device_count())
        )
    probe_log = logging.getLogger("rolecast.sandbox.probe")
    level = probe_log.level
    probe_log.setLevel(logging.ERROR)  # its fallback warning would repeat what the sandbox line says
    try:
        mode, why = sandbox_status()
    finally:
        probe_log.setLevel(level)
    root = data_root()
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count() or 1
    return EnvInfo(
        rolecast=_version("rolecast") or "?",
        python=platform.python_version(),
        executable=sys.executable,
        system=f"{platform.system()} {platform.release()} {platform.machine()}",
        torch=torch.__version__,
        cuda_build=torch.version.cuda,
        gpus=gpus,
        nvidia_driver=shutil.which("nvidia-smi") is not None,
        versions={dist: _version(dist) for dist in (*CORE, *(d for d, _, _ in OPTIONAL))},
        bwrap=_bwrap_version(),
        sandbox_mode=mode,
        sandbox_why=why,
        data_dir=root,
        data_dir_source=_data_dir_source(),
        task_data=task_data(root) if root.is_dir() else (),
        cpu_count=os.cpu_count() or 1,
        usable_cpus=usable,
        torch_threads=torch.get_num_threads(),
    )


def missing_features(info: EnvInfo) -> list[str]:
    """One line per thing this machine lacks: what is missing, what it costs, how to get it."""
    lines = []
    if not info.gpus:
        if info.nvidia_driver and info.cuda_build is None:
            lines.append(
                "GPU: this machine has an NVIDIA driver (nvidia-smi) but torch is a CPU build; install torch's "
                "CUDA wheel (docs/gpu.md)"
            )
        else:
            lines.append("GPU: none that torch can use; runs go on the CPU (model.device: cuda is refused)")
    for dist, extra, feature in OPTIONAL:
        if info.versions.get(dist) is None:
            lines.append(f"{dist}: not installed; needed for {feature}: {install_hint(extra)}")
    if info.sandbox_mode != "bwrap":
        lines.append(
            f"sandbox: {info.sandbox_why}; code tasks (mbpp, humaneval, deepcoder, testbed_code) refuse to train "
            "without isolation: bash scripts/install-sandbox.sh (or apt-get install bubblewrap), docs/sandbox.md"
        )
    if not info.data_dir.is_dir():
        lines.append(
            f"data: {info.data_dir} does not exist; the dataset tasks need their files there or ROLECAST_DATA_DIR "
            "(the testbed tasks need none)"
        )
    return lines


def _data_lines(info: EnvInfo) -> list[str]:
    """The data directory and, per dataset task, whether its files are there: tasks missing some files name them,
    tasks missing all are only named (their paths are in docs/study_recipe.md and the tasks' errors)."""
    lines = [f"data:     {info.data_dir} ({info.data_dir_source})"]
    if not info.data_dir.is_dir():
        return lines
    groups = {
        "tasks with their files": [t.task for t in info.task_data if not t.missing],
        "some files missing": [
            f"{t.task} (no {', '.join(t.missing)})" for t in info.task_data if 0 < len(t.missing) < t.files
        ],
        "no files": [t.task for t in info.task_data if t.missing and len(t.missing) == t.files],
    }
    for label, items in groups.items():
        if items:
            lines += textwrap.wrap(
                f"{label}: {', '.join(items)}", 110, initial_indent=" " * 10, subsequent_indent=" " * 12
            )
    return lines


def format_env(info: EnvInfo) -> str:
    """The report `rolecast env` prints: about 15 lines, then what is missing."""
    cuda = f"CUDA {info.cuda_build}" if info.cuda_build else "a CPU build (no CUDA)"
    if info.gpus:
        gpus = "; ".join(f"cuda:{g.index} {g.name} ({g.memory_gib:.0f} GiB)" for g in info.gpus)
    else:
        gpus = "none that torch can use"
    core = "  ".join(f"{d} {info.versions.get(d) or 'NOT INSTALLED'}" for d in CORE)
    extras = "  ".join(f"{d} {info.versions.get(d) or '-'}" for d, _, _ in OPTIONAL)  # '-': not installed
    sandbox = (
        f"bwrap: each program in its own bubblewrap container ({info.bwrap})"
        if info.sandbox_mode == "bwrap"
        else f"fallback, no isolation ({info.sandbox_why})"
    )
    lines = [
        f"rolecast  {info.rolecast}",
        f"python    {info.python} ({info.executable}) on {info.system}",
        f"torch     {info.torch}, {cuda}",
        f"GPUs      {gpus}",
        f"libraries {core}",
        f"extras    {extras}",
        f"sandbox   {sandbox}",
        *_data_lines(info),
        f"threads   torch uses {info.torch_threads}; {info.usable_cpus} of {info.cpu_count} cores usable by this "
        "process (a run sets its own: --threads, the embedded recipe 1)",
    ]
    missing = missing_features(info)
    lines.append("missing:  nothing" if not missing else "missing:")
    lines += [f"  - {line}" for line in missing]
    return "\n".join(lines)
