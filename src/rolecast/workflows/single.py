"""Single-agent control: one solver call."""

from rolecast.core.episode import AnswerClaim
from rolecast.workflows.api import Context, workflow


@workflow("single", prompts={"solver": ["solve"]})
async def single(ctx: Context) -> str:
    answer = await ctx.call("solver", ctx.prompt("solve"))
    answer.claim = AnswerClaim(answer.text)
    return answer.text
