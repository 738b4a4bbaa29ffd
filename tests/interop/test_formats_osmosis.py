"""CSV rows read as osmosis-ai 0.3.8's own dataset reader reads them, row for row.

Runs where osmosis-ai is installed (the interop venv: ``/work/venv312``, Python 3.12); elsewhere
it skips. Each CSV row goes through osmosis-ai's ``iter_raw_rows`` and ``normalize_row`` and
through osmosis-run's reader: the prompt, label and metadata of every row osmosis-ai accepts are
the same, and every row it refuses osmosis-run marks invalid, except where SPEC §2 makes the label
optional (osmosis-ai requires one outside metadata mode; osmosis-run runs the row ungraded).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from osmosis_run.run.dataset import iter_rows

osmosis_dataset = pytest.importorskip("osmosis_ai.eval.local.dataset")

HEADER_PROMPT = b"system_prompt,user_prompt,ground_truth,label,extra\n"
PROMPT_ROWS = [
    b",q,a,,x",  # the plain shape
    b"sys,q,a,,",  # a system prompt
    b",q,,fallback,",  # an empty ground truth: the label is used
    b",q,0,,",  # a label of "0" is a label
    b"sys,,a,,",  # no user prompt
    b",,,,",  # nothing
    b',"multi\nline",a,,',  # a quoted line break
    b",q,,,",  # no label: osmosis-ai refuses it, osmosis-run runs it ungraded
]
HEADER_METADATA = b"system_prompt,user_prompt,ground_truth,metadata\n"
METADATA_ROWS = [
    b',q,a,"{""k"": 1}"',
    b',,,"{""task"": ""t""}"',  # metadata stands for the prompt and the label
    b"sys,,,",  # a system prompt alone is enough in metadata mode
    b',,,"{}"',  # an empty object is no metadata: nothing to run
    b",,,",
    b',q,,"[1, 2]"',  # not an object
    b',q,,"{oops"',  # not JSON
    b',q,,"  "',  # blank: no metadata
    b',q,a,"{}"',  # an empty object counts as none
]


def osmosis_rows(path: Path) -> list[dict[str, Any] | None]:
    """What osmosis-ai makes of each row: its fields, or None where it refuses the row."""
    made: list[dict[str, Any] | None] = []
    for i, raw in enumerate(osmosis_dataset.iter_raw_rows(path, "csv")):
        try:
            row = osmosis_dataset.normalize_row(raw, row_index=i, source_row_index=i)
        except osmosis_dataset.DatasetResolutionError as exc:
            made.append({"refused": str(exc)})
            continue
        made.append({"prompt": row.initial_messages, "label": row.label, "metadata": row.metadata})
    return made


def our_rows(path: Path) -> list[dict[str, Any]]:
    return [
        {"refused": row.error}
        if row.error is not None
        else {"prompt": row.prompt, "label": row.label, "metadata": row.metadata}
        for row in iter_rows(str(path))
    ]


@pytest.mark.parametrize(
    ("header", "rows"),
    [(HEADER_PROMPT, PROMPT_ROWS), (HEADER_METADATA, METADATA_ROWS)],
    ids=["prompt mode", "metadata mode"],
)
def test_csv_rows_are_read_as_osmosis_ai_reads_them(
    tmp_path: Path, header: bytes, rows: list[bytes]
) -> None:
    path = tmp_path / "d.csv"
    path.write_bytes(header + b"\n".join(rows) + b"\n")
    theirs, ours = osmosis_rows(path), our_rows(path)
    assert len(theirs) == len(ours) == len(rows)
    for n, (their, our) in enumerate(zip(theirs, ours, strict=True)):
        assert their is not None
        label_optional = "ground_truth (or label) is required" in their.get("refused", "")
        if label_optional:  # SPEC §2: a row without a label runs ungraded
            assert "refused" not in our, (n, our)
            assert our["label"] is None, (n, our)
        elif "refused" in their:
            assert "refused" in our, (n, their, our)
        else:
            assert our == their, n
