"""The names a config's `model.path` may use for the models rolecast ships (the embedded testbed's builds) and
where their files are. A name table only: building a testbed is rolecast.testbed's job, which sits outside the
training import graph."""

from __future__ import annotations

from pathlib import Path

_TESTBED = Path(__file__).resolve().parent.parent / "testbed"
ARTIFACT_DIR = _TESTBED / "artifact"
# (kind, size) -> directory. "math": the map's arithmetic models (their code share taught in one step);
# "code": the same weights continued on the code task alone (rolecast.testbed.builder, kind "code").
ARTIFACT_DIRS = {
    ("math", "small"): ARTIFACT_DIR,
    ("math", "large"): _TESTBED / "artifact_large",
    ("code", "small"): _TESTBED / "artifact_code",
    ("code", "large"): _TESTBED / "artifact_code_large",
}
SIZES = ("small", "large")
KINDS = ("math", "code")
MODEL_NAMES = {
    "testbed": ("math", "small"),
    "testbed-large": ("math", "large"),
    "testbed-code": ("code", "small"),
    "testbed-code-large": ("code", "large"),
}


def default_path(size: str = "small", kind: str = "math") -> Path:
    """The shipped testbed model + tokenizer directory of one size and kind."""
    if size not in SIZES:
        raise ValueError(f"unknown testbed size {size!r}; sizes: {list(SIZES)}")
    if kind not in KINDS:
        raise ValueError(f"unknown testbed kind {kind!r}; kinds: {list(KINDS)}")
    path = ARTIFACT_DIRS[kind, size]
    if not (path / "config.json").exists():
        raise FileNotFoundError(
            f"the shipped {kind} {size} testbed is missing from {path}; rebuild it with "
            f"`rolecast testbed build --kind {kind} --size {size} --out {path}`"
        )
    return path
