"""The failures a user is expected to cause and fix: every such class of rolecast lives here.

Everything raised as a `UserError` is a problem with the user's input, environment or run (a config field, a
dataset file, a missing optional package, an unreachable model, a run that diverged), not a bug: the command
line prints its message (one or two lines naming the cause and the file or field) and exits with status 2,
without a traceback unless `--debug` is given. Anything else is a bug and keeps its traceback.

    UserError
    ├── ConfigError (ValueError)           a config field or file; FieldError, MatrixError, DeviceError
    ├── DatasetError (ValueError)          a dataset file's row; DatasetFileMissing
    ├── PromptFileError                    a prompt no prompt file holds
    ├── WorkflowError                      a workflow breaking its own declaration
    ├── EnvironmentProblem                 this machine: MissingPackageError, ModelNotFoundError, SandboxUnavailable
    ├── RunDirError                        a run directory that cannot be used; CheckpointError (+ DiskFullError)
    ├── TrainingDiverged                   the run stopped itself; its last good checkpoint is kept
    └── ReportError                        a directory that holds no run

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


class MatrixError(ConfigError):
    """A sweep matrix problem, with the file, the axis or field, and the bad value named."""


class DeviceError(ConfigError):
    """A device setting this machine cannot honour."""


class DatasetError(UserError, ValueError):
    """A dataset file that cannot be read as the task expects: names the file and the 1-based line."""


class DatasetFileMissing(DatasetError, FileNotFoundError):
    """A dataset file (or a split's file) that does not exist."""


class PromptFileError(UserError):
    """A prompt a workflow needs is in none of the prompt files: the message names those files (the shipped one and
    `task.prompts`), the prompt and who needs it. Not a ValueError, so config validation does not blame the config."""


class WorkflowError(UserError):
    """A workflow that breaks its own declaration (calls a role it did not declare). Not a config problem, so it is
    not a ValueError: config validation passes it on as it is, naming the workflow's file, not the config's."""


class EnvironmentProblem(UserError):
    """Something this machine lacks (a package, a model, an isolation mechanism), not something the config got
    wrong."""


class MissingPackageError(EnvironmentProblem, ImportError):
    """An optional package is needed but not installed; the message holds the install command."""


class ModelNotFoundError(EnvironmentProblem, ValueError):
    """A model or tokenizer that is neither a local directory nor reachable on the hub."""


class SandboxUnavailable(EnvironmentProblem):
    """A task would run model-written code without isolation, and the config does not allow that."""


class NotATestbedBuild(UserError, FileNotFoundError):
    """A directory given as a testbed build that holds no build_info.json (`rolecast testbed info|rollouts DIR`)."""


class RunDirError(UserError):
    """A run directory that cannot be used: not creatable or writable, or already holding a run."""


class CheckpointError(RunDirError):
    """No usable checkpoint: none written, every one damaged, or one that does not fit this run."""


class TrainingDiverged(UserError):
    """The run stopped because training diverged; its last good checkpoint is kept (docs/training.md)."""


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


# ---------------------------------------------------------------------------------------------------------
# Messages


def yaml_problem(e: Exception, source: object) -> str:
    """A YAML parse error as one line: the file, the line and column an editor shows, and what is wrong there; a tab
    is named as such (YAML indents with spaces only; the parser says "found character '\\t' that cannot start any
    token", over five lines)."""
    mark = getattr(e, "problem_mark", None)
    where = f"{source}, line {mark.line + 1}, column {mark.column + 1}" if mark is not None else str(source)
    problem = " ".join(str(getattr(e, "problem", None) or e).split())
    if "'\\t'" in problem:
        return f"{where}: a tab character; YAML indents with spaces only (replace the tab with spaces)"
    return f"{where}: not valid YAML ({problem})"
