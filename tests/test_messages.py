"""osmosis_run.cli.messages: the one-line errors, hints and verdicts every command prints."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from osmosis_run.cli import messages
from osmosis_run.errors import ConfigError
from osmosis_run.results.gates import Verdict


def test_an_error_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    messages.print_error(ConfigError("--limit: must be >= 0 (got -1)"))
    assert capsys.readouterr().err == "error: --limit: must be >= 0 (got -1)\n"


def test_verdicts_one_line_each(capsys: pytest.CaptureFixture[str]) -> None:
    messages.print_verdicts(
        [
            Verdict(name="mean", held=True, message="mean >= 0.5: held (0.7500)"),
            Verdict(name="budget", held=False, message="error budget: exceeded"),
        ]
    )
    assert capsys.readouterr().err == (
        "ok: mean >= 0.5: held (0.7500)\nFAILED: error budget: exceeded\n"
    )


def test_the_resume_hint_repeats_the_command(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "argv", ["osmosis-run", "eval", "d.jsonl", "--out", "my run"])
    messages.print_resume_hint(Path("my run"))
    messages.print_resume_hint(Path("my run"), failed=True)
    assert capsys.readouterr().err.splitlines() == [
        "osmosis-run: interrupted; resume with: osmosis-run eval d.jsonl --out 'my run'",
        "osmosis-run: finished rollouts are kept in my run",
        "osmosis-run: fix it and resume with: osmosis-run eval d.jsonl --out 'my run'",
        "osmosis-run: finished rollouts are kept in my run",
    ]
