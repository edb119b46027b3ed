"""The names a config's `model.path` may use for the models rolecast ships (the embedded testbed's two sizes)
and where their files are. A name table only: building a testbed is rolecast.testbed's job, which sits
outside the training import graph."""

from __future__ import annotations

from pathlib import Path

_TESTBED = Path(__file__).resolve().parent.parent / "testbed"
ARTIFACT_DIR = _TESTBED / "artifact"
ARTIFACT_DIRS = {"small": ARTIFACT_DIR, "large": _TESTBED / "artifact_large"}
MODEL_NAMES = {"testbed": "small", "testbed-large": "large"}


def default_path(size: str = "small") -> Path:
    """The shipped testbed model + tokenizer directory of one size."""
    if size not in ARTIFACT_DIRS:
        raise ValueError(f"unknown testbed size {size!r}; sizes: {sorted(ARTIFACT_DIRS)}")
    path = ARTIFACT_DIRS[size]
    if not (path / "config.json").exists():
        raise FileNotFoundError(
            f"the shipped {size} testbed is missing from {path}; rebuild it with "
            f"`rolecast testbed build --size {size} --out {path}`"
        )
    return path
