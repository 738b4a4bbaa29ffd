"""Options that several commands share, declared once (eval and validate read one setup)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from osmosis_run.cli import links

if TYPE_CHECKING:
    from osmosis_run.run.settings import EvalSettings

SELECTION = "Selection"


def opt(*names: str, help: str, panel: str | None = None, **kw: Any) -> Any:  # noqa: A002
    """A typer option with help text and no shown default (defaults live in EvalSettings)."""
    return typer.Option(*names, help=help, rich_help_panel=panel, show_default=False, **kw)


Dataset = Annotated[
    str | None,
    typer.Argument(
        help="Dataset file: JSONL, CSV or Parquet (.jsonl, .csv, .parquet; .jsonl.gz and "
        ".csv.gz gzipped), or - for JSONL rows on stdin.",
        show_default=False,
    ),
]
Config = Annotated[
    Path | None,
    opt(
        "--config",
        help="TOML file whose keys are these options' names (samples = 4, max_error_rate = "
        "0.05); the command line wins over it. Every key: the docs site's "
        f"{links.CONFIGURATION_PAGE} page.",
    ),
]
Workflow = Annotated[
    str | None, opt("--workflow", "-w", help="AgentWorkflow class as module:Class.")
]
GraderClass = Annotated[str | None, opt("--grader", "-g", help="Grader class as module:Class.")]
WorkflowConfig = Annotated[
    str | None, opt("--workflow-config", help="AgentWorkflowConfig instance as module:attr.")
]
GraderConfig = Annotated[
    str | None, opt("--grader-config", help="GraderConfig instance as module:attr.")
]
Samples = Annotated[
    int | None, opt("--samples", "-n", help="Rollouts per row (default 1).", panel=SELECTION)
]
Limit = Annotated[int | None, opt("--limit", help="At most N rows.", panel=SELECTION)]
Offset = Annotated[int | None, opt("--offset", help="Skip the first K rows.", panel=SELECTION)]
Rows = Annotated[
    str | None,
    opt("--rows", help='Row indices and ranges, 0-based: "3,7,10-20".', panel=SELECTION),
]
Ids = Annotated[str | None, opt("--ids", help="Only rows with these ids: a,b,c.", panel=SELECTION)]
DatasetFile = Annotated[
    str | None,
    opt(
        "--dataset-file",
        help="The dataset, as osmosis-ai's option names it (the same as DATASET).",
    ),
]
SecretsFile = Annotated[
    str | None,
    opt(
        "--secrets-file",
        help="dotenv file with the values of a workspace config's [secrets] names "
        "(else the environment); never copied anywhere.",
    ),
]
Shard = Annotated[
    str | None,
    opt("--shard", help="Shard I of N (I/N), stable by row key.", panel=SELECTION),
]

# Options of the commands that run rollouts (eval, and the ones that work like it).
Verbose = Annotated[
    int,
    opt(
        "--verbose",
        "-v",
        count=True,
        help="Show log records on stderr: osmosis-run's and your workflows' and graders' "
        "(-v info, -vv debug).",
    ),
]
Quiet = Annotated[
    bool, opt("--quiet", "-q", help="No progress on stderr: only the summary and errors.")
]
# The same flags on the commands that read runs (report, compare): their stderr has no progress.
QuietNotices = Annotated[
    bool,
    opt(
        "--quiet",
        "-q",
        help="No notices on stderr (which files were written, what to look at next): only errors.",
    ),
]


# Options of the commands that read runs (eval, report, compare): the same name, type and
# sentence everywhere; each command says what the option defaults to, or what the file holds.


def pass_threshold(default: str, *, panel: str | None = None) -> Any:
    """``--pass-threshold``; ``default`` is the parenthesis, e.g. ``"default 1.0"``."""
    return opt(
        "--pass-threshold", help=f"A rollout passes when reward >= this ({default}).", panel=panel
    )


def group_by(default: str | None = None, *, panel: str | None = None) -> Any:
    """``--group-by``, with what it defaults to (if anything)."""
    tail = f" ({default})" if default else ""
    return opt("--group-by", help=f"Break the summary down by metadata.KEY{tail}.", panel=panel)


def html(what: str, *, panel: str | None = None) -> Any:
    """``--html``: ``what`` is the sentence that says which report is written."""
    return opt("--html", help=what, panel=panel)


def junit(what: str, *, panel: str | None = None) -> Any:
    """``--junit``: ``what`` is the sentence that says when the report is written."""
    return opt("--junit", help=what, panel=panel)


def json_output(what: str) -> Any:
    """``--json``: ``what`` says which document goes to stdout."""
    return opt("--json", help=what)


def fail_on_regression(what: str, *, panel: str | None = None, **kw: Any) -> Any:
    """``--fail-on-regression``: ``what`` says what a regression is."""
    return opt("--fail-on-regression", help=what, panel=panel, **kw)


def resolve(values: dict[str, Any], config: Path | None) -> EvalSettings:
    """A command's settings: every source merged; the cwd and the config's folder importable.

    Raises:
        OsmosisRunError: an option, variable or config file is invalid.
    """
    from osmosis_run.errors import ConfigError
    from osmosis_run.run.components import add_import_path
    from osmosis_run.run.settings import resolve_settings

    add_import_path(Path.cwd())
    if config is not None:
        add_import_path(config.parent)
    dataset_file = values.pop("dataset_file", None)
    if dataset_file is not None:  # osmosis-ai's name for DATASET
        if values.get("dataset") not in (None, dataset_file):
            raise ConfigError(
                f"DATASET {values['dataset']} and --dataset-file {dataset_file} differ; give one"
            )
        values["dataset"] = dataset_file
    return resolve_settings(values, config_file=config)


# The limits of worker processes, which eval (--backend processes) and serve (--workers) share.


def max_worker_memory(*, panel: str) -> Any:
    """``--max-worker-memory SIZE``."""
    return opt(
        "--max-worker-memory",
        metavar="SIZE",
        help="A worker whose memory (RSS) passes SIZE (2GiB, 512MiB) is killed and replaced; "
        "the rollout that did it is recorded as a failure.",
        panel=panel,
    )


def worker_recycle(*, panel: str) -> Any:
    """``--worker-recycle N``."""
    return opt(
        "--worker-recycle",
        metavar="N",
        help="Replace each worker after N rollouts (code that leaks).",
        panel=panel,
    )


# Options that `grade` shares with `eval` (same names and sentences).
Concurrency = Annotated[
    str | None,
    opt(
        "--concurrency",
        "-c",
        help="Rollouts in flight (default: the config's limit, else 4); "
        "0 or unlimited for no limit.",
    ),
]
GraderTimeout = Annotated[float | None, opt("--grader-timeout", help="Seconds a grader may run.")]
Fresh = Annotated[bool | None, opt("--fresh", help="Start the run directory over.")]
Jsonl = Annotated[
    bool | None, opt("--jsonl", help="Stream each results line to stdout as it finishes.")
]


def fail_under(default: str = "", *, panel: str | None = None) -> Any:
    """``--fail-under`` (repeatable gates); ``default`` is a parenthesis, e.g. what it inherits."""
    tail = f" ({default})" if default else ""
    return opt(
        "--fail-under",
        help="Exit 1 when a metric is below a value: mean=0.8, mean_graded=0.8, "
        f"pass_rate=0.9 (a bare number is mean). Repeatable{tail}.",
        panel=panel,
    )


def max_error_rate(default: str = "default 0", *, panel: str | None = None) -> Any:
    """``--max-error-rate`` (the error budget); ``default`` is the parenthesis."""
    return opt(
        "--max-error-rate",
        help="Error budget: a count (3), fraction (0.05) or percentage (5%) of failed, "
        f"timed-out or invalid rollouts; beyond it exit 3 ({default}).",
        panel=panel,
    )


def baseline(*, panel: str | None = None) -> Any:
    """``--baseline`` (an earlier run to compare with at the end)."""
    return opt(
        "--baseline", help="Compare with this earlier run directory at the end.", panel=panel
    )


# The budgets of the commands that run rollouts (run/budgets.py): reached, the run stops (124).
BUDGETS = "Budgets (exit 124 when one runs out)"
TimeLimit = Annotated[
    str | None,
    opt(
        "--time-limit",
        metavar="DURATION",
        help="Stop cleanly after this long (90s, 45m, 2h): rollouts in flight are cancelled, "
        "what finished is kept, exit 124; the same command resumes.",
        panel=BUDGETS,
    ),
]

# The gates and reports of the commands that run rollouts (eval, grade): one panel, one text.
GATES = "Gates and reports"
FailUnder = Annotated[list[str] | None, fail_under(panel=GATES)]
MaxErrorRate = Annotated[str | None, max_error_rate(panel=GATES)]
RunHtml = Annotated[str | None, html("Write the HTML report here at the end.", panel=GATES)]
RunJunit = Annotated[
    str | None, junit("Write a JUnit XML report here (one testcase per rollout).", panel=GATES)
]
Baseline = Annotated[str | None, baseline(panel=GATES)]
FailOnRegression = Annotated[
    float | None,
    fail_on_regression(
        "With --baseline: exit 1 when the mean reward dropped by more than this "
        "and the confidence interval excludes zero.",
        panel=GATES,
    ),
]
