"""The exit codes of every command, in one place (the README and --help show this table)."""

from __future__ import annotations

OK = 0
GATE_FAILED = 1
USAGE = 2
ERROR_BUDGET = 3
INTERRUPTED = 130

EXIT_CODES_HELP = (
    "Exit codes: 0 ran and every gate held; 1 a quality gate failed (--fail-under, "
    "--fail-on-regression); 2 usage, configuration, import or dataset-file error (nothing ran); "
    "3 error budget exceeded (--max-error-rate; by default any failed, timed-out or invalid "
    "rollout); 130 interrupted (re-run the same command to resume)."
)
