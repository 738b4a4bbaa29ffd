"""osmosis_run.cli.streams: stderr that never fails a run, stdout kept for --jsonl results."""

from __future__ import annotations

import io
import sys

import pytest

from osmosis_run.cli.streams import _Human, _Stderr, results_channel


def test_err_writes_plain_lines_off_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE"):
        monkeypatch.delenv(name, raising=False)
    captured = io.StringIO()
    monkeypatch.setattr(sys, "stderr", captured)
    human = _Human(_Stderr())
    human.print("osmosis-run: [bold]3[/bold] rollouts -> run", markup=False)
    human.print("a long line, never wrapped: " + "word " * 29 + "word", markup=False)
    assert captured.getvalue() == (
        "osmosis-run: [bold]3[/bold] rollouts -> run\n"
        "a long line, never wrapped: " + "word " * 29 + "word\n"
    )


def test_a_closed_stderr_is_silence(monkeypatch: pytest.MonkeyPatch) -> None:
    gone = io.StringIO()
    gone.close()
    monkeypatch.setattr(sys, "stderr", gone)
    stream = _Stderr()
    assert stream.write("lost\n") == 5
    stream.flush()
    assert stream.isatty() is False


def test_no_stderr_at_all_is_silence(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stderr", None)
    stream = _Stderr()
    assert stream.write("nowhere\n") == 8
    with pytest.raises(io.UnsupportedOperation):
        stream.fileno()


def test_without_jsonl_stdout_is_left_alone() -> None:
    before = sys.stdout
    with results_channel(jsonl=False) as results:
        assert results is None
        assert sys.stdout is before
