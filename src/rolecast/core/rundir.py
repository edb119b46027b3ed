"""The run directory's layout, and the one way its files are written and read.

    <run_dir>/config.yaml                 the resolved config (what `--resume` loads)
    <run_dir>/metrics.jsonl               one row per training step (names: core/metric_keys.py)
    <run_dir>/eval.jsonl                  one row per evaluation of the main eval set
    <run_dir>/eval_<set>.jsonl            the same for each extra eval set (`eval.extra_sets`)
    <run_dir>/resumes.jsonl               one row per resume
    <run_dir>/episodes/step_<N>.jsonl     the logged episodes of step N
    <run_dir>/checkpoints/                step_<N>/ and `latest`
    <run_dir>/analysis/                   `rolecast analyze`: summary.json and PNGs
    <run_dir>/tensorboard/, wandb/        the optional metric sinks
    <run_dir>/DONE.json, ERROR.txt        a sweep cell's end state
    <sweep>/sweep.json, report.html       a sweep's status (one run directory per cell beside it) and report

Files that must never be seen half written (a summary, a report, an episodes file, a cut-back log) go through
`write_atomic`; logs grow by `append_jsonl` and are read back by `read_jsonl`, which knows what a kill mid-write
leaves (a torn last line).

This module imports nothing of rolecast but core.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rolecast.core.errors import ConfigError

log = logging.getLogger(__name__)

CONFIG = "config.yaml"
METRICS = "metrics.jsonl"
EVAL = "eval.jsonl"
RESUMES = "resumes.jsonl"
EPISODES = "episodes"
CHECKPOINTS = "checkpoints"
ANALYSIS = "analysis"
SUMMARY = "summary.json"  # in analysis/
TENSORBOARD = "tensorboard"
WANDB = "wandb"
DONE = "DONE.json"
ERROR = "ERROR.txt"
STOPPED = "STOPPED.json"  # a sweep cell whose run stopped itself (diverged): final, not retried
# A sweep's directory: one run directory per cell, plus these
SWEEP_STATUS = "sweep.json"
REPORT = "report.html"

# What a run writes into its directory; any of these marks the directory as holding a run.
RUN_ENTRIES = (CONFIG, METRICS, EVAL, RESUMES, EPISODES, CHECKPOINTS, TENSORBOARD, WANDB)

_EPISODE_PREFIX, _JSONL = "step_", ".jsonl"


def eval_set_file(set_name: str | None = None) -> str:
    """eval.jsonl for the main eval set, eval_<set>.jsonl for an extra one."""
    return EVAL if set_name is None else f"eval_{set_name}.jsonl"


def episodes_file(step: int) -> str:
    """The name of step `step`'s episodes file in episodes/: step_<N>.jsonl."""
    return f"{_EPISODE_PREFIX}{step}{_JSONL}"


def episodes_file_step(name: str) -> int | None:
    """The step of an episodes file name (step_<N>.jsonl), or None for any other name."""
    digits = name.removeprefix(_EPISODE_PREFIX).removesuffix(_JSONL)
    if len(digits) + len(_EPISODE_PREFIX) + len(_JSONL) != len(name) or not digits.isdecimal():
        return None
    return int(digits)


@dataclass(frozen=True)
class RunPaths:
    """The paths of one run directory's files."""

    run_dir: Path

    @property
    def config(self) -> Path:
        return self.run_dir / CONFIG

    @property
    def metrics(self) -> Path:
        return self.run_dir / METRICS

    @property
    def resumes(self) -> Path:
        return self.run_dir / RESUMES

    @property
    def episodes_dir(self) -> Path:
        return self.run_dir / EPISODES

    @property
    def checkpoints(self) -> Path:
        return self.run_dir / CHECKPOINTS

    @property
    def analysis(self) -> Path:
        return self.run_dir / ANALYSIS

    def eval(self, set_name: str | None = None) -> Path:
        """eval.jsonl, or eval_<set>.jsonl of an extra eval set."""
        return self.run_dir / eval_set_file(set_name)

    def checkpoint(self, step: int) -> Path:
        """checkpoints/step_<N>"""
        return self.checkpoints / f"step_{step}"

    def episodes(self, step: int) -> Path:
        return self.episodes_dir / episodes_file(step)

    def episode_steps(self) -> list[int]:
        """The steps with an episodes file, ascending; [] when there is no episodes/ directory."""
        if not self.episodes_dir.is_dir():
            return []
        return sorted(s for p in self.episodes_dir.iterdir() if (s := episodes_file_step(p.name)) is not None)


