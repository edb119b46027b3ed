"""Orchestrator-workers: strategies are proposed, workers solve in parallel, a synthesizer decides."""

import re
from typing import Annotated

from pydantic import Field

from rolecast.core.episode import AnswerClaim
from rolecast.workflows.api import Context, workflow
from rolecast.workflows.parsing import ParserSetName, parser_set

# When the orchestrator proposes nothing parseable, one worker still solves the problem directly.
FALLBACK_STRATEGY = "Solve the problem directly."


@workflow("orch_workers", prompts={"orchestrator": ["orchestrate"], "worker": ["work"], "synthesizer": ["synthesize"]})
async def orch_workers(ctx: Context, k: Annotated[int, Field(ge=1)] = 3, parsers: ParserSetName = "rolecast") -> str:
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

    final = await ctx.call("synthesizer", ctx.prompt("synthesize", strategies=strategies, solutions=texts))
    final.claim = AnswerClaim(final.text)
    return final.text
