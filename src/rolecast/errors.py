"""The failures a user is expected to cause and fix: one place for their classes.

Everything raised as a `UserError` is a problem with the user's input or environment (a config field, a
dataset file, a missing optional package, an unreachable model), not a bug: the command line prints its
message (one or two lines naming the cause and the file or field) and exits with status 2, without a
traceback unless `--debug` is given. Anything else is a bug and keeps its traceback.

This module imports nothing from rolecast, so every module can raise these without import cycles.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any


class UserError(Exception):
    """An expected failure: the message alone tells the user what to fix."""


class ConfigError(UserError, ValueError):
    """A configuration problem, with the field and file (or command-line override) named."""


class FieldError(ConfigError):
    """A problem with one config field, found by a cross-section check; `field` is its dotted path, so the
    message can name the file or the `--set` override it came from."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.detail = message


class DatasetError(UserError, ValueError):
    """A dataset file that cannot be read as the task expects: names the file and the 1-based line."""


class MissingPackageError(UserError, ImportError):
    """An optional package is needed but not installed; the message holds the install command."""


class ModelNotFoundError(UserError, ValueError):
    """A model or tokenizer that is neither a local directory nor reachable on the hub."""


class ReportError(UserError, ValueError):
    """A directory a report cannot be made of (it holds no run); nothing is written into it."""


def install_hint(extra: str) -> str:
    return f"pip install 'rolecast[{extra}]'"


def require(
    package: str, extra: str, *, purpose: str | None = None, module: str | None = None, load: bool = True
) -> Any:  # the module (None when load=False)
    """Import the optional `package` (its import name), or `module` that needs it, or fail with one line
    naming the install command.

    `extra` is the pyproject optional-dependency group that provides it; `purpose` says what needs it
    ("logging.tensorboard: true"). `load=False` only checks that the package is installed (cheap: for
    config-time checks, before any model loads) and returns None."""
    why = f"{purpose} needs" if purpose else "this needs"
    message = f"{why} the {package} package, which is not installed: {install_hint(extra)}"
    if not load:
        try:
            found = importlib.util.find_spec(package) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise MissingPackageError(message)
        return None
    try:
        # the package first: a submodule imported earlier stays cached even when the package is gone
        importlib.import_module(package)
        return importlib.import_module(module or package)
    except ModuleNotFoundError as e:
        # only `package` itself missing is this error; a broken install of it keeps its own message
        if e.name is not None and e.name.partition(".")[0] == package.partition(".")[0]:
            raise MissingPackageError(message) from e
        raise
