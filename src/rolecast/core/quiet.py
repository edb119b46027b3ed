"""Third-party noise kept out of what rolecast prints: transformers' and huggingface_hub's progress bars
("Loading weights", "Writing model shards", downloads), their info messages, and libraries' deprecation and
future warnings (PEFT's "is_gradient_checkpointing is deprecated"). The command line and the Python API run their
work inside `quiet_libraries()`; `--verbose` (or `verbose=True`) shows everything."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import huggingface_hub.utils as hub_utils
from transformers.utils import logging as transformers_logging

__all__ = ["quiet_libraries"]

_LIBRARY_WARNINGS = (DeprecationWarning, PendingDeprecationWarning, FutureWarning)


@contextmanager
def quiet_libraries(enabled: bool = True) -> Iterator[None]:
    """Silence the libraries for the duration, then restore the caller's settings (a Python program that calls
    `rolecast.train` keeps its own bars and warnings afterwards). `enabled=False`: change nothing."""
    if not enabled:
        yield
        return
    bars_on = transformers_logging.is_progress_bar_enabled()
    verbosity = transformers_logging.get_verbosity()
    hub_bars_off = hub_utils.are_progress_bars_disabled()
    transformers_logging.disable_progress_bar()
    transformers_logging.set_verbosity_error()
    hub_utils.disable_progress_bars()
    try:
        with warnings.catch_warnings():
            for category in _LIBRARY_WARNINGS:
                warnings.filterwarnings("ignore", category=category)
            yield
    finally:
        if bars_on:
            transformers_logging.enable_progress_bar()
        transformers_logging.set_verbosity(verbosity)
        if not hub_bars_off:
            hub_utils.enable_progress_bars()
