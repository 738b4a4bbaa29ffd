"""The exit codes of every command, in one place (the README and --help show this table)."""

from __future__ import annotations

import signal

OK = 0
GATE_FAILED = 1
USAGE = 2
ERROR_BUDGET = 3
INFRASTRUCTURE = 4
BUDGET_REACHED = 124  # as timeout(1)
INTERRUPTED = 130
# The signals that stop a command (the first one cleanly), and then exit ``INTERRUPTED``.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

EXIT_CODES_HELP = (
    "Exit codes: 0 ran and every gate held; 1 a quality gate failed (--fail-under, "
    "--fail-on-regression); 2 usage, configuration, import or dataset-file error (nothing ran); "
    "3 error budget exceeded (--max-error-rate; by default any failed, timed-out or invalid "
    "rollout); 4 infrastructure error mid-run (disk full, writer process lost): what finished "
    "is kept; fix it and re-run to resume; 124 a run budget ran out (--time-limit, --max-cost, "
    "--max-tokens): what finished is kept, the same command resumes; 130 interrupted (re-run "
    "the same command to resume)."
)

REPORT_HELP = (
    "Exit codes: 0 the report was written; 2 the directory is not a run directory, a report "
    "file cannot be written, or an option is invalid."
)
COMPARE_HELP = (
    "Exit codes: 0 compared (and no regression beyond --fail-on-regression); 1 B regressed "
    "beyond --fail-on-regression with a confidence interval that excludes zero; 2 a run "
    "directory is unusable or an option is invalid."
)
INIT_HELP = (
    "Exit codes: 0 the project was created; 2 the name is invalid or the folder is not empty."
)
