"""Evaluator-optimizer: the generator solves, the evaluator judges; refine until Correct or max rounds."""

from typing import Annotated

from pydantic import Field

from ..episode import AnswerClaim, VerdictClaim
from .api import Context, workflow
from .parsing import parse_verdict


@workflow("eval_opt", prompts={"generator": ["solve", "refine"], "evaluator": ["evaluate"]})
async def eval_opt(ctx: Context, max_rounds: Annotated[int, Field(ge=1)] | None = None,
                   shared_history: bool = True) -> str:
    # The study uses 3 rounds for math and 2 for code.
    rounds = max_rounds or (2 if ctx.family == "code" else 3)
    history: list[dict[str, str]] = []  # {solution, critique} per finished round
    solution = await ctx.call("generator", ctx.prompt("solve"))
    for round_ in range(1, rounds + 1):
        solution.claim = AnswerClaim(solution.text)
        seen = history if shared_history else []
        verdict = await ctx.call("evaluator", ctx.prompt("evaluate", solution=solution.text, history=seen))
        accept = parse_verdict(verdict.text)  # unparseable counts as Incorrect
        verdict.claim = VerdictClaim(accept, solution.text)
        history.append({"solution": solution.text, "critique": verdict.text})
        if accept or round_ == rounds:
            break
        seen = history if shared_history else history[-1:]
        solution = await ctx.call("generator", ctx.prompt("refine", history=seen))
    ctx.log("rounds", round_)
    ctx.log("accepted", float(accept))
    return solution.text
