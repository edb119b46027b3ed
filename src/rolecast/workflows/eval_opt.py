"""Evaluator-optimizer: the generator solves, the evaluator judges; refine until Correct or max rounds."""

from typing import Annotated, Literal

from pydantic import Field

from rolecast.core.episode import AnswerClaim, VerdictClaim
from rolecast.workflows.api import Context, Messages, workflow
from rolecast.workflows.parsing import ParserSetName, parser_set

CONVERSATIONS = ("prompt", "multi_turn", "replies")


@workflow("eval_opt", prompts={"generator": ["solve", "refine"], "evaluator": ["evaluate"]})
async def eval_opt(
    ctx: Context,
    max_rounds: Annotated[int, Field(ge=1)] | None = None,
    shared_history: bool = True,
    parsers: ParserSetName = "rolecast",
    conversation: Literal["prompt", "multi_turn", "replies"] = "prompt",
) -> str:
    """`conversation`: "prompt" (each call is one fresh prompt that restates the history as text),
    "multi_turn" (one shared conversation: every call sees the whole conversation so far, each earlier call as
    its user message (`evaluate_turn` / `refine_turn`) and its reply, then its own prompt as the new user
    message) or "replies" (the reference study's shared history, rllm's evaluator_optimizer_workflow.py with
    share_conversation_history=True: the same, except that the evaluate / refine user messages are never added
    to the history, so earlier turns follow the first prompt as consecutive assistant messages and only the
    current call's prompt is a user message). `parsers`: "rolecast" or "first_match" (workflows/parsing.py)."""
    rules = parser_set(parsers)
    if conversation not in CONVERSATIONS:
        raise ValueError(f"eval_opt option conversation must be one of {CONVERSATIONS}, got {conversation!r}")
    # The study uses 3 rounds for math and 2 for code.
    rounds = max_rounds or (2 if ctx.family == "code" else 3)
    history: list[dict[str, str]] = []  # {solution, critique} per finished round
    convo: Messages = ctx.prompt("solve")  # multi_turn: the shared conversation
    solution = await ctx.call("generator", convo)
    convo = convo + [{"role": "assistant", "content": solution.text}]
    for round_ in range(1, rounds + 1):
        solution.claim = AnswerClaim(solution.text)
        if conversation != "prompt":
            asked = convo + _user_turn(ctx, "evaluate_turn")
            verdict = await ctx.call("evaluator", asked)
            # replies: the evaluate prompt is not kept in the shared history
            convo = (asked if conversation == "multi_turn" else convo) + [
                {"role": "assistant", "content": verdict.text}
            ]
        else:
            seen = history if shared_history else []
            verdict = await ctx.call("evaluator", ctx.prompt("evaluate", solution=solution.text, history=seen))
        accept, said = rules.verdict(verdict.text)
        verdict.claim = VerdictClaim(accept, solution.text, verdict=said)
        history.append({"solution": solution.text, "critique": verdict.text})
        if accept or round_ == rounds:
            break
        if conversation != "prompt":
            asked = convo + _user_turn(ctx, "refine_turn")
            solution = await ctx.call("generator", asked)
            convo = (asked if conversation == "multi_turn" else convo) + [
                {"role": "assistant", "content": solution.text}
            ]
        else:
            seen = history if shared_history else history[-1:]
            solution = await ctx.call("generator", ctx.prompt("refine", history=seen))
    ctx.log("rounds", round_)
    ctx.log("accepted", float(accept))
    return solution.text


def _user_turn(ctx: Context, name: str) -> Messages:
    """The user message(s) of prompt `name` (a system message belongs only at the start of a conversation)."""
    if not ctx.prompts.has(name):
        raise KeyError(
            f"conversation: multi_turn and replies need the prompt {name!r}, which the {ctx.family!r} prompts lack; "
            f"use task.prompts: study/{ctx.family}.yaml or add it to your prompt file"
        )
    return [m for m in ctx.prompt(name) if m["role"] == "user"]
