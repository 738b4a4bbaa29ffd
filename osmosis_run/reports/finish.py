"""What follows a run: the error budget, the gates, the baseline comparison, the report files.

``osmosis-run eval`` ends in ``finish_run`` and ``osmosis-run report`` in ``write_report_files``.
Nothing here prints: what happens is told to the caller's callbacks as it happens (a comparison
made, a file written), and ``Finish`` says which rules held and how the run ends, for the CLI to
render and turn into an exit code. A run already loaded is never read again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from osmosis_run.errors import ConfigError, RunDirError
from osmosis_run.results.gates import Verdict, check_error_budget, check_gates
from osmosis_run.results.records import Summary
from osmosis_run.results.rundata import RunData
from osmosis_run.run.settings import AfterRun
from osmosis_run.store.layout import RESULTS, RUN_CONFIG

# The report writers and the comparison are imported when a run asks for them: every eval
# passes through here, and most ask for neither (start-up time is benchmarked).
if TYPE_CHECKING:
    from osmosis_run.results.compare import Comparison

__all__ = [
    "Ending",
    "Finish",
    "OnComparison",
    "OnWritten",
    "ReportKind",
    "check_targets",
    "finish_run",
    "write_report_files",
]

# How a finished run ends: every rule held, a gate (or the regression check) failed, or more
# rollouts failed than the error budget allows (which wins over a failed gate).
Ending = Literal["ok", "gate_failed", "error_budget"]
ReportKind = Literal["JUnit", "HTML"]
# A report target as the user gave it (it is told back as given).
Target = str | Path
OnComparison = Callable[["Comparison"], None]
OnWritten = Callable[[ReportKind, Target], None]


def _ignore(*_: object) -> None:
    return None


@dataclass(frozen=True, slots=True)
class Finish:
    """The verdicts of a finished run and how it ends.

    Attributes:
        verdicts: the gates, the regression check (with ``--baseline``), then the error budget.
        ending: what the verdicts decide.
    """

    verdicts: list[Verdict]
    ending: Ending


def check_targets(after: AfterRun) -> None:
    """Refuse report targets and a baseline that cannot work, before anything runs.

    Raises:
        ConfigError: ``--html`` or ``--junit`` is a directory, or under a file.
        RunDirError: ``--baseline`` is not a run directory.
    """
    for option, target in (("--html", after.html), ("--junit", after.junit)):
        if target is not None:
            _check_target(option, target)
    if after.baseline is not None:
        _check_baseline(Path(after.baseline))


def _check_target(option: str, target: str) -> None:
    path = Path(target)
    if path.is_dir():
        example = path / ("report.html" if option == "--html" else "junit.xml")
        raise ConfigError(f"{option} {target} is a directory; give a file, for example {example}")
    folder = next((p for p in path.parents if p.exists()), None)
    if folder is not None and not folder.is_dir():
        raise ConfigError(f"cannot write {target}: {folder} is a file; choose another path")


def _check_baseline(base: Path) -> None:
    if not base.exists():
        raise RunDirError(
            f"--baseline {base} does not exist; give the directory `osmosis-run eval` printed"
        )
    if not (base / RESULTS).is_file() and not (base / RUN_CONFIG).is_file():
        raise RunDirError(
            f"--baseline {base} is not an osmosis-run run directory (no results.jsonl); "
            "give the directory `osmosis-run eval` printed"
        )


def finish_run(
    after: AfterRun,
    summary: Summary,
    run_dir: Path,
    *,
    on_comparison: OnComparison = _ignore,
    on_written: OnWritten = _ignore,
) -> Finish:
    """Judge a finished run and write its reports: what ``eval`` does once the rollouts are done.

    The run directory is read back once, and only when ``--baseline``, ``--junit`` or
    ``--html`` needs its lines; the gates and the budget judge ``summary``.

    Raises:
        OsmosisRunError: the run or the baseline cannot be read, or a report cannot be written.
    """
    budget = check_error_budget(summary, after.max_error_rate)
    gates = check_gates(summary, after.fail_under)
    run = _read_back(after, run_dir)
    regression = _baseline_verdicts(after, run, on_comparison)
    verdicts = [*gates, *regression, budget]
    if run is not None:
        write_report_files(
            run,
            junit=after.junit,
            html=after.html,
            summary=summary,
            on_written=on_written,
        )
    from osmosis_run.reports.step_summary import append_step_summary, markdown_summary

    title = f"osmosis-run eval: {run_dir.name}"
    append_step_summary(markdown_summary(summary, verdicts, run_dir=run_dir, title=title))
    return Finish(verdicts=verdicts, ending=_ending(budget, [*gates, *regression]))


def _read_back(after: AfterRun, run_dir: Path) -> RunData | None:
    if after.baseline is None and after.junit is None and after.html is None:
        return None
    from osmosis_run.reports.report import open_run

    return open_run(run_dir, pass_threshold=after.pass_threshold, group_by=after.group_by)


def _baseline_verdicts(
    after: AfterRun, run: RunData | None, on_comparison: OnComparison
) -> list[Verdict]:
    """``--baseline``: compare this run with an earlier one, as ``osmosis-run compare`` does."""
    if after.baseline is None or run is None:
        return []
    from osmosis_run.reports.report import open_run
    from osmosis_run.results.compare import compare_runs, regression_verdict

    comparison = compare_runs(
        open_run(Path(after.baseline)), run, pass_threshold=after.pass_threshold
    )
    on_comparison(comparison)
    if after.fail_on_regression is None:
        return []
    return [regression_verdict(comparison, after.fail_on_regression)]


def _ending(budget: Verdict, rules: Sequence[Verdict]) -> Ending:
    if not budget.held:
        return "error_budget"
    return "ok" if all(v.held for v in rules) else "gate_failed"


def write_report_files(
    run: RunData,
    *,
    junit: Target | None,
    html: Target | None,
    summary: Summary | None = None,
    on_written: OnWritten = _ignore,
) -> None:
    """Write the JUnit and HTML reports of a run already loaded, JUnit first.

    Args:
        run: the run, as ``open_run`` read it.
        junit: where the JUnit XML goes, or None.
        html: where the HTML report goes, or None.
        summary: the summary the JUnit suite reports; by default the run's own.
        on_written: told each report written, with its target as given.

    Raises:
        ConfigError: a target cannot be written.
    """
    if junit is not None:
        from osmosis_run.reports.junit import write_junit

        judged = summary if summary is not None else run.summary
        write_junit(run.lines, judged, Path(junit), suite_name=run.run_dir.name)
        on_written("JUnit", junit)
    if html is not None:
        from osmosis_run.reports.html_report import save_run_html

        save_run_html(run, Path(html))
        on_written("HTML", html)
