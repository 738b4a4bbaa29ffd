"""osmosis_run.reports.message_text: a message's content as text, for `show` and the HTML report."""

from __future__ import annotations

from typing import Any

import pytest

from osmosis_run.reports.message_text import message_text


@pytest.mark.parametrize(
    ("content", "text"),
    [
        (None, ""),
        ("plain", "plain"),
        ([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "a\nb"),
        ([{"type": "image_url", "image_url": {"url": "x"}}], "[image_url]"),
        ([{"type": "output_text", "text": "said"}], "said"),
        ([{"type": "text", "text": 3}], "[text]"),
        ([{"no": "type"}, {"type": None}], "[part]\n[part]"),
        (["bare", 7, ["é"]], 'bare\n7\n["é"]'),
        ({"k": "é"}, '{"k": "é"}'),
        (42, "42"),
    ],
)
def test_message_text(content: Any, text: str) -> None:
    assert message_text(content) == text


def test_show_and_the_html_report_print_the_same_text() -> None:
    from osmosis_run.cli.show import _message
    from osmosis_run.reports.html_report import _message as html_message

    content = [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {}}]
    message = {"role": "user", "content": content}
    from rich.text import Text

    shown = Text()
    _message(shown, message)
    assert shown.plain == "  user\n    look\n    [image_url]\n"
    assert html_message(message)["c"] == "look\n[image_url]"
