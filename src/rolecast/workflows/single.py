"""Single-agent control: one solver call."""

from .api import Context, workflow


@workflow("single", prompts={"solver": ["solve"]})
async def single(ctx: Context) -> str:
    answer = await ctx.call("solver", ctx.prompt("solve"))
    answer.claim = {"kind": "answer", "text": answer.text}
    return answer.text
