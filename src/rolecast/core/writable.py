"""Whether an output directory can be written, asked before the work that fills it: one line naming the path and
the operating system's reason (an ancestor that is a file, a read-only or virtual filesystem such as /proc, no
permission) instead of a traceback once the work is done."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from rolecast.core.errors import RunDirError

__all__ = ["check_writable_dir", "check_writable_file"]


def check_writable_dir(directory: str | Path, what: str) -> None:
    """Raise RunDirError("{what}: ...") unless `directory` exists and can be written, or can be created. Leaves
    nothing behind: the nearest existing ancestor is probed by creating and removing a temporary directory in it
    (permission bits alone say nothing for root, nor for /proc, where creating anything fails)."""
    directory = Path(directory)
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise RunDirError(f"{what}: {existing} is a file, not a directory")
    try:
        probe = tempfile.mkdtemp(prefix=".rolecast-write-test-", dir=existing)
    except OSError as e:
        where = "" if existing == directory else f" ({existing} would hold it)"
        raise RunDirError(f"{what}: {directory} cannot be written{where}: {e.strerror or e}") from None
    os.rmdir(probe)


def check_writable_file(path: str | Path, what: str, give: str, name: str) -> None:
    """Raise RunDirError("{what} is a directory; give {give} (e.g. {path}/{name})") when `path` is a directory
    (`give`: what belongs there, e.g. "the HTML file to write"; `name`: the file's usual name), else check the
    directory that will hold it as `check_writable_dir` does."""
    path = Path(path)
    if path.is_dir():
        raise RunDirError(f"{what} is a directory; give {give} (e.g. {path / name})")
    check_writable_dir(path.parent, what)
