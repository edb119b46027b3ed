"""The study recipes' prompts, byte for byte as the study's model reads them (issue 37: the two prompt differences a
side-by-side run found). Each expected text is the study's template (examples/math_reasoning/prompt.json) as its
workflow uses it: `.format(problem=...)` for the solve prompts, no formatting at all for Eval-Opt's refinement
prompt (evaluator_optimizer_math_workflow.py returns the template as it is, so `\\boxed{{}}` keeps its doubled
braces)."""

from __future__ import annotations

import pytest

from rolecast.config import CONFIG_DIR
from rolecast.config.load import load_config
from rolecast.prompts import PromptBook

PROBLEM = "What is 2 + 3?"
SOLVER = (
    "You are a math problem solver. Your task is to solve the given mathematical problem step by step. "
    "You must provide the final answer in \\boxed{} format"
)
# multi_agent_math_prompts.generator_initial, formatted: single_agent_math_workflow.py
SINGLE = SOLVER + "\nProblem: " + PROBLEM
# voting_prompts.generator / evaluator_optimizer_prompts.generator_initial, formatted
OTHERS = SOLVER + ".\n\nProblem: " + PROBLEM
# evaluator_optimizer_prompts.generator_refinement, never formatted
REFINE = (
    "You are a math problem solver creating a new solution based on the teacher's feedback above. Your task is to "
    "solve the problem using a completely different approach.\n\nImportant instructions:\n- You must provide the "
    "final answer in \\boxed{{}} format\n- Use a DIFFERENT method than your previous attempt\n- Address the issues "
    "identified in the teacher's feedback"
)


def _prompts(recipe: str) -> PromptBook:
    """The prompts a study recipe runs with: its profile chooses the file."""
    cfg = load_config(CONFIG_DIR / "study" / recipe, environment=False)
    return PromptBook("math", cfg.task.prompts)


def _user(book: PromptBook, name: str, **variables: object) -> str:
    (message,) = book.render(name, **variables)
    assert message["role"] == "user"
    return message["content"]


def test_math_single_agent_prompt_is_the_studys_own():
    """The study's single agent reads "...format\\nProblem:", the other workflows' generators "...format.\\n\\nProblem:";
    at 879f012 every math recipe used the latter."""
    assert _user(_prompts("math_single.yaml"), "solve", problem=PROBLEM) == SINGLE


@pytest.mark.parametrize("recipe", ["math_voting.yaml", "math_eval_opt.yaml"])
def test_math_generators_of_the_other_workflows_keep_theirs(recipe):
    assert _user(_prompts(recipe), "solve", problem=PROBLEM) == OTHERS


def test_math_eval_opt_refinement_shows_the_unformatted_template():
    """The study never formats this template, so its generator reads `\\boxed{{}}`; at 879f012 rolecast's read
    `\\boxed{}`."""
    assert _user(_prompts("math_eval_opt.yaml"), "refine_turn") == REFINE
