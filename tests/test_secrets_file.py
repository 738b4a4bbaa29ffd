"""``--secrets-file``: a dotenv file read as python-dotenv reads it, with value-free errors.

Each tricky case is read twice, by osmosis-run (``read_dotenv``) and by python-dotenv's own
``dotenv_values`` (without ``${VAR}`` expansion, as osmosis-ai reads its secrets files), and
both must give the expected values: a differential test that also pins python-dotenv's
behaviour at the floor pyproject.toml declares. A line python-dotenv cannot parse, or a name
without ``=``, is an error naming the file and line, never the value.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import results, subprocess_env, write_jsonl, write_workspace
from dotenv import dotenv_values
from typer.testing import Result

from osmosis_run.errors import ConfigError
from osmosis_run.run.workspace import read_dotenv

Cli = Callable[..., Result]

PEM = (
    "-----BEGIN PRIVATE KEY-----\n"
    "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7k3Xq9f1Zs+pL\n"
    "0aB/cD2eF3gH4iJ5kL6mN7oP8qR9sT0uV1wX2yZ3aB4cD5eF6gH7iJ8kL9mN0oP=\n"
    "-----END PRIVATE KEY-----"
)

# (case, file text, the values python-dotenv reads from it)
CASES: list[tuple[str, str, dict[str, str]]] = [
    ("plain", "K=v\n", {"K": "v"}),
    ("spaces around =", "K = v\n", {"K": "v"}),
    ("spaces around the value", "K=   v   \n", {"K": "v"}),
    ("export", "export K=v\n", {"K": "v"}),
    ("export, spaces around =", "export  K = v\n", {"K": "v"}),
    ("double quotes", 'K="v w"\n', {"K": "v w"}),
    ("single quotes", "K='v w'\n", {"K": "v w"}),
    ("spaces kept inside quotes", 'K="  v  "\n', {"K": "  v  "}),
    ("double quotes, then a comment", 'K="v" # c\n', {"K": "v"}),
    ("single quotes, then a comment", "K='v' # c\n", {"K": "v"}),
    ("unquoted, then a comment", "K=v # c\n", {"K": "v"}),
    ("a tab before #", "K=v\t# c\n", {"K": "v"}),
    ("# with no space before it", "K=v#c\n", {"K": "v#c"}),
    ("# inside double quotes", 'K="a # b"\n', {"K": "a # b"}),
    ("\\n in double quotes", 'K="a\\nb"\n', {"K": "a\nb"}),
    ('\\" in double quotes', 'K="say \\"hi\\""\n', {"K": 'say "hi"'}),
    ("\\\\ in double quotes", 'K="a\\\\b"\n', {"K": "a\\b"}),
    ("\\t in double quotes", 'K="a\\tb"\n', {"K": "a\tb"}),
    ("\\n literal in single quotes", "K='a\\nb'\n", {"K": "a\\nb"}),
    ("\\' in single quotes", "K='it\\'s'\n", {"K": "it's"}),
    ("backslashes literal unquoted", "K=a\\nb\\\n", {"K": "a\\nb\\"}),
    ("a PEM key over several lines", f'KEY="{PEM}"\nNEXT=1\n', {"KEY": PEM, "NEXT": "1"}),
    ("a PEM key with \\n escapes", 'KEY="{}"\n'.format(PEM.replace("\n", "\\n")), {"KEY": PEM}),
    ("several lines in single quotes", "K='line 1\nline 2'\n", {"K": "line 1\nline 2"}),
    ("a UTF-8 BOM", "\ufeffK=v\nL=w\n", {"K": "v", "L": "w"}),
    ("empty", "K=\n", {"K": ""}),
    ("empty double quotes", 'K=""\n', {"K": ""}),
    ("empty single quotes", "K=''\n", {"K": ""}),
    ("empty, then a comment", "K= # c\n", {"K": ""}),
    ("CRLF line endings", "A=1\r\nB='two'\r\nC=\r\n", {"A": "1", "B": "two", "C": ""}),
    ("trailing whitespace", "A=v   \nB='w'   \n", {"A": "v", "B": "w"}),
    ("unicode", 'K=héllo wörld ✓\nL="日本語"\n', {"K": "héllo wörld ✓", "L": "日本語"}),
    ("a key given twice: the last wins", "K=1\nK=2\n", {"K": "2"}),
    ("comment lines", "# first\nK=v\n   # indented\n#L=w\n", {"K": "v"}),
    ("blank lines", "\n\nK=v\n\n   \n\t\nL=w\n", {"K": "v", "L": "w"}),
    ("= inside the value", "K=a=b==\n", {"K": "a=b=="}),
    ("no newline at the end", "K=v", {"K": "v"}),
    (
        "${VAR} kept as written",
        "A=1\nK=${A}-${HOME}\nL=$A\n",
        {"A": "1", "K": "${A}-${HOME}", "L": "$A"},
    ),
    ("a quote inside an unquoted value", 'K=ab"cd\n', {"K": 'ab"cd'}),
    ("JSON in single quotes", "K='{\"a\": [1, 2]}'\n", {"K": '{"a": [1, 2]}'}),
    ("lower-case and dotted names", "k=1\na.b=2\n", {"k": "1", "a.b": "2"}),
    ("a quoted name", "'K'=v\n", {"K": "v"}),
]


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_secrets_file_reads_as_python_dotenv_reads_it(
    tmp_path: Path, text: str, expected: dict[str, str]
) -> None:
    path = tmp_path / "secrets.env"
    path.write_bytes(text.encode("utf-8"))
    assert read_dotenv(path) == expected
    assert dotenv_values(path, interpolate=False) == expected


def test_variables_are_not_expanded_as_osmosis_ai_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", "/home/someone")
    path = tmp_path / "secrets.env"
    path.write_text("A=1\nK=${A}-${HOME}\n")
    assert read_dotenv(path) == {"A": "1", "K": "${A}-${HOME}"}
    assert dotenv_values(path) == {"A": "1", "K": "1-/home/someone"}  # what expansion would do


ERRORS = [
    ("a line that is no binding", "A=1\nthis line holds sk-secret-1234\n", 2,
     "expected NAME=value (a dotenv line)"),
    ("after blank lines and comments", "A=1\n\n# c\n\n\nsk-secret 1234\n", 6,
     "expected NAME=value (a dotenv line)"),
    ("an unterminated quote", 'A=1\nKEY="-----BEGIN sk-secret\nMIIE\n', 2,
     "expected NAME=value (a dotenv line)"),
    ("text after a closing quote", 'K="sk-secret" 1234\n', 1,
     "expected NAME=value (a dotenv line)"),
    ("no name", "=sk-secret-1234\n", 1, "expected NAME=value (a dotenv line)"),
    ("a name without =", "A=1\nsk-secret-1234\n", 2,
     'a name without "=": write NAME=value (NAME= for an empty value)'),
    ("an export without =", "export sk-secret-1234\n", 1,
     'a name without "=": write NAME=value (NAME= for an empty value)'),
]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "line", "message"), [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS]
)
def test_a_line_that_is_not_name_value_is_named_by_number_not_content(
    tmp_path: Path, text: str, line: int, message: str
) -> None:
    path = tmp_path / "secrets.env"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        read_dotenv(path)
    assert str(caught.value) == f"{path}:{line}: {message}"
    assert "sk-secret" not in str(caught.value)


def test_a_file_that_cannot_be_read_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "missing.env"
    with pytest.raises(ConfigError) as caught:
        read_dotenv(missing)
    assert str(caught.value) == f"cannot read secrets file {missing}: No such file or directory"
    with pytest.raises(ConfigError) as caught:
        read_dotenv(tmp_path)
    assert str(caught.value) == f"cannot read secrets file {tmp_path}: Is a directory"
    latin = tmp_path / "latin-1.env"
    latin.write_bytes("K=café\n".encode("latin-1"))
    with pytest.raises(ConfigError) as caught:
        read_dotenv(latin)
    assert str(caught.value) == (
        f"cannot read secrets file {latin}: not UTF-8 text; save it as UTF-8"
    )


def test_python_dotenv_is_imported_only_to_read_a_secrets_file() -> None:
    """Start-up time: preparing a run without --secrets-file never loads it."""
    code = "import sys, osmosis_run.run.workspace, osmosis_run.cli; print('dotenv' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True, text=True, timeout=30, check=True, env=subprocess_env(),
    )  # fmt: skip
    assert done.stdout == "False\n"


MAIN = """
    import hashlib
    import os

    from osmosis_run import AgentWorkflow, AgentWorkflowOutput, Grader


    class Sign(AgentWorkflow):
        async def run(self, ctx):
            key = os.environ["SIGNING_KEY"]
            said = f"sha256 {hashlib.sha256(key.encode()).hexdigest()}; key {key}"
            return AgentWorkflowOutput(messages=[*ctx.prompt, {"role": "assistant", "content": said}])


    class Seen(Grader):
        async def grade(self, ctx):
            ctx.set_reward(1.0 if ctx.sample.messages[-1]["content"].startswith(ctx.label) else 0.0)
