"""Orchestrator-workers: strategies are proposed, workers solve in parallel, a synthesizer decides."""

import re
from typing import Annotated, Literal

from pydantic import Field

from rolecast.core.episode import AnswerClaim, PickClaim
from rolecast.workflows.api import Context, workflow
from rolecast.workflows.parsing import ParserSetName, parser_set

# When the orchestrator proposes nothing parseable, one worker still solves the problem directly.
FALLBACK_STRATEGY = "Solve the problem directly."


@workflow(
    "orch_workers",
    prompts={"orchestrator": ["orchestrate"], "worker": ["work"], "synthesizer": ["synthesize", "synthesize_pick"]},
)
async def orch_workers(
    ctx: Context,
    k: Annotated[int, Field(ge=1)] = 3,
    parsers: ParserSetName = "rolecast",
    synthesis: Literal["answer", "pick"] = "answer",
) -> str:
    """`synthesis`: "answer" (the study's) -- the synthesizer writes the final answer itself; "pick" -- it names a
    worker (\\boxed{i}, read by the aggregator's rule) and the episode's answer is that worker's solution, so a
    synthesizer that judges well cannot lose the right answer in copying it (a program, say)."""
    rules = parser_set(parsers)
    plan = await ctx.call("orchestrator", ctx.prompt("orchestrate", k=k))
    # first_match: STRATEGY lines, then a numbered list, then lines, then the whole reply; rolecast: STRATEGY lines
    strategies = rules.strategies(plan.text, k)
    proposed = len(re.findall(r"STRATEGY\s*\d+\s*:", plan.text, re.I))
    ctx.log("strategy_count", len(strategies))
    ctx.log("strategy_distinct", len(strategies) / proposed if proposed else 0.0)
    strategies = strategies or [FALLBACK_STRATEGY]

    works = await ctx.gather(
        *(ctx.call("worker", ctx.prompt("work", strategy=s), instance=i) for i, s in enumerate(strategies))
    )
    texts = [w.text for w in works]
    for w in works:
        w.claim = AnswerClaim(w.text)
    ctx.log("worker_diversity", len({ctx.extract(t) for t in texts}) / len(texts))

    if synthesis == "pick":
        final = await ctx.call("synthesizer", ctx.prompt("synthesize_pick", strategies=strategies, solutions=texts))
        choice = rules.choice(final.text, len(texts))
        final.claim = PickClaim(choice, texts)
        return texts[choice]
    final = await ctx.call("synthesizer", ctx.prompt("synthesize", strategies=strategies, solutions=texts))
    final.claim = AnswerClaim(final.text)
    return final.text
