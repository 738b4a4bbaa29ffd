"""Everything the CLI shows: progress, the summary table, verdicts and errors, all on stderr.

stdout carries only ``--jsonl`` results lines (and ``--json`` documents), so the command
composes in pipelines. stderr is the human channel: losing it (closed, or its reader gone, as
with ``2>&1 | head -1``) silences the rendering and never fails the run.
"""

from __future__ import annotations

import io
import os
import re
import shlex
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, BinaryIO, cast

from osmosis_run.results import outcome
from osmosis_run.results.words import plural

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from osmosis_run.results.gates import Verdict
    from osmosis_run.results.records import ResultLine, Summary
    from osmosis_run.run.scheduler import RunOutcome


class _Stderr(io.TextIOBase):
    """``sys.stderr`` as it is at each write; once writing to it fails, nothing.

    The first failure points file descriptor 2 at /dev/null, so that later writes (user code's,
    logging's, the interpreter's at exit) cannot fail either. No stderr at all (started with
    it closed): nothing.
    """

    def write(self, text: str) -> int:
        stream = _current_stderr()
        try:
            if stream is not None:
                stream.write(text)
        except (OSError, ValueError):  # ValueError: the stream object itself was closed
            _lose_stderr()
        return len(text)

    def flush(self) -> None:
        stream = _current_stderr()
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            _lose_stderr()

    def isatty(self) -> bool:
        stream = _current_stderr()
        try:
            return stream is not None and stream.isatty()
        except (OSError, ValueError):
            return False

    def fileno(self) -> int:
        stream = _current_stderr()
        if stream is None:
            raise io.UnsupportedOperation("no stderr")
        return stream.fileno()


def _current_stderr() -> IO[str] | None:
    """sys.stderr, or what it stands for while a live display redirects it (as rich does)."""
    stream = sys.stderr
    return cast("IO[str] | None", getattr(stream, "rich_proxied_file", stream))


def _lose_stderr() -> None:
    """stderr is gone: point it (and stdout, when that is the same pipe) at /dev/null."""
    stream = _current_stderr()
    try:
        if stream is None or stream.fileno() != 2:
            return  # not the process's stderr (a test's capture): only drop the output
    except (OSError, ValueError):
        return
    shared = _same_file(1, 2)
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        return
    try:
        os.dup2(devnull, 2)
        if shared:
            os.dup2(devnull, 1)
    except OSError:
        pass  # no descriptors to point (not a real process's streams)
    finally:
        os.close(devnull)


def _same_file(a: int, b: int) -> bool:
    try:
        return os.path.samestat(os.fstat(a), os.fstat(b))
    except OSError:
        return False


class Styled:
    """Text with styles, built without rich; rich renders it as a ``Text`` (``__rich__``).

    ``style`` is the whole text's base style, as ``Text(text, style=...)`` has it; each
    appended part can add its own.
    """

    __slots__ = ("parts", "style")

    def __init__(self, text: str = "", style: str | None = None) -> None:
        self.style = style
        self.parts: list[tuple[str, str | None]] = [(text, None)] if text else []

    def append(self, text: str, style: str | None = None) -> Styled:
        """Add ``text`` at the end, with its own ``style``."""
        self.parts.append((text, style))
        return self

    def rstrip(self) -> None:
        """Remove trailing whitespace, as ``Text.rstrip`` does."""
        while self.parts:
            text, style = self.parts[-1]
            stripped = text.rstrip()
            if stripped:
                self.parts[-1] = (stripped, style)
                return
            self.parts.pop()

    @property
    def plain(self) -> str:
        """The text without its styles."""
        return "".join(text for text, _ in self.parts)

    def __rich__(self) -> Text:
        from rich.text import Text

        first, *rest = self.parts or [("", None)]
        text = Text(first[0], style=self.style or "")
        if first[1]:
            text.stylize(first[1])
        for part, style in rest:
            text.append(part, style=style)
        return text


# rich's own pattern for emoji codes (``:smile:``): text it could match goes through rich.
_MAYBE_EMOJI = re.compile(r"(:(\S*?)(?:(?:\-)(emoji|text))?:)")


