"""Workflows: plain async code over `ctx.call`. See `api.py` for how to write your own."""

from rolecast.core.episode import AnswerClaim, PickClaim, VerdictClaim
from rolecast.core.text import last_boxed, parse_choice, parse_strategies, parse_verdict
from rolecast.workflows import builtin  # noqa: F401  (a registration import: the shipped workflows)
from rolecast.workflows.api import WORKFLOWS, Context, WorkflowError, WorkflowSpec, get_workflow, workflow

__all__ = [
    "WORKFLOWS",
    "AnswerClaim",
    "Context",
    "PickClaim",
    "VerdictClaim",
    "WorkflowError",
    "WorkflowSpec",
    "get_workflow",
    "workflow",
    "last_boxed",
    "parse_choice",
    "parse_strategies",
    "parse_verdict",
]
