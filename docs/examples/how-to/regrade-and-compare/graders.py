# graders.py: a grader that forgives case and punctuation
from osmosis_run import Grader, GraderContext


class Lenient(Grader):
    async def grade(self, ctx: GraderContext) -> None:
        assert ctx.sample is not None
        answer = ctx.sample.messages[-1]["content"]
        ctx.set_reward(1.0 if _words(answer) == _words(ctx.label or "") else 0.0)


def _words(text: str) -> list[str]:
    return "".join(c if c.isalnum() else " " for c in text.lower()).split()