class _Human:
    """The people's channel, on stderr: rich's Console, loaded only where rich shows something.

    Where rich would print no styles (stderr is not a terminal, and neither ``FORCE_COLOR`` nor
    ``TTY_COMPATIBLE`` says otherwise), a line of plain text, or of ``Styled`` text, is written
    as rich would write it, without loading rich: importing and starting it is 15-20 ms of
    every run. Markup, rich's renderables (tables), text rich would change (control or
    non-printable characters, tabs, trailing spaces, what could be an emoji code) and any
    terminal go through a Console made on first use (``console``).
    """

    def __init__(self, file: _Stderr) -> None:
        self.file = file
        self._console: Console | None = None
        self._plain: bool | None = None

    @property
    def console(self) -> Console:
        """The rich Console on stderr (made, and rich loaded, on first use)."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(
                file=cast("IO[str]", self.file), highlight=False, soft_wrap=True
            )
        return self._console

    def print(self, *objects: Any, markup: bool | None = None, emoji: bool | None = None) -> None:
        """``Console.print(*objects, markup=..., emoji=...)``, plain where that is the same."""
        if self._plain is None:
            self._plain = self._console is None and not _styled_here(self.file)
        text = _as_written(objects, markup, emoji) if self._plain else None
        if text is None:
            self.console.print(*objects, markup=markup, emoji=emoji)
            return
        self.file.write(text + "\n")
        self.file.flush()


def _styled_here(file: _Stderr) -> bool:
    """Whether rich would see a terminal here (and print styles)."""
    if "TTY_COMPATIBLE" in os.environ or "FORCE_COLOR" in os.environ:
        return True  # rich's own rules for these, whatever they are in its version
    return file.isatty()


def _as_written(objects: Sequence[Any], markup: bool | None, emoji: bool | None) -> str | None:
    """What rich writes for ``objects`` without styles, or None if only rich can say."""
    parts = []
    for obj in objects:
        if isinstance(obj, Styled):
            parts.append(obj.plain)
        elif isinstance(obj, str) and markup is False:
            parts.append(obj)
        else:
            return None
    text = " ".join(parts)
    if not text.replace("\n", "").isprintable():
        return None
    if text.endswith(" ") or " \n" in text:  # some versions of rich strip it from long lines
        return None
    if emoji is not False and _MAYBE_EMOJI.search(text):
        return None
    return text


stderr = _Stderr()
err = _Human(stderr)

PLAIN_EVERY_S = 5.0


def print_error(exc: BaseException) -> None:
    """Print a user-facing error in one line; a user's import error keeps its traceback."""
    from osmosis_run.errors import UserModuleImportError

    if isinstance(exc, UserModuleImportError) and exc.__cause__ is not None:
        cause = exc.__cause__
        stderr.write("".join(traceback.format_exception(cause)))
    err.print(f"error: {exc}", markup=False)


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

    def progress_line(self, now: float) -> Styled:
        """The plain progress line: done/total, rate, ETA, errors, mean reward, elapsed."""
        elapsed = max(now - self._start, 0.0)
        ran = self.done - self._done_before
        rate = ran / elapsed if elapsed > 0 else 0.0
        text = Styled("osmosis-run: ")
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
            _silence(out)
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

    class Rate(ProgressColumn):
        """Rollouts per second, as rich estimates them over its recent window."""

        def render(self, task: Task) -> Text:
            speed = task.finished_speed or task.speed
            return Text("rate " + (_rate(speed) if speed else "-"))

    class Clock(ProgressColumn):
        """``elapsed 1m05s`` or ``ETA 42s``."""

        def __init__(self, label: str) -> None:
            super().__init__()
            self.label = label

        def render(self, task: Task) -> Text:
            seconds = task.elapsed if self.label == "elapsed" else task.time_remaining
            return Text(f"{self.label} {_duration(seconds) if seconds is not None else '-'}")

    return Rate(), Clock("elapsed"), Clock("ETA")


