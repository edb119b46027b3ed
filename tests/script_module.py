"""A script of the repository (scripts/, bench/) imported as a module, once per test session: the scripts are not
a package, and their dataclasses need the module registered in sys.modules while it executes."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_script(relative_path: str) -> ModuleType:
    """The module of `ROOT / relative_path` (e.g. "scripts/lab2.py"), named after its file."""
    path = ROOT / relative_path
    if path.stem in sys.modules:
        return sys.modules[path.stem]
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module
