"""A run's progress on stderr: a live bar on a terminal, else a plain line every few seconds."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from osmosis_run.cli.streams import err, silence, stderr
from osmosis_run.results import outcome
from osmosis_run.results.words import plural

if TYPE_CHECKING:
    from rich.text import Text

    from osmosis_run.results.records import ResultLine

PLAIN_EVERY_S = 5.0
# The live bar shows no rate (and no ETA) before this much of the run has passed: a rate over a
# few milliseconds (the first frame's "91292/s") means nothing.
MIN_RATE_S = 1.0


class Reporter:
    """Progress of a run: a live bar on a terminal, a plain line every few seconds otherwise.

    Plain lines are time based (a ticker thread, every ``every_s`` seconds of ``clock``), so
    a log shows the run moving even while a long rollout holds every slot; ``tick()`` is what
    the thread calls, and what a test with its own ``clock`` calls instead (``ticking=False``).
    ``quiet``: no announcement and no progress, only what the command prints at the end.
    """

    def __init__(
        self,
        *,
        jsonl: bool,
        live: bool,
        out: BinaryIO | None = None,
        quiet: bool = False,
        clock: Callable[[], float] = time.monotonic,
        every_s: float = PLAIN_EVERY_S,
        ticking: bool = True,
    ) -> None:
        self.jsonl = jsonl
        self.live = live and not quiet
        self.quiet = quiet
        self.out = out  # where --jsonl lines go (default: sys.stdout)
        self.clock = clock
        self.every_s = every_s
        self._ticking = ticking
        self._say_lock = threading.Lock()
        self.done = 0
        self.errors = 0
        self.reward_sum = 0.0
        self.rewarded = 0
        self.planned: int | None = None
        self._done_before = 0  # finished by an earlier invocation: not part of the rate
        self._start = clock()
        self._next_plain = self._start + every_s
        self._progress: Any = None
        self._ticker: threading.Thread | None = None
        self._closed = threading.Event()
        self.on_stdout_closed: Callable[[], None] | None = None
        self._task: Any = None
        self.gateway: Any = None  # the model gateway (its live figures), when the run has one

    def started(
        self, *, run_dir: Path, planned: int | None, done: int, kept_failures: int = 0
    ) -> None:
        """Announce the run (and the failures a resume keeps) and start the progress display."""
        self.planned = planned
        self.done = self._done_before = done
        resumed = f", {done} already done" if done else ""
        if kept_failures:
            resumed += (
                f" ({kept_failures} of them failed and are kept as they are; "
                "--retry-failed runs them again)"
            )
        total = plural(planned, "rollout") if planned is not None else "rollouts from stdin"
        if not self.quiet:
            err.print(f"osmosis-run: {total}{resumed} -> {run_dir}", markup=False)
        self._start = self.clock()
        self._next_plain = self._start + self.every_s
        if self.live:
            self._start_bar(planned, done)
        elif not self.quiet and self._ticking:
            self._ticker = threading.Thread(target=self._tick_until_closed, daemon=True)
            self._ticker.start()

    def _start_bar(self, planned: int | None, done: int) -> None:
        from rich.progress import BarColumn, Progress, TextColumn

        self._progress = Progress(
            TextColumn("[bold]eval"),
            BarColumn(),
            TextColumn("done [bold]{task.completed}{task.fields[of]}"),
            TextColumn("{task.fields[stats]}"),
            *_labelled_columns(),
            console=err.console,
            transient=True,
        )
        of = f"/{planned}" if planned is not None else ""
        self._task = self._progress.add_task(
            "eval", total=planned, completed=done, stats=self._stats(), of=of
        )
        self._progress.start()

    def rollout_finished(self, line: ResultLine, raw: bytes) -> None:
        """Count one finished rollout (and stream it with --jsonl)."""
        self.done += 1
        if outcome.is_error(line.status):
            self.errors += 1
        if line.reward is not None:
            self.rewarded += 1
            self.reward_sum += line.reward
        if self.jsonl:
            self._stream(raw)
        if self._progress is not None:
            self._progress.update(self._task, advance=1, stats=self._stats())

    def tick(self) -> None:
        """Print a plain progress line if ``every_s`` has passed since the last one."""
        if self.live or self.quiet or self._closed.is_set():
            return
        now = self.clock()
        if now < self._next_plain:
            return
        self._next_plain = now + self.every_s
        with self._say_lock:
            err.print(self.progress_line(now))

    def _tick_until_closed(self) -> None:
        while not self._closed.wait(max(self._next_plain - self.clock(), 0.01)):
            self.tick()

    def progress_line(self, now: float) -> Text:
        """The plain progress line: done/total, rate, ETA, errors, mean reward, elapsed."""
        elapsed = max(now - self._start, 0.0)
        ran = self.done - self._done_before
        rate = ran / elapsed if elapsed > 0 else 0.0
        from rich.text import Text

        text = Text("osmosis-run: ")
        if self.planned is not None:
            share = f" ({self.done / self.planned:.0%})" if self.planned else ""
            text.append(f"{self.done}/{self.planned}", style="bold")
            text.append(f" rollouts{share}, ")
        else:
            text.append(plural(self.done, "rollout"), style="bold")
            text.append(", ")
        text.append(f"{_rate(rate)}, ")
        if self.planned is not None:
            left = max(self.planned - self.done, 0)
            eta = _duration(left / rate) if rate > 0 else "-"
            text.append("ETA ")
            text.append(eta, style="cyan")
            text.append(", ")
        text.append("errors ")
        text.append(str(self.errors), style="bold red" if self.errors else "green")
        mean = f"{self.reward_sum / self.rewarded:.3f}" if self.rewarded else "-"
        text.append(f", mean reward {mean}{self._model_figures(', ')}")
        text.append(f", elapsed {_duration(elapsed)}")
        return text

    def already_done(self, raw: bytes) -> None:
        """A results line an earlier invocation wrote: part of the run's --jsonl output."""
        if self.jsonl:
            self._stream(raw)

    def stalled(self, rollout_id: str, seconds: float) -> None:
        """A rollout runs far longer than the others; say how to bound it."""
        self._say(
            f"osmosis-run: {rollout_id} has been running for {seconds:.0f}s; "
            "--agent-timeout S bounds every rollout"
        )

    def notice(self, message: str) -> None:
        """A backend's news (a lost Ray actor): one line on stderr, above the progress bar."""
        self._say(message)

    def blocked(self, rollout_id: str | None, seconds: float) -> None:
        """A rollout's synchronous code holds the event loop (called from another thread)."""
        who = f"rollout {rollout_id}" if rollout_id is not None else "a rollout"
        self._say(
            f"osmosis-run: {who} has held the event loop for {seconds:.0f}s (blocking code in "
            "an async workflow: use await or asyncio.to_thread); deadlines and the first Ctrl-C "
            "wait until it returns"
        )

    def _say(self, message: str) -> None:
        """One line on stderr, above the progress bar if there is one; from any thread."""
        with self._say_lock:
            progress = self._progress
            console = progress.console if progress is not None else err
            console.print(message, markup=False)

    def _stream(self, raw: bytes) -> None:
        """Write one results line to stdout; if the reader went away, stop the run cleanly."""
        out = self.out if self.out is not None else sys.stdout.buffer
        try:
            out.write(raw + b"\n")
            out.flush()
        except BrokenPipeError:
            self.jsonl = False
            silence(out)
            err.print(
                "osmosis-run: stdout was closed (--jsonl); stopping, finished rollouts are kept",
                markup=False,
            )
            if self.on_stdout_closed is not None:
                self.on_stdout_closed()

    def _stats(self) -> str:
        mean = f"{self.reward_sum / self.rewarded:.3f}" if self.rewarded else "-"
        return f"mean reward {mean}  errors {self.errors}{self._model_figures('  ')}"

    def _model_figures(self, sep: str) -> str:
        """The gateway's live figures (calls in flight, tokens/s, 429s), when the run has one."""
        if self.gateway is None:
            return ""
        live = self.gateway.live
        return (
            f"{sep}model calls in flight {live.in_flight}{sep}"
            f"{live.tokens_per_s():.0f} tok/s{sep}429s {live.rate_limited}"
        )

    def stopping(self) -> None:
        """The first Ctrl-C arrived."""
        self.close()
        err.print(
            "osmosis-run: stopping: cancelling rollouts in flight, keeping what finished "
            "(Ctrl-C again to quit at once)",
            markup=False,
        )

    def close(self) -> None:
        """Stop the live display and the ticker."""
        self._closed.set()
        ticker, self._ticker = self._ticker, None
        if ticker is not None and ticker is not threading.current_thread():
            ticker.join()
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


