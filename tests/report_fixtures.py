"""A hand-built sweep directory for the report tests: base cells, finished cells (one with a cliff, per-role
gradient measurements and a failure signature), a failed cell, a half-written running cell and a pending one.
Every number is chosen so the expected map can be computed by hand (see test_report.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

SE = 0.03  # every evaluation's standard error (above the binomial floor of 0.025 at n=400, so it is used as is)


def eval_row(cell: str, workflow: str, sharing: str | None, step: int, p: float, tag: str) -> dict[str, Any]:
    return {
        "run": cell,
        "step": step,
        "tag": tag,
        "workflow": workflow,
        "task": "testbed",
        "split": "test",
        "sharing": sharing,
        "model": "testbed",
        "protocol": "study",
        "pass@1": p,
        "stderr": SE,
        "n_problems": 400,
        "n_samples": 4,
    }


def _config(workflow: str, sharing: str, steps: int) -> dict[str, Any]:
    return {
        "seed": 0,
        "task": {"name": "testbed"},
        "workflow": {"name": workflow},
        "routing": {"sharing": sharing},
        "model": {"path": "testbed"},
        "train": {"steps": steps},
        "eval": {"protocol": "study", "temperature": 0.7, "n_samples": 4},
    }


def _cell(
    root: Path,
    name: str,
    workflow: str,
    sharing: str,
    evals: list[tuple[int, float, str]],
    *,
    steps: int = 20,
    done: bool = True,
    metrics: list[dict[str, Any]] | None = None,
    torn: bool = False,
) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "config.yaml").write_text(yaml.safe_dump(_config(workflow, sharing, steps)))
    rows = [json.dumps(eval_row(name, workflow, sharing, s, p, t)) + "\n" for s, p, t in evals]
    (d / "eval.jsonl").write_text("".join(rows) + ('{"step": 10, "pass@1": 0.' if torn else ""))
    if metrics is None:
        metrics = [{"step": s, "accuracy": 0.5, "episodes": 64} for s in range(1, steps + 1)]
    lines = "".join(json.dumps(m) + "\n" for m in metrics)
    (d / "metrics.jsonl").write_text(lines + ('{"step": 4, "accur' if torn else ""))
    if done:
        (d / "DONE.json").write_text(json.dumps({"cell": name, "seconds": 1.0}))
    return d


def voting_metrics() -> list[dict[str, Any]]:
    """Per-role gradient share and amplification at every step; the generators' completions collapse in length
    from step 11 (length_collapse fires at steps 12-20: 9 steps, see test_analyze's rule)."""
    return [
        {
            "step": s,
            "accuracy": 0.5,
            "episodes": 64,
            "role/generator/length": 20.0 if s <= 10 else 5.0,
            "grad/pol/generator/share": 0.8,
            "grad/pol/aggregator/share": 0.2,
            "grad/pol/generator/alignment": 1.5,
            "grad/pol/generator/norm": 1.0,
        }
        for s in range(1, 21)
    ]


def build_sweep(root: Path) -> Path:
    """The sweep directory; returns it. Cells (training ones in sweep.json order):
    single shared   done     base .5, 10: .6, 20: .7               gain +.2 (significant)
    single isolated failed   10: .55, ERROR.txt ("RuntimeError: boom")
    voting shared   done     5: .8, 10: .8, 15: .4, 20: .3         cliff from 15, gain -.2
    voting isolated done     5: .55, 10: .6, 15: .6, 20: .5        gain 0
    eval_opt shared running  metrics 3/20 steps + a torn line; eval 5: .52 + a torn line
    eval_opt isolated pending (no directory)
    """
    root.mkdir(parents=True, exist_ok=True)
    cells: list[dict[str, Any]] = []

    def record(name: str, kind: str, workflow: str, sharing: str | None, status: str, **extra: Any) -> None:
        axes = {"workflow": workflow, "task": "testbed", "model": "testbed"}
        if kind == "train":
            axes |= {"sharing": sharing, "seed": 0}
        cells.append(
            {
                "name": name,
                "kind": kind,
                "axes": axes,
                "base_cell": None if kind != "train" else f"base-testbed-{workflow}-testbed",
                "run_dir": name,
                "status": status,
                "error": None,
                **extra,
            }
        )

    for wf in ("single", "voting", "eval_opt"):
        name = f"base-testbed-{wf}-testbed"
        _cell(root, name, wf, "shared", [(0, 0.5, "base")], steps=0)
        record(name, "base_eval", wf, None, "done")

    n = "testbed-single-testbed-shared-s0"
    _cell(root, n, "single", "shared", [(10, 0.6, "periodic"), (20, 0.7, "final")])
    record(n, "train", "single", "shared", "done")

    n = "testbed-single-testbed-isolated-s0"
    d = _cell(root, n, "single", "isolated", [(10, 0.55, "periodic")], done=False)
    (d / "ERROR.txt").write_text('Traceback (most recent call last):\n  File "x.py", line 1\nRuntimeError: boom\n')
    record(n, "train", "single", "isolated", "failed", error="RuntimeError: boom")

    n = "testbed-voting-testbed-shared-s0"
    d = _cell(
        root,
        n,
        "voting",
        "shared",
        [(5, 0.8, "periodic"), (10, 0.8, "periodic"), (15, 0.4, "periodic"), (20, 0.3, "final")],
        metrics=voting_metrics(),
    )
    record(n, "train", "voting", "shared", "done")

    n = "testbed-voting-testbed-isolated-s0"
    _cell(
        root,
        n,
        "voting",
        "isolated",
        [(5, 0.55, "periodic"), (10, 0.6, "periodic"), (15, 0.6, "periodic"), (20, 0.5, "final")],
    )
    record(n, "train", "voting", "isolated", "done")

    n = "testbed-eval_opt-testbed-shared-s0"
    _cell(
        root,
        n,
        "eval_opt",
        "shared",
        [(5, 0.52, "periodic")],
        done=False,
        torn=True,
        metrics=[{"step": s, "accuracy": 0.5, "episodes": 64} for s in range(1, 4)],
    )
    record(n, "train", "eval_opt", "shared", "running")

    record("testbed-eval_opt-testbed-isolated-s0", "train", "eval_opt", "isolated", "pending")
    (root / "sweep.json").write_text(json.dumps({"matrix": "m.yaml", "out": str(root), "cells": cells}))
    return root


# ---------------------------------------------------------------------------------------------------------
# A directory of real tiny `rolecast train` runs (no sweep), trained once per test session and shared by the
# report, browser and figure tests (report_fixtures is imported once, so its cache is the session's)

TINY = (
    "threads=1",
    "train.problems_per_step=2",
    "train.group_size=4",
    "eval.size=4",
    "eval.n_samples=2",
    "rollout.max_new_tokens=40",
    "logging.progress=false",
)
# name -> (workflow, sharing, steps, extra --set): all seed 0, as a researcher's ad-hoc runs are. Voting shared
# and isolated at 2 steps differ in sharing alone (paired); the 3-step isolated run differs in steps too (not
# paired with anything); the two single runs differ in lr. The 3-step run diagnoses gradients every 4 steps:
# it ends before its first diagnosed step.
# (4 voting problems per step: the groups' rewards differ, so the roles' gradients are not all zero)
ADHOC_RUNS = {
    "single-a": ("single", "shared", 2, ()),
    "single-b": ("single", "shared", 2, ("train.lr=0.0003",)),
    "voting-s": ("voting", "shared", 2, ("diagnostics.gradients.every=1", "train.problems_per_step=4")),
    "voting-i": ("voting", "isolated", 2, ("diagnostics.gradients.every=1", "train.problems_per_step=4")),
    "voting-i3": ("voting", "isolated", 3, ("diagnostics.gradients.every=4", "train.problems_per_step=4")),
}
_BUILT: dict[str, Path] = {}


def adhoc_runs(base: Path) -> Path:
    """The runs' directory (under `base` the first time; the same directory afterwards)."""
    if "adhoc" in _BUILT:
        return _BUILT["adhoc"]
    from rolecast.cli import main

    root = base / "adhoc-runs"
    for name, (workflow, sharing, steps, extra) in ADHOC_RUNS.items():
        args = ["train", "--workflow", workflow, "--sharing", sharing, "--steps", str(steps), "--seed", "0"]
        args += ["--run-dir", str(root / name)]
        for kv in (*TINY, *extra):
            args += ["--set", kv]
        assert main(args) == 0, name
    _BUILT["adhoc"] = root
    return root
