"""rolecast: train multi-agent LLM workflows end to end with RL, and see why training succeeds or collapses."""

__version__ = "0.1.0"