def _silence(out: BinaryIO) -> None:
    """Point the results stream at /dev/null, so that flushing it at exit cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, out.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # not a real file (a test's capture)
        pass


def make_reporter(*, jsonl: bool, out: BinaryIO | None = None, quiet: bool = False) -> Reporter:
    """A reporter for this terminal (live only when stderr is one); --jsonl lines to ``out``.

    Live means a real terminal: ``FORCE_COLOR`` makes rich colour a pipe or a log file, but
    never redraw in one (no cursor movement, no carriage returns): those get plain lines.
    """
    return Reporter(jsonl=jsonl, live=stderr.isatty(), out=out, quiet=quiet)


def print_unredacted_key(min_length: int) -> None:
    """Say, once, that a short API key is not redacted (it cannot be told from plain text)."""
    err.print(
        f"osmosis-run: the API key is shorter than {min_length} characters; it is used, "
        "but not redacted from outputs",
        markup=False,
    )


def _fmt(value: float | None, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def summary_table(summary: Summary, *, title: str) -> Styled:
    """The summary as aligned label/value lines; never wrapped, so logs stay greppable."""
    text = Styled(title + "\n", style="bold")
    rows = summary_rows(summary)
    width = max(len(label) for label, _ in rows) + 2
    for label, value in rows:
        text.append(label.ljust(width), style="bold")
        text.append(value + "\n")
    text.rstrip()
    return text


def summary_rows(s: Summary) -> list[tuple[str, str]]:
    """The labelled lines of a summary, shared by the table and plain renderings."""
    from osmosis_run.results.records import count_rows

    rows = count_rows(s)
    g, a = s.reward_graded, s.reward_all
    rows.append(
        (
            "reward (graded)",
            f"mean {_fmt(g.mean)}  std {_fmt(g.std)}  min {_fmt(g.min)}  "
            f"median {_fmt(g.median)}  max {_fmt(g.max)}  (n={g.count})",
        )
    )
    rows.append(
        (
            "reward (all)",
            f"mean {_fmt(a.mean)}  std {_fmt(a.std)}  (n={a.count}, failed rollouts count as 0)",
        )
    )
    rows.append(
        (
            "pass rate",
            f"{_fmt(s.pass_rate, '.1%')} ({s.passed}/{a.count} at reward >= {s.pass_threshold:g})",
        )
    )
    if s.pass_at_k:
        rows.append(("pass@k", "  ".join(f"k={p.k} {p.value:.3f}" for p in s.pass_at_k)))
        rows.append(("pass^k", "  ".join(f"k={p.k} {p.value:.3f}" for p in s.pass_hat_k)))
    for name, d in (("workflow ms", s.workflow_ms), ("grader ms", s.grader_ms)):
        if d.count:
            rows.append(
                (
                    name,
                    f"p50 {_fmt(d.p50, '.1f')}  p90 {_fmt(d.p90, '.1f')}  p99 {_fmt(d.p99, '.1f')}",
                )
            )
    if s.wall_s is not None:
        rate = f"{s.throughput_per_s:.1f}/s" if s.throughput_per_s else "-"
        rows.append(("wall", f"{s.wall_s:.2f}s  ({rate})"))
    if s.model is not None:
        from osmosis_run.results.records import model_rows

        rows.extend(model_rows(s.model))
    for key, group in s.groups.items():
        rows.append(
            (
                f"{s.group_by}={key}",
                f"{plural(group.rollouts, 'rollout')}  mean {_fmt(group.mean_reward)}  "
                f"pass {_fmt(group.pass_rate, '.1%')}  errors {group.errors}",
            )
        )
    return rows


def print_summary(outcome: RunOutcome) -> None:
    """The end-of-run table and the first errors."""
    summary = outcome.summary
    state = "interrupted" if summary.interrupted else "finished"
    if outcome.failure is not None:
        state = "stopped"
    err.print(summary_table(summary, title=f"osmosis-run: {state} {outcome.run_dir}"))
    for example in summary.first_errors:
        message = (example.error_message or "").splitlines()[0:1]
        err.print(
            f"  {example.status} {example.rollout_id}: {example.error_category}: "
            f"{message[0] if message else ''}",
            markup=False,
        )
    more = summary.errors - len(summary.first_errors)
    if more > 0 and summary.first_errors:
        err.print(
            f"  ... and {more} more (osmosis-run report {outcome.run_dir} lists them by category)",
            markup=False,
        )


def print_resume_hint(run_dir: Path, *, failed: bool = False) -> None:
    """How to continue a run that was interrupted or (``failed``) stopped by the machine."""
    command = shlex.join(["osmosis-run", *sys.argv[1:]])
    why = "fix it and resume" if failed else "interrupted; resume"
    err.print(f"osmosis-run: {why} with: {command}", markup=False)
    err.print(f"osmosis-run: finished rollouts are kept in {run_dir}", markup=False)


def print_verdicts(verdicts: Sequence[Verdict]) -> None:
    """One line per gate."""
    for verdict in verdicts:
        mark = "ok" if verdict.held else "FAILED"
        err.print(f"{mark}: {verdict.message}", markup=False)


# --- compare: shared by `osmosis-run compare` and `eval --baseline` ---------------------------

if TYPE_CHECKING:
    from osmosis_run.results.compare import Comparison, Delta

SHOWN_ROLLOUTS = 20


def comparison_table(cmp: Comparison) -> Table:
    """Mean reward and pass rate of A and B, B - A and its confidence interval."""
    from rich.table import Table
    from rich.text import Text

    table = Table(
        title=Text(f"osmosis-run: compare {cmp.run_a} -> {cmp.run_b}"),
        title_justify="left",
        box=None,
        pad_edge=False,
    )
    ci = f"{cmp.confidence:.0%} CI"
    for name in ("", "A", "B", "B - A", ci):
        table.add_column(name, justify="left" if not name else "right")
    for label, delta, spec in (
        ("mean reward", cmp.mean, ".3f"),
        ("pass rate", cmp.pass_rate, ".1%"),
    ):
        table.add_row(label, *(Text(cell) for cell in _delta_cells(delta, spec)))
    return table


def _delta_cells(delta: Delta, spec: str) -> tuple[str, str, str, str]:
    signed = "+" + spec
    interval = "-"
    if delta.ci is not None:
        interval = f"[{format(delta.ci.low, signed)}, {format(delta.ci.high, signed)}]"
    change = "-" if delta.delta is None else format(delta.delta, signed)
    return _fmt(delta.a, spec), _fmt(delta.b, spec), change, interval


def print_comparison(cmp: Comparison) -> None:
    """The comparison table, pairing counts, flips, new and fixed errors, and notes (stderr)."""
    err.print(comparison_table(cmp))
    lines = [
        f"paired: {plural(cmp.paired, 'rollout')} over {plural(cmp.paired_rows, 'row')}; unpaired: "
        f"{cmp.only_in_a} only in A, {cmp.only_in_b} only in B; unscored: {cmp.unscored}",
    ]
    lines += _id_list("pass -> fail", cmp.pass_to_fail)
    lines += _id_list("fail -> pass", cmp.fail_to_pass)
    for title, changes in (("new errors", cmp.new_errors), ("fixed errors", cmp.fixed_errors)):
        if changes:
            lines.append(f"{title} ({len(changes)}):")
            for change in changes[:SHOWN_ROLLOUTS]:
                message = (change.error_message or "").strip().splitlines()[0:1]
                lines.append(
                    f"  {change.rollout_id}: {change.error_category or change.status}: "
                    f"{message[0] if message else ''}"
                )
            if len(changes) > SHOWN_ROLLOUTS:
                lines.append(f"  ... and {len(changes) - SHOWN_ROLLOUTS} more")
    lines += [f"note: {note}" for note in cmp.notes]
    for line in lines:
        err.print(line, markup=False)


def _id_list(title: str, ids: Sequence[str]) -> list[str]:
    if not ids:
        return []
    shown = ", ".join(ids[:SHOWN_ROLLOUTS])
    more = f" (+{len(ids) - SHOWN_ROLLOUTS} more)" if len(ids) > SHOWN_ROLLOUTS else ""
    return [f"{title} ({len(ids)}): {shown}{more}"]