# ---------------------------------------------------------------------------------------------------------
# Writing


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write `data` (text as UTF-8, or bytes) to `path` so that a reader sees the old file or the new one, never
    half of one: a temp file in the same directory, fsynced, then renamed over `path` (os.replace)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        with open(tmp, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(d: Path) -> None:
    """Make a rename durable (best effort: not every file system lets a directory be opened)."""
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def jsonl_line(row: Mapping[str, Any], *, ensure_ascii: bool = True) -> str:
    """One JSON-lines row, newline included."""
    return json.dumps(row, ensure_ascii=ensure_ascii) + "\n"


def append_jsonl(path: str | Path, row: Mapping[str, Any], *, ensure_ascii: bool = True) -> None:
    """Append one row to a JSON-lines log (a kill mid-write leaves a torn last line, which `read_jsonl` drops)."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(jsonl_line(row, ensure_ascii=ensure_ascii))


def write_jsonl(path: str | Path, rows: Iterable[Mapping[str, Any]], *, ensure_ascii: bool = True) -> None:
    """Write a whole JSON-lines file atomically (`write_atomic`)."""
    write_atomic(path, "".join(jsonl_line(r, ensure_ascii=ensure_ascii) for r in rows))


# ---------------------------------------------------------------------------------------------------------
# Reading


def _parse_line(raw: bytes) -> dict[str, Any] | str:
    """A row, or why the line is not one."""
    try:
        row = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return "not UTF-8"
    except json.JSONDecodeError as e:
        return e.msg
    return row if isinstance(row, dict) else "not a JSON object"


def read_jsonl(path: str | Path, *, skipped: list[int] | None = None) -> list[dict[str, Any]]:
    """The rows (JSON objects) of a JSON-lines log; [] when the file does not exist.

    Strict (the trainer resuming, rollback): a half-written last line (what a kill mid-write leaves) is dropped
    with a warning; a bad line anywhere else is damage and raises ConfigError naming the file and 1-based line.
    Tolerant (`skipped` given; readers of a run that may still be writing, or was killed): every bad line is
    skipped and its 1-based number appended to `skipped`, and an unreadable file reads as empty.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError:
        if skipped is None:
            raise
        return []
    lines = data.split(b"\n")
    last = max((i for i, ln in enumerate(lines) if ln.strip()), default=-1)
    rows: list[dict[str, Any]] = []
    for i, ln in enumerate(lines):
        if not ln.strip():
            continue
        row = _parse_line(ln)
        if isinstance(row, dict):
            rows.append(row)
        elif skipped is not None:
            skipped.append(i + 1)
        elif i == last:
            text = ln.decode("utf-8", errors="replace")
            log.warning("%s: dropped a half-written last line (line %d, %r...)", path, i + 1, text[:40])
        else:
            raise ConfigError(f"{path}:{i + 1}: not a JSON line ({row}); the run's log is damaged")
    return rows


def cut_back_jsonl(path: str | Path, keep: Callable[[dict[str, Any]], bool]) -> None:
    """Rewrite `path` (atomically) with only the rows `keep` accepts, e.g. rows up to the step a run resumes from.
    Rewritten even when every row is kept: a torn last line (a kill mid-append, dropped by `read_jsonl`) must not
    stay in front of the rows the resumed run appends. Nothing happens when the file does not exist."""
    if Path(path).exists():
        write_jsonl(path, [r for r in read_jsonl(path) if keep(r)])


def stopped_reason(run_dir: Path) -> str:
    """Why and at which step a sweep cell's run stopped itself: the one line its STOPPED.json records."""
    try:
        return str(json.loads((Path(run_dir) / STOPPED).read_text()).get("reason") or "stopped")
    except (OSError, ValueError, AttributeError):
        return "stopped (STOPPED.json unreadable)"
