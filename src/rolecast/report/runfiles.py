"""Reading a run directory tolerantly: a run that is still going or was killed has half-written last lines,
missing files or no evaluations yet; every reader here returns what it could read plus notes on what it could
not, and never raises on file contents."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rolecast.core.rundir import CONFIG, EVAL, METRICS, SWEEP_STATUS, RunPaths, episodes_file, read_jsonl


@dataclass
class RunFiles:
    run_dir: Path
    config: dict[str, Any] | None = None
    metrics: list[dict[str, Any]] = field(default_factory=list)  # one per step, in step order (last row wins)
    evals: list[dict[str, Any]] = field(default_factory=list)
    episode_steps: list[int] = field(default_factory=list)  # steps with an episodes/step_N.jsonl
    missing: list[str] = field(default_factory=list)  # files that are absent, with what that means
    notes: list[str] = field(default_factory=list)  # lines skipped and other repairs

    def episodes(self, step: int) -> list[dict[str, Any]]:
        """The logged episodes of one step (dicts from dataclasses.asdict(Episode)); [] when absent."""
        bad: list[int] = []
        rows = read_jsonl(RunPaths(self.run_dir).episodes(step), skipped=bad)
        if bad:
            self.notes.append(f"episodes/{episodes_file(step)}: line(s) {_lines(bad)} not valid JSON, skipped")
        return rows


def _lines(numbers: list[int]) -> str:
    return ", ".join(map(str, numbers[:5])) + (f" and {len(numbers) - 5} more" if len(numbers) > 5 else "")


def read_run(run_dir: str | Path) -> RunFiles:
    run = RunFiles(Path(run_dir))
    paths = RunPaths(run.run_dir)
    if paths.config.exists():
        try:
            loaded = yaml.safe_load(paths.config.read_text())
            run.config = loaded if isinstance(loaded, dict) else None
        except yaml.YAMLError as e:
            run.notes.append(f"{CONFIG}: not valid YAML ({e.__class__.__name__}); task and step count unknown")
    else:
        run.missing.append(f"{CONFIG} (task, workflow and planned steps unknown)")

    if paths.metrics.exists():
        bad: list[int] = []
        rows = read_jsonl(paths.metrics, skipped=bad)
        if bad:
            run.notes.append(
                f"{METRICS}: line(s) {_lines(bad)} not valid JSON, skipped (a run still writing, or killed mid-write)"
            )
        by_step: dict[int, dict[str, Any]] = {}
        for r in rows:
            if isinstance(r.get("step"), int):
                by_step[r["step"]] = r  # a resumed run rewrites steps; the last row of a step wins
        run.metrics = [by_step[s] for s in sorted(by_step)]
    else:
        run.missing.append(f"{METRICS} (no training step finished yet)")

    if paths.eval().exists():
        bad = []
        run.evals = read_jsonl(paths.eval(), skipped=bad)
        if bad:
            run.notes.append(f"{EVAL}: line(s) {_lines(bad)} not valid JSON, skipped")
    else:
        run.missing.append(f"{EVAL} (no evaluation yet: accuracy is read from training metrics)")

    run.episode_steps = paths.episode_steps()
    if not run.episode_steps:
        run.missing.append("episodes/step_N.jsonl (episode signatures not checked)")
    return run


def sweep_base_rows(run_dir: str | Path) -> tuple[list[dict[str, Any]], str | None]:
    """The base-model evaluation of a sweep's training cell, which the sweep measures once per (workflow, task,
    model) in a base cell beside it (its `eval.at_start` is off): the `base` rows of that cell's eval.jsonl and
    the cell's name, or ([], None) when `run_dir` is not a cell of a sweep or its base cell has not run."""
    d = Path(run_dir)
    try:
        cells = json.loads((d.parent / SWEEP_STATUS).read_text())["cells"]
        base = next(c.get("base_cell") for c in cells if isinstance(c, dict) and c.get("name") == d.name)
    except (OSError, json.JSONDecodeError, KeyError, TypeError, StopIteration):
        return [], None
    if not isinstance(base, str):
        return [], None
    base_eval = RunPaths(d.parent / base).eval()
    if not base_eval.is_file():
        return [], None
    rows = [r for r in read_jsonl(base_eval, skipped=[]) if r.get("tag") == "base"]
    return rows, base if rows else None
