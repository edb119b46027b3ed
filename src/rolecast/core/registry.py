"""One registry of named things (tasks, workflows, advantage estimators, loss aggregations, reward attributions)
and one loader for a user's own, named as "package.module:function" or "path/to/file.py:function".

A registry rejects a second registration under a name it holds (two plugins claiming "grpo" would otherwise
silently swap the estimator); `Registry.resolve` is where a config's string becomes the object, and its
errors name the config field, the known names and the closest one.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Generic, TypeVar

from rolecast.core.errors import ConfigError

T = TypeVar("T")


def closest_name(name: str, known: list[str]) -> str | None:
    """The known name closest to `name` (difflib's ratio >= 0.6), or None: the one rule behind every "did you
    mean" of a registry name or a config field."""
    match = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return match[0] if match else None


def closest(name: str, known: list[str]) -> str:
    """ " (did you mean 'x'?)" for the closest known name, or ""."""
    match = closest_name(name, known)
    return f" (did you mean {match!r}?)" if match else ""


def is_reference(name: str) -> bool:
    """A "module:function" or "file.py:function" reference rather than a registered name."""
    module, sep, attr = name.rpartition(":")
    return bool(sep and module and attr)


class Registry(Generic[T]):
    """Named entries of one kind; `kind` ("task", "advantage estimator") words the error messages."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """A decorator: `@REGISTRY.register("name")`."""

        def deco(entry: T) -> T:
            self.add(name, entry)
            return entry

        return deco

    def add(self, name: str, entry: T) -> None:
        held = self._entries.get(name)
        if held is not None and held is not entry and _origin(held) != _origin(entry):
            raise ValueError(f"{self.kind} {name!r} is already registered (by {_origin(held)})")
        self._entries[name] = entry

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __getitem__(self, name: str) -> T:
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, name: str) -> T | None:
        return self._entries.get(name)

    def names(self) -> list[str]:
        return sorted(self._entries)

    def values(self) -> list[T]:
        return list(self._entries.values())

    def unknown(self, name: str, field: str | None = None, *, references: bool = False) -> ConfigError:
        """The error for a name this registry does not hold."""
        where = f"{field}: " if field else ""
        also = " (or 'package.module:function' / 'file.py:function')" if references else ""
        return ConfigError(
            f"{where}unknown {self.kind} {name!r}{closest(name, self.names())}; known: {self.names()}{also}"
        )

    def resolve(self, name: str, field: str | None = None) -> T:
        """The entry registered as `name`, or a `ConfigError` naming the field, the closest name and the known
        ones."""
        if name not in self._entries:
            raise self.unknown(name, field)
        return self._entries[name]


def _origin(entry: Any) -> str:
    """Where an entry was defined: "module.qualname", so reloading the module that registered it (a user's
    workflow file imported twice) is not a duplicate."""
    fn = getattr(entry, "fn", entry)
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__name__)}"


def load_callable(ref: str, field: str) -> Callable[..., Any]:
    """The function a "package.module:function" or "path/to/file.py:function" reference names. Every failure is
    a `ConfigError` that names `field` and what is missing, so a typo fails when the config is checked, not
    at the first step after a model has loaded."""
    module, _, attr = ref.rpartition(":")
    if not module or not attr:
        raise ConfigError(f"{field}: {ref!r}: expected 'package.module:function' or 'path/to/file.py:function'")
    if module.endswith(".py"):
        path = Path(module)
        if not path.is_file():
            raise ConfigError(f"{field}: {ref}: the file {path} does not exist")
        spec = importlib.util.spec_from_file_location(f"rolecast_user_{path.stem}", path)
        if spec is None or spec.loader is None:
            raise ConfigError(f"{field}: {ref}: {path} cannot be imported as a Python module")
        mod = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(mod)
        except Exception as e:  # the user's file: say where it failed, in one line
            raise ConfigError(f"{field}: {ref}: importing {path} failed: {type(e).__name__}: {e}") from e
    else:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as e:
            raise ConfigError(f"{field}: {ref}: no module named {e.name!r} (is it on PYTHONPATH?)") from e
    fn = getattr(mod, attr, None)
    if fn is None:
        raise ConfigError(f"{field}: {ref}: {module} has no function {attr!r}")
    if not callable(fn):
        raise ConfigError(f"{field}: {ref}: {attr!r} in {module} is not a function")
    return fn
