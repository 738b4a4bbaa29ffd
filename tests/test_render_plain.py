"""stderr without rich: off a terminal, ``render.err`` writes what rich would, byte for byte."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import qa_rows, subprocess_env, write_jsonl

from osmosis_run.cli import render
from osmosis_run.cli.render import Styled, _Human, _Stderr

TEXTS = [
    "osmosis-run: 3 rollouts -> run",
    "",
    "   leading and trailing   ",
    "two\nlines",
    "\n",
    "error: --workflow pkg.mod:Attr: no module named 'pkg' (is it on PYTHONPATH?)",
    "[bold]not markup[/bold] [link=x]y[/link]",
    "unicode: héllo 世界 ✓ 🙂",
    "http://127.0.0.1:8000/v1 and ::1 and a:b:c",
    "an emoji code :smile: and :thumbs_up: and :not_an_emoji_name:",
    "a tab\there and\ttwo",
    "a carriage return\rand a bell\x07 and a backspace\x08",
    "an escape \x1b[31mred\x1b[0m",
    "zero\u200bwidth and a soft\u00adhyphen",
    "q0.s0: timeout: workflow exceeded its 0.5s deadline",
    "a long line, never wrapped: " + "word " * 60,
    "a trailing newline\n",
]


def _rich(*objects: Any, markup: bool | None = None, emoji: bool | None = None) -> str:
    from rich.console import Console

    out = io.StringIO()
    Console(file=out, highlight=False, soft_wrap=True).print(*objects, markup=markup, emoji=emoji)
    return out.getvalue()


def _plain(*objects: Any, markup: bool | None = None, emoji: bool | None = None) -> str:
    human = _Human(_Stderr())
    captured = io.StringIO()
    old, sys.stderr = sys.stderr, captured
    try:
        human.print(*objects, markup=markup, emoji=emoji)
    finally:
        sys.stderr = old
    assert human._console is None or not _as_is(objects, markup, emoji)
    return captured.getvalue()


def _as_is(objects: tuple[Any, ...], markup: bool | None, emoji: bool | None) -> bool:
    return render._as_written(objects, markup, emoji) is not None


@pytest.fixture(autouse=True)
def _no_forced_colour(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "NO_COLOR", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("emoji", [None, False])
def test_a_line_is_written_as_rich_writes_it(text: str, emoji: bool | None) -> None:
    assert _plain(text, markup=False, emoji=emoji) == _rich(text, markup=False, emoji=emoji)


def test_ordinary_lines_are_written_without_rich_and_the_rest_by_it() -> None:
    assert _as_is(("osmosis-run: 3 rollouts -> run",), False, None)
    assert _as_is(("unicode: héllo 世界 ✓ 🙂",), False, None)
    assert not _as_is(("[bold]x[/bold]",), None, None)  # markup: rich's to parse
    assert not _as_is(("a tab\there",), False, None)  # rich expands tabs
    assert not _as_is(("a bell\x07",), False, None)  # rich strips control codes
    assert not _as_is((":smile:",), False, None)  # rich replaces emoji codes
    assert not _as_is(("word " * 60,), False, None)  # rich 13.8 strips it when it overflows
    assert _as_is((":smile:",), False, False)
    from rich.table import Table

    assert not _as_is((Table(),), None, None)


def test_styled_text_is_written_as_rich_writes_its_text() -> None:
    text = Styled("osmosis-run: finished run\n", style="bold")
    text.append("rollouts".ljust(18), style="bold").append("3 of 3: 3 success\n")
    text.append("wall".ljust(18), style="bold").append("0.01s  (300.0/s)   \n")
    text.rstrip()
    assert _plain(text) == _rich(text)
    assert _plain(text).endswith("(300.0/s)\n")
    line = Styled("osmosis-run: ").append("3/10", style="bold").append(" rollouts, ETA ")
    line.append("4s", style="cyan")
    assert _plain(line, "and more", markup=False) == _rich(line, "and more", markup=False)
    assert _plain() == _rich() == "\n"


def test_styled_text_keeps_its_styles_on_a_terminal() -> None:
    from rich.console import Console
    from rich.text import Text

    def on_a_terminal(obj: Any) -> str:
        out = io.StringIO()
        Console(file=out, force_terminal=True, color_system="standard").print(obj)
        return out.getvalue()

    styled = Styled("title\n", style="bold").append("label ", style="bold").append("value")
    styled.append(" red", style="red")
    text = Text("title\n", style="bold")  # what summary_table built before Styled
    text.append("label ", style="bold")
    text.append("value")
    text.append(" red", style="red")
    assert on_a_terminal(styled) == on_a_terminal(text)
    assert "\x1b[1;31m red" in on_a_terminal(styled)
    head = Styled().append("osmosis-run: ", style="bold").append("3/10")
    built = Text()
    built.append("osmosis-run: ", style="bold")
    built.append("3/10")
    assert on_a_terminal(head) == on_a_terminal(built) == "\x1b[1mosmosis-run: \x1b[0m3/10\n"


def test_forced_colour_goes_through_rich(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    human = _Human(_Stderr())
    captured = io.StringIO()
    monkeypatch.setattr(sys, "stderr", captured)
    human.print(Styled("bold", style="bold"))
    assert human._console is not None
    assert captured.getvalue() == "\x1b[1mbold\x1b[0m\n"


def test_an_eval_off_a_terminal_never_loads_rich(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", qa_rows(3))
    script = (
        "import atexit, sys\n"
        "atexit.register(lambda: print(json.dumps(sorted({m.split('.')[0] for m in sys.modules}))))\n"
        "import json\n"
        "from osmosis_run.cli import main\n"
        "main()\n"
    )
    args = [str(data), "-w", "eval_flows:Echo", "-g", "eval_flows:ExactMatch", "--out", "run",
            "--max-error-rate", "100%"]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", script, "eval", *args],
        cwd=tmp_path,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "rich" not in json.loads(done.stdout.splitlines()[-1])
    assert done.stderr.splitlines()[:2] == [
        "osmosis-run: 3 rollouts -> run",
        "osmosis-run: finished run",
    ]
