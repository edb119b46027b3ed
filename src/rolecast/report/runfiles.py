"""Reading a run directory tolerantly: a run that is still going or was killed has half-written last lines,
missing files or no evaluations yet; every reader here returns what it could read plus notes on what it could
not, and never raises on file contents."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


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
        rows, bad = read_jsonl(self.run_dir / "episodes" / f"step_{step}.jsonl")
        if bad:
            self.notes.append(f"episodes/step_{step}.jsonl: line(s) {_lines(bad)} not valid JSON, skipped")
        return rows


def read_jsonl(path: Path) -> tuple[list[dict[str, Any]], list[int]]:
    """The JSON-object lines of a file, and the 1-based numbers of lines that are not (a torn last line)."""
    rows: list[dict[str, Any]] = []
    bad: list[int] = []
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return rows, bad
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            bad.append(i)
            continue
        if isinstance(row, dict):
            rows.append(row)
        else:
            bad.append(i)
    return rows, bad


def _lines(numbers: list[int]) -> str:
    return ", ".join(map(str, numbers[:5])) + (f" and {len(numbers) - 5} more" if len(numbers) > 5 else "")


_EPISODE_FILE = re.compile(r"^step_(\d+)\.jsonl$")


def read_run(run_dir: str | Path) -> RunFiles:
    run = RunFiles(Path(run_dir))
    d = run.run_dir
    cfg_path = d / "config.yaml"
    if cfg_path.exists():
        try:
            loaded = yaml.safe_load(cfg_path.read_text())
            run.config = loaded if isinstance(loaded, dict) else None
        except yaml.YAMLError as e:
            run.notes.append(f"config.yaml: not valid YAML ({e.__class__.__name__}); task and step count unknown")
    else:
        run.missing.append("config.yaml (task, workflow and planned steps unknown)")

    path = d / "metrics.jsonl"
    if path.exists():
        rows, bad = read_jsonl(path)
        if bad:
            run.notes.append(
                f"metrics.jsonl: line(s) {_lines(bad)} not valid JSON, skipped (a run still writing, "
                f"or killed mid-write)"
            )
        by_step: dict[int, dict[str, Any]] = {}
        for r in rows:
            if isinstance(r.get("step"), int):
                by_step[r["step"]] = r  # a resumed run rewrites steps; the last row of a step wins
        run.metrics = [by_step[s] for s in sorted(by_step)]
    else:
        run.missing.append("metrics.jsonl (no training step finished yet)")

    path = d / "eval.jsonl"
    if path.exists():
        run.evals, bad = read_jsonl(path)
        if bad:
            run.notes.append(f"eval.jsonl: line(s) {_lines(bad)} not valid JSON, skipped")
    else:
        run.missing.append("eval.jsonl (no evaluation yet: accuracy is read from training metrics)")

    ep_dir = d / "episodes"
    if ep_dir.is_dir():
        run.episode_steps = sorted(int(m.group(1)) for p in ep_dir.iterdir() if (m := _EPISODE_FILE.match(p.name)))
    if not run.episode_steps:
        run.missing.append("episodes/step_N.jsonl (episode signatures not checked)")
    return run


def sweep_base_rows(run_dir: str | Path) -> tuple[list[dict[str, Any]], str | None]:
    """The base-model evaluation of a sweep's training cell, which the sweep measures once per (workflow, task,
    model) in a base cell beside it (its `eval.at_start` is off): the `base` rows of that cell's eval.jsonl and
    the cell's name, or ([], None) when `run_dir` is not a cell of a sweep or its base cell has not run."""
    d = Path(run_dir)
    try:
        cells = json.loads((d.parent / "sweep.json").read_text())["cells"]
        base = next(c.get("base_cell") for c in cells if isinstance(c, dict) and c.get("name") == d.name)
    except (OSError, json.JSONDecodeError, KeyError, TypeError, StopIteration):
        return [], None
    if not isinstance(base, str) or not (d.parent / base / "eval.jsonl").is_file():
        return [], None
    rows = [r for r in read_jsonl(d.parent / base / "eval.jsonl")[0] if r.get("tag") == "base"]
    return rows, base if rows else None
