"""rolecast: train multi-agent LLM workflows end to end with RL, and see why training succeeds or collapses.

The Python API (README, "From Python"):

    from rolecast import load_config, train

    result = train(load_config("configs/testbed.yaml", {"workflow.name": "voting", "train.steps": 3}))
    result.run_dir, result.final_accuracy
"""

# `rolecast.train` names the function imported below, and a subpackage holds the training code (imported as
# `from rolecast.train.grpo import ...`). Importing a subpackage binds its name in this package only the first time
# it is imported, so it is imported first: the function bound after it keeps the name.
from rolecast import train as _training_code
from rolecast.api import TrainResult, load_config, train
from rolecast.config.schema import RunConfig

del _training_code

__version__ = "0.1.0"

__all__ = ["RunConfig", "TrainResult", "__version__", "load_config", "train"]
