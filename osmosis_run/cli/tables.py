"""The tables the CLI prints: a run's summary and the comparison of two runs.

The summary's rows are ``osmosis_run.reports.summary_rows``'s, the ones the GitHub step summary
shows too. Every table is plain aligned lines, never wrapped (logs and files stay greppable) and
never padded at the end of a line.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from typing import TYPE_CHECKING

from osmosis_run.cli.streams import err
from osmosis_run.reports.summary_rows import summary_rows
from osmosis_run.results.words import plural

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

    from osmosis_run.results.compare import Comparison, Delta
    from osmosis_run.results.records import Summary
    from osmosis_run.run.scheduler import RunOutcome


def summary_table(summary: Summary, *, title: str) -> Text:
    """The summary as aligned label/value lines; never wrapped, so logs stay greppable."""
    from rich.text import Text

    text = Text(title + "\n", style="bold")
    rows = summary_rows(summary)
    width = max(len(label) for label, _ in rows) + 2
    for label, value in rows:
        text.append(label.ljust(width), style="bold")
        text.append(value + "\n")
    return without_trailing_spaces(text)


def without_trailing_spaces(text: Text) -> Text:
    """``text`` with every line's trailing whitespace (and the last newlines) removed."""
    from rich.text import Text

    lines = text.split("\n", allow_blank=True)
    for line in lines:
        line.rstrip()
    joined = Text("\n").join(lines)
    joined.rstrip()
    return joined


def print_summary(outcome: RunOutcome) -> None:
    """The end-of-run table and the first errors."""
    summary = outcome.summary
    state = "interrupted" if summary.interrupted else "finished"
    if outcome.failure is not None or summary.budget is not None:
        state = "stopped"
    err.print(summary_table(summary, title=f"osmosis-run: {state} {outcome.run_dir}"))
    for example in summary.first_errors:
        message = (example.error_message or "").splitlines()[0:1]
        err.print(
            f"  {example.status} {example.rollout_id}: {example.error_category}: "
            f"{message[0] if message else ''}".rstrip(),
            markup=False,
        )
    more = summary.errors - len(summary.first_errors)
    if more > 0 and summary.first_errors:
        err.print(
            f"  ... and {more} more (osmosis-run report {outcome.run_dir} lists them by category)",
            markup=False,
        )


SHOWN_ROLLOUTS = 20


def aligned(
    title: str,
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    right: Container[int] = (),
) -> Text:
    """A table as lines: a bold title and header, columns two spaces apart (those in ``right``
    right-aligned), no trailing spaces."""
    from rich.cells import cell_len
    from rich.text import Text

    widths = [max(cell_len(cell) for cell in column) for column in zip(header, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        padded = []
        for number, (cell, width) in enumerate(zip(cells, widths, strict=True)):
            pad = " " * (width - cell_len(cell))
            padded.append(pad + cell if number in right else cell + pad)
        return "  ".join(padded).rstrip()

    text = Text(title + "\n", style="bold")
    text.append(line(header) + "\n", style="bold")
    for row in rows:
        text.append(line(row) + "\n")
    text.rstrip()
    return text


def comparison_table(cmp: Comparison) -> Text:
    """Mean reward and pass rate of A and B, B - A and its confidence interval."""
    rows = [
        (label, *_delta_cells(delta, spec))
        for label, delta, spec in (
            ("mean reward", cmp.mean, ".3f"),
            ("pass rate", cmp.pass_rate, ".1%"),
        )
    ]
    header = ("", "A", "B", "B - A", f"{cmp.confidence:.0%} CI")
    title = f"osmosis-run: compare {cmp.run_a} -> {cmp.run_b}"
    return aligned(title, header, rows, right=range(1, len(header)))


def _delta_cells(delta: Delta, spec: str) -> tuple[str, str, str, str]:
    signed = "+" + spec
    interval = "-"
    if delta.ci is not None:
        interval = f"[{format(delta.ci.low, signed)}, {format(delta.ci.high, signed)}]"
    change = "-" if delta.delta is None else format(delta.delta, signed)
    return _fmt(delta.a, spec), _fmt(delta.b, spec), change, interval


def print_comparison(cmp: Comparison, out: Console | None = None) -> None:
    """The comparison table, pairing counts, flips, new and fixed errors, and notes.

    On ``out`` (compare's product: stdout), else on stderr (the end of an eval's run).
    """
    console = out if out is not None else err.console
    console.print(comparison_table(cmp))
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
        console.print(line.rstrip(), markup=False, emoji=False)


def _id_list(title: str, ids: Sequence[str]) -> list[str]:
    if not ids:
        return []
    shown = ", ".join(ids[:SHOWN_ROLLOUTS])
    more = f" (+{len(ids) - SHOWN_ROLLOUTS} more)" if len(ids) > SHOWN_ROLLOUTS else ""
    return [f"{title} ({len(ids)}): {shown}{more}"]


def _fmt(value: float | None, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)
