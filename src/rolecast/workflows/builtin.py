"""Importing this module registers the shipped workflows."""

from rolecast.workflows import eval_opt, orch_workers, single, voting  # noqa: F401
