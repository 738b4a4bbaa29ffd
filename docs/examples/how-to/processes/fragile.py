# fragile.py: graders of the kind that take a whole process down with them
import ctypes
import time

from osmosis_run import Grader, GraderContext


class NativeGrader(Grader):
    """Stands for a grader calling native code: on the label "CRASH" it segfaults."""

    async def grade(self, ctx: GraderContext) -> None:
        if ctx.label == "CRASH":
            ctypes.string_at(0)  # reads address 0: SIGSEGV, the interpreter dies
        ctx.set_reward(1.0)


class StuckGrader(Grader):
    """Stands for code that never yields: on the label "STUCK" it blocks for a minute."""

    async def grade(self, ctx: GraderContext) -> None:
        if ctx.label == "STUCK":
            time.sleep(60)  # noqa: ASYNC251 (the point: it blocks the event loop, never yields)
        ctx.set_reward(1.0)
