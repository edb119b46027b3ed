"""Rollout: the engine that runs episodes and batches their calls, and the generation backends."""

from rolecast.rollout.engine import Backend, Generation, GenRequest, RolloutStats, run_episodes

__all__ = ["Backend", "GenRequest", "Generation", "RolloutStats", "run_episodes"]
