"""Voting: N generators answer the same prompt independently; an aggregator picks one with \\boxed{i}."""

from collections import Counter
from typing import Annotated

from pydantic import Field

from rolecast.core.episode import AnswerClaim, PickClaim
from rolecast.workflows.api import Context, workflow
from rolecast.workflows.parsing import ParserSetName, parser_set


@workflow("voting", prompts={"generator": ["solve"], "aggregator": ["aggregate"]})
async def voting(ctx: Context, n: Annotated[int, Field(ge=1)] = 3, parsers: ParserSetName = "rolecast") -> str:
    rules = parser_set(parsers)
    solutions = await ctx.gather(*(ctx.call("generator", ctx.prompt("solve"), instance=i) for i in range(n)))
    texts = [s.text for s in solutions]
    for s in solutions:
        s.claim = AnswerClaim(s.text)
    pick = await ctx.call("aggregator", ctx.prompt("aggregate", solutions=texts))
    choice = rules.choice(pick.text, n)
    pick.claim = PickClaim(choice, texts)

    answers = [ctx.extract(t) for t in texts]
    majority, votes = Counter(answers).most_common(1)[0]
    ctx.log("agree_majority", float(votes > 1 and answers[choice] == majority))
    ctx.log("distinct_answers", len(set(answers)) / n)
    return texts[choice]
