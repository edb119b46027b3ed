"""The import contracts of pyproject.toml (docs/architecture.md, "The contracts") catch what they forbid.

In a copy of the source tree, one small module is added per rule, each breaking it; lint-imports must report every
contract broken, each naming its own probe modules, and the clean copy must pass. One lint-imports run per copy
(each builds the import graph once, ~1 s), not one per rule.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"

# contract id (pyproject.toml) -> (its name, {probe module (path under src/): its one import})
PROBES: dict[str, tuple[str, dict[str, str]]] = {
    "layers": (
        "layers are one-way",
        {
            # diagnostics and objectives are pure: no runtime, rollout, workflows, tasks or train
            "rolecast/diagnostics/probe_runtime.py": "import rolecast.runtime",
            "rolecast/diagnostics/probe_rollout.py": "import rolecast.rollout.engine",
            "rolecast/diagnostics/probe_train.py": "import rolecast.training.update",
            "rolecast/objectives/probe_workflows.py": "import rolecast.workflows.api",
            "rolecast/objectives/probe_tasks.py": "import rolecast.tasks.base",
            # core imports nothing of rolecast; train never imports report, sweep or the CLI; nothing imports upwards
            "rolecast/core/probe_config.py": "import rolecast.config.schema",
            "rolecast/training/probe_sweep.py": "import rolecast.sweep.matrix",
            "rolecast/rewards/probe_runtime.py": "import rolecast.runtime",
        },
    ),
    "workflows": (
        "workflows import only core",
        {
            # a workflow file the contract never listed by name, and the workflows' own API
            "rolecast/workflows/probe_new_workflow.py": "import rolecast.tasks.base",
            "rolecast/workflows/probe_api.py": "import rolecast.prompts",
        },
    ),
    "sandbox": (
        "outside the sandbox only its interface is imported",
        {
            "rolecast/rewards/probe_sandbox.py": "import rolecast.sandbox.container",
            "rolecast/probe_sandbox_internal.py": "from rolecast.sandbox import harness",
        },
    ),
    "acyclic": (
        "no import loops between sibling packages or modules",
        {
            "rolecast/probe_loop_a.py": "import rolecast.probe_loop_b",
            "rolecast/probe_loop_b.py": "import rolecast.probe_loop_a",
        },
    ),
}


def _not_python(directory: str, names: list[str]) -> list[str]:
    return [n for n in names if not n.endswith(".py") and not (Path(directory) / n).is_dir()]


def _lint(tree: Path, *contracts: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo", *(a for c in contracts for a in ("--contract", c))],
        cwd=tree,
        env={"PYTHONPATH": str(tree / "src"), "PATH": str(LINT_IMPORTS.parent)},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """A copy of the package's Python files and of pyproject.toml (the contracts), nothing else."""
    root = tmp_path_factory.mktemp("tree")
    shutil.copytree(ROOT / "src" / "rolecast", root / "src" / "rolecast", ignore=_not_python)
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


def test_the_clean_copy_keeps_every_contract(tree):
    res = _lint(tree)
    assert res.returncode == 0, res.stdout + res.stderr
    for name, _ in PROBES.values():
        assert f"{name} KEPT" in res.stdout
    assert f"Contracts: {len(PROBES)} kept, 0 broken." in res.stdout  # and no contract besides these


@pytest.mark.parametrize("contract", sorted(PROBES))
def test_a_file_breaking_the_rule_is_reported(tree, contract):
    name, probes = PROBES[contract]
    paths = [tree / "src" / path for path in probes]
    try:
        for path, (_, line) in zip(paths, probes.items(), strict=True):
            path.write_text(f'"""Breaks an import contract on purpose (tests/test_contracts.py)."""\n\n{line}\n')
        res = _lint(tree, contract)
    finally:
        for path in paths:
            path.unlink(missing_ok=True)
    assert res.returncode == 1, res.stdout + res.stderr
    assert f"{name} BROKEN" in res.stdout
    for path in probes:  # named in full, or relative to the package (".probe_loop_a" in the cycle's report)
        module = path.removesuffix(".py").replace("/", ".").removeprefix("rolecast")
        assert module in res.stdout, f"{name}: {module} not reported\n{res.stdout}"
