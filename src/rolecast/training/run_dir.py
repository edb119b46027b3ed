"""The run directory's life cycle: checked before a model loads, refused when it already holds another run
(unless overwriting was asked for), removed again when a new run fails before its first step, and its
JSON-lines logs cut back on resume (tolerating the half-written last line a kill leaves).
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from rolecast.config.schema import RunConfig, parse_config, yaml_mapping
from rolecast.core.errors import RunDirError
from rolecast.core.rundir import CONFIG, RUN_ENTRIES

log = logging.getLogger(__name__)


def prepare_new_run_dir(run_dir: Path, overwrite: bool = False) -> list[Path]:
    """Make `run_dir` ready for a new run, creating missing parents; returns the directories created (so a
    run that fails before its first step can remove them again). Refuses a directory that already holds a
    run unless `overwrite`, which deletes that run's files (and only those)."""
    if run_dir.exists() and not run_dir.is_dir():
        raise RunDirError(f"run dir {run_dir}: exists and is not a directory")
    if run_dir.is_dir():
        found = [name for name in RUN_ENTRIES if (run_dir / name).exists()]
        if found and not overwrite:
            raise RunDirError(
                f"run dir {run_dir} already holds a run ({', '.join(found)}); continue it with "
                f"--resume {run_dir}, choose another --run-dir, or pass --overwrite to replace it"
            )
        for name in found:
            path = run_dir / name
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    created = [p for p in (run_dir, *run_dir.parents) if not p.exists()]
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RunDirError(f"run dir {run_dir}: cannot be created ({e.strerror or e})") from None
    _check_writable(run_dir)
    return created[::-1]


def check_resume_dir(run_dir: Path) -> RunConfig:
    """The stored configuration of the run in `run_dir`, after checking it is a writable run directory."""
    if not run_dir.is_dir():
        raise RunDirError(f"cannot resume {run_dir}: no such directory")
    if not (run_dir / CONFIG).is_file():
        raise RunDirError(f"cannot resume {run_dir}: it has no config.yaml, so it is not a rolecast run directory")
    _check_writable(run_dir)
    return stored_config(run_dir / CONFIG)


def stored_config(path: Path) -> RunConfig:
    """The configuration a run wrote to its config.yaml (resolved and checked when that run started), parsed by
    the schema alone: a resume compares it with the new, checked configuration field by field."""
    return parse_config(yaml_mapping(path.read_text(), path), path)


def _check_writable(run_dir: Path) -> None:
    probe = run_dir / f".write-test-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise RunDirError(f"run dir {run_dir}: cannot be written ({e.strerror or e})") from None


def discard_new_run(run_dir: Path, created: list[Path]) -> None:
    """Undo a new run that failed before its first step: its files, then the directories it created."""
    for name in RUN_ENTRIES:
        path = run_dir / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        elif path.exists() or path.is_symlink():
            path.unlink(missing_ok=True)
    for d in reversed(created):
        try:
            d.rmdir()  # only if empty: never removes anything the run did not write
        except OSError:
            break
