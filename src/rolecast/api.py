"""The Python API: load a recipe, change what you need, train, read the result.

    from rolecast import load_config, train

    cfg = load_config("configs/testbed.yaml", {"workflow.name": "voting", "train.steps": 3})
    result = train(cfg)
    print(result.run_dir, result.base_accuracy, result.final_accuracy)

`load_config` is `rolecast.config.load.load_config` (a YAML recipe, then dotted overrides, validated as the command
line validates them); `train` runs what `rolecast train` runs and returns a `TrainResult`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rolecast.config.load import load_config
from rolecast.config.schema import RunConfig
from rolecast.config.validate import check_run_config
from rolecast.core.errors import ConfigError
from rolecast.core.quiet import quiet_libraries
from rolecast.training.grpo import train as run_training

__all__ = ["TrainResult", "load_config", "train"]


@dataclass(frozen=True)
class TrainResult:
    """What a training session produced."""

    run_dir: Path  # the run directory: config.yaml, metrics.jsonl, eval.jsonl, checkpoints/ (README, "Run directory")
    # held-out pass@1 of the untrained policies; None when this session made no base evaluation (a resume, or
    # eval.at_start off)
    base_accuracy: float | None
    # held-out pass@1 at the last step; None when the session stopped before it (stop_after) or eval.at_end is off
    final_accuracy: float | None
    policies: tuple[str, ...]  # the policy ids trained (one per role under isolated routing, "shared" when shared)


def train(
    config: RunConfig,
    *,
    resume: str | Path | None = None,
    stop_after: int | None = None,
    overwrite: bool = False,
    verbose: bool = False,
) -> TrainResult:
    """Train per `config` (from `load_config`), as `rolecast train` does. `resume`: a run directory to continue
    (`config` may differ from its config.yaml only in steps, lr, eval, logging and checkpoint settings);
    `stop_after`: end this session after that many steps (at least 1), checkpointed; `overwrite`: replace a run
    already in `config.run_dir`; `verbose`: let transformers' loading bars and libraries' warnings through, which
    are otherwise kept out for the call (as `rolecast train` keeps them out without --verbose; the caller's own
    settings are restored after). Errors a user can fix are `rolecast.core.errors.UserError`s with a one-line
    message. A `RunConfig` built in code (not by `load_config`) is checked here as `load_config` checks one."""
    if stop_after is not None and stop_after < 1:
        raise ConfigError(f"stop_after={stop_after}: the number of steps to run before stopping must be at least 1")
    check_run_config(config)  # a FieldError (a ConfigError) naming the field
    with quiet_libraries(not verbose):
        summary = run_training(config, resume=resume, stop_after=stop_after, overwrite=overwrite)
    return TrainResult(
        run_dir=Path(summary["run_dir"]),
        base_accuracy=summary.get("base_accuracy"),
        final_accuracy=summary.get("final_accuracy"),
        policies=tuple(summary.get("policies", ())),
    )
