"""Rollout: the engine that runs episodes and batches their calls, and the generation backends."""

from rolecast.rollout.engine import Backend, Generation, GenRequest, RolloutStats, Sampling, run_episodes, step_seed

__all__ = ["Backend", "GenRequest", "Generation", "RolloutStats", "Sampling", "run_episodes", "step_seed"]