"""

CONFIG = """
    [experiment]
    rollout = "sign"
    entrypoint = "main.py"
    model_path = "openai/gpt-5-mini"
    dataset = "keys"

    [secrets]
    required = ["SIGNING_KEY", "EMPTY_OK"]
"""


def test_a_multi_line_pem_key_reaches_the_workflow_and_no_file(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "ws"
    config = write_workspace(root, "sign", MAIN, CONFIG)
    digest = hashlib.sha256(PEM.encode()).hexdigest()
    write_jsonl(
        tmp_path / "rows.jsonl", [{"user_prompt": "sign", "ground_truth": f"sha256 {digest}"}]
    )
    Path("secrets.env").write_text(f'# the signing key\nSIGNING_KEY="{PEM}" # PEM\nEMPTY_OK=\n')
    for name in ("SIGNING_KEY", "EMPTY_OK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(os, "environ", os.environ.copy())  # [secrets] land here
    result = cli(
        "eval", "--config", str(config), "--secrets-file", "secrets.env",
        "--dataset-file", "rows.jsonl", "--out", "run",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert os.environ["SIGNING_KEY"] == PEM
    assert os.environ["EMPTY_OK"] == ""
    [line] = results(Path("run"))
    assert (line.status, line.reward) == ("success", 1.0)  # the workflow saw the exact key
    assert line.messages is not None
    assert line.messages[-1]["content"] == f"sha256 {digest}; key [REDACTED]"
    written = "\n".join(
        p.read_text(errors="replace") for p in Path("run").rglob("*") if p.is_file()
    )
    for part in (PEM, *PEM.splitlines()[1:3]):
        assert part not in written
    assert PEM.splitlines()[1] not in result.output
