"""A two-round debate, written with the public workflow API (see docs/custom_workflows.md).

Two debaters answer; each then sees the other's answer and may revise; a judge picks the final one.
Train it with:  rolecast train --workflow examples/debate.py:debate --sharing isolated
"""

from rolecast.workflows import AnswerClaim, Context, PickClaim, parse_choice, workflow


@workflow("debate", prompts={"debater": ["solve", "refine"], "judge": ["aggregate"]})
async def debate(ctx: Context, rounds: int = 2) -> str:
    answers = await ctx.gather(*(ctx.call("debater", ctx.prompt("solve"), instance=i) for i in range(2)))
    for _ in range(rounds - 1):
        # each debater sees the other's latest answer as the critique of its own
        answers = await ctx.gather(
            *(
                ctx.call(
                    "debater",
                    ctx.prompt("refine", history=[{"solution": mine.text, "critique": other.text}]),
                    instance=i,
                )
                for i, (mine, other) in enumerate([(answers[0], answers[1]), (answers[1], answers[0])])
            )
        )
    for a in answers:
        a.claim = AnswerClaim(a.text)
    verdict = await ctx.call("judge", ctx.prompt("aggregate", solutions=[a.text for a in answers]))
    pick = parse_choice(verdict.text, len(answers))
    verdict.claim = PickClaim(pick, [a.text for a in answers])
    return answers[pick].text