def _rate(per_s: float) -> str:
    if per_s >= 10:
        return f"{per_s:.0f}/s"
    return f"{per_s:.1f}/s" if per_s >= 1 else f"{per_s:.2f}/s"


def _duration(seconds: float) -> str:
    """``42s``, ``3m05s``, ``2h07m``: short enough for a progress line."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def _labelled_columns() -> tuple[Any, ...]:
    """The live bar's rate, elapsed and ETA columns, each with its label (rich loaded late)."""
    from rich.progress import ProgressColumn, Task
    from rich.text import Text

    def settled(task: Task) -> bool:
        """Whether enough of the run has passed for a rate (and an ETA) to mean something."""
        return task.finished_speed is not None or (task.elapsed or 0.0) >= MIN_RATE_S

    class Rate(ProgressColumn):
        """Rollouts per second, as rich estimates them over its recent window (once settled)."""

        def render(self, task: Task) -> Text:
            speed = (task.finished_speed or task.speed) if settled(task) else None
            return Text("rate " + (_rate(speed) if speed else "-"))

    class Clock(ProgressColumn):
        """``elapsed 1m05s`` or ``ETA 42s`` (once settled)."""

        def __init__(self, label: str) -> None:
            super().__init__()
            self.label = label

        def render(self, task: Task) -> Text:
            if self.label == "elapsed":
                seconds = task.elapsed
            else:
                seconds = task.time_remaining if settled(task) else None
            return Text(f"{self.label} {_duration(seconds) if seconds is not None else '-'}")

    return Rate(), Clock("elapsed"), Clock("ETA")


def make_reporter(*, jsonl: bool, out: BinaryIO | None = None, quiet: bool = False) -> Reporter:
    """A reporter for this terminal (live only when stderr is one); --jsonl lines to ``out``.

    Live means a real terminal: ``FORCE_COLOR`` makes rich colour a pipe or a log file, but
    never redraw in one (no cursor movement, no carriage returns): those get plain lines.
    """
    return Reporter(jsonl=jsonl, live=stderr.isatty(), out=out, quiet=quiet)
