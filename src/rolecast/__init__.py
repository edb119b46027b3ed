"""rolecast: train multi-agent LLM workflows end to end with RL, and see why training succeeds or collapses.

The Python API (README, "From Python"):

    from rolecast import load_config, train

    result = train(load_config("configs/testbed.yaml", {"workflow.name": "voting", "train.steps": 3}))
    result.run_dir, result.final_accuracy

`train`, `load_config`, `TrainResult` and `RunConfig` are bound on first use (PEP 562), so that importing any
module of the package (the command line's parser, the report) does not load torch and the trainer. The training
code itself is the subpackage `rolecast.training` (`import rolecast.training.grpo`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rolecast.api import TrainResult, load_config, train
    from rolecast.config.schema import RunConfig

__version__ = "0.1.0"

_API = {
    "train": "rolecast.api",
    "load_config": "rolecast.api",
    "TrainResult": "rolecast.api",
    "RunConfig": "rolecast.config.schema",
}


def __getattr__(name: str) -> Any:
    if name not in _API:
        raise AttributeError(f"module 'rolecast' has no attribute {name!r}")
    value = getattr(importlib.import_module(_API[name]), name)
    globals()[name] = value
    return value


__all__ = ["RunConfig", "TrainResult", "__version__", "load_config", "train"]
