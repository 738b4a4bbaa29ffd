"""``osmosis-run view`` as a process on loopback: its API, its files, its token, its exit codes.

The page itself is tested in Chromium (``test_view_browser.py``); here every answer is read as
a client reads it: the runs list, a run's summary against ``report --json``, the table's pages,
sorts and filters, the streamed search, a run followed while a real eval writes it, traversal
and symlink requests, and the token.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import subprocess_env, write_jsonl
from test_html_report import PAYLOAD, Runs, make_runs
from viewing import Viewing, start_view

from osmosis_run.cli.view import run_view
from osmosis_run.results.records import ResultLine

TOKEN = "view-token-1234567890"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    with pytest.MonkeyPatch.context() as monkeypatch:
        yield make_runs(tmp_path_factory.mktemp("view"), monkeypatch)


@pytest.fixture(scope="module")
def view(runs: Runs) -> Iterator[Viewing]:
    with start_view([str(runs.root)]) as running:
        yield running
    assert running.returncode == 130


def lines_of(run_dir: Path) -> list[ResultLine]:
    return [
        ResultLine.model_validate_json(raw)
        for raw in (run_dir / "results.jsonl").read_bytes().splitlines()
    ]


# -- the command ------------------------------------------------------------------------------


def test_prints_its_url_and_a_ctrl_c_stops_it_with_130(runs: Runs) -> None:
    with start_view([str(runs.root)]) as running:
        assert running.url.startswith("http://127.0.0.1:")
        assert running.get("/").status == 200
    assert running.returncode == 130
    assert f"osmosis-run view: {running.url}  (2 runs; Ctrl-C to stop)" in running.stderr


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.7"])
def test_a_host_off_loopback_needs_a_token(tmp_path: Path, host: str, capsys: Any) -> None:
    assert run_view([tmp_path], host, 0, None, open_browser=False) == 2
    err = capsys.readouterr().err
    assert err == (
        f"error: --host {host} serves the runs to other machines, and every run's transcripts "
        "with them: give --token TOKEN (every request must carry it), or keep the default "
        "--host 127.0.0.1\n"
    )


def test_the_cli_refuses_a_host_without_token_and_a_missing_path(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "osmosis_run", "view", str(tmp_path), "--no-open"]
    done = subprocess.run(
        [*command, "--host", "0.0.0.0"],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: --host 0.0.0.0 serves the runs to other machines")
    assert done.stdout == ""
    done = subprocess.run(
        [sys.executable, "-m", "osmosis_run", "view", str(tmp_path / "nope"), "--no-open"],
        env=subprocess_env(), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert (
        done.stderr
        == f"error: {tmp_path / 'nope'} does not exist; give run directories or folders of them\n"
    )


def test_a_taken_port_is_one_line_and_exit_2(runs: Runs, view: Viewing) -> None:
    port = view.base.rsplit(":", 1)[1]
    done = subprocess.run(
        [sys.executable, "-m", "osmosis_run", "view", str(runs.root), "--port", port, "--no-open"],
        env=subprocess_env(), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.startswith(
        f"error: cannot listen on http://127.0.0.1:{port}: the address is already in use"
    )


# -- the API ------------------------------------------------------------------------------------


def test_the_runs_list(view: Viewing, runs: Runs) -> None:
    listed = {run["name"]: run for run in view.get_json("/api/runs")["runs"]}
    assert set(listed) == {"run-a", "run-b"}
    a = listed["run-a"]
    lines = lines_of(runs.a)
    assert a["state"] == "finished"
    assert (a["rollouts"], a["planned"]) == (len(lines), len(lines))
    assert a["errors"] == sum(line.status in ("failure", "timeout", "invalid") for line in lines)
    assert a["dataset"].endswith("rows.jsonl")
    assert isinstance(a["started_at"], float)
    assert isinstance(a["wall_s"], float)


def test_a_runs_summary_is_report_json_s(view: Viewing, runs: Runs) -> None:
    shown = view.get_json("/api/runs/run-a")
    report = subprocess.run(
        [sys.executable, "-m", "osmosis_run", "report", str(runs.a), "--json"],
        env=subprocess_env(), capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    expected = json.loads(report.stdout)["summary"]
    assert shown["summary"] == expected
    assert shown["charts"]["status"]
    assert shown["run"]["base"] == "/runs/run-a/files/"


def test_pages_sorts_and_filters(view: Viewing, runs: Runs) -> None:
    lines = lines_of(runs.a)
    first = view.get_json("/api/runs/run-a/rollouts?limit=3")
    assert first["total"] == len(lines)
    assert len(first["rows"]) == 3
    ordered = sorted(lines, key=lambda line: (line.row_index, line.sample_index, line.rollout_id))
    assert [row["i"] for row in first["rows"]] == [line.rollout_id for line in ordered[:3]]
    rest = view.get_json("/api/runs/run-a/rollouts?offset=3&limit=500")
    assert [row["i"] for row in first["rows"] + rest["rows"]] == [
        line.rollout_id for line in ordered
    ]
    by_reward = view.get_json("/api/runs/run-a/rollouts?sort=reward&desc=1&limit=500")["rows"]
    rewards = [row.get("rw") for row in by_reward]
    scored = [r for r in rewards if r is not None]
    assert scored == sorted(scored, reverse=True)
    assert rewards[: len(scored)] == scored  # rollouts without a reward last
    failures = view.get_json("/api/runs/run-a/rollouts?status=failure&limit=500")
    assert failures["total"] == sum(line.status == "failure" for line in lines) > 0
    assert {row["st"] for row in failures["rows"]} == {"failure"}
    passed = view.get_json("/api/runs/run-a/rollouts?outcome=pass&rmin=1&rmax=1&limit=500")
    assert {row["i"] for row in passed["rows"]} == {
        line.rollout_id for line in lines if line.reward == 1.0 and line.status == "success"
    }
    sample = view.get_json("/api/runs/run-a/rollouts?sample=1&limit=500")
    assert {row["s"] for row in sample["rows"]} == {1}
    meta = view.get_json("/api/runs/run-a/rollouts?meta=note%3D" + _quote(PAYLOAD))
    assert {row["i"] for row in meta["rows"]} == {"xss.s0", "xss.s1"}
    category = view.get_json("/api/runs/run-a/rollouts?category=-&limit=500")
    assert all("ec" not in row for row in category["rows"])


def test_a_rollout_as_the_drawer_shows_it(view: Viewing) -> None:
    row = view.get_json("/api/runs/run-a/rollouts/flip.s0")
    assert row["i"] == "flip.s0"
    assert [m["r"] for m in row["t"]] == ["user", "assistant", "tool", "assistant"]
    assert "notes #1.txt" in [path for path, _ in row["af"]]
    assert view.get("/api/runs/run-a/rollouts/nope.s0").status == 404
    assert view.get("/api/runs/nope").status == 404


def test_search_streams_hits_then_done(view: Viewing) -> None:
    answer = view.get("/api/runs/run-a/search?q=6%20*%207")
    assert answer.headers["content-type"] == "application/x-ndjson"
    lines = [json.loads(line) for line in answer.body.splitlines()]
    hits, done = lines[:-1], lines[-1]
    assert {hit["i"] for hit in hits} == {"flip.s0", "flip.s1"}
    for hit in hits:
        start, end = hit["m"]
        assert hit["s"][start:end].lower() == "6 * 7"
    assert done == {"done": True, "searched": 14, "hits": 2, "capped": False}
    # Words that are only JSON keys (every line has "messages") are not hits.
    keys = [
        json.loads(line) for line in view.get("/api/runs/run-a/search?q=row_hash").body.splitlines()
    ]
    assert keys == [{"done": True, "searched": 14, "hits": 0, "capped": False}]
    # Case does not matter, and errors are searched too.
    errors = [
        json.loads(line)
        for line in view.get("/api/runs/run-a/search?q=CANNOT%20ANSWER").body.splitlines()
    ]
    assert {hit["i"] for hit in errors[:-1]} == {"boom.s0", "boom.s1"}


# -- files ------------------------------------------------------------------------------------


def test_files_inside_the_run_are_served_as_text_or_downloads(view: Viewing, runs: Runs) -> None:
    text = view.get("/runs/run-a/files/rollouts/flip.s0/artifacts/notes%20%231.txt")
    assert text.status == 200
    assert text.headers["content-type"] == "text/plain; charset=utf-8"
    assert text.headers["x-content-type-options"] == "nosniff"
    assert text.headers["content-security-policy"].startswith("sandbox")
    assert text.body == b"What is 6 * 7?"
    (runs.a / "rollouts/flip.s0/artifacts/blob.bin").write_bytes(b"\x00\x01\x02 binary")
    (runs.a / "rollouts/flip.s0/artifacts/page.html").write_text("<script>alert(1)</script>")
    (runs.a / "rollouts/flip.s0/artifacts/pic.svg").write_text("<svg onload='alert(1)'/>")
    blob = view.get("/runs/run-a/files/rollouts/flip.s0/artifacts/blob.bin")
    assert blob.headers["content-type"] == "application/octet-stream"
    assert blob.headers["content-disposition"] == 'attachment; filename="blob.bin"'
    for name in ("page.html", "pic.svg"):  # markup is never served as markup
        answer = view.get(f"/runs/run-a/files/rollouts/flip.s0/artifacts/{name}")
        assert answer.headers["content-type"] == "text/plain; charset=utf-8", name


@pytest.mark.parametrize(
    "path",
    [
        "/runs/run-a/files/../run-b/summary.json",
        "/runs/run-a/files/..%2Frun-b%2Fsummary.json",
        "/runs/run-a/files/rollouts/%2E%2E/%2E%2E/rows.jsonl",
        "/runs/run-a/files/%2Fetc%2Fpasswd",
        "/runs/run-a/files//etc/passwd",
        "/runs/run-a/files/rollouts/flip.s0/artifacts/../../../../rows.jsonl",
        "/runs/run-a/files/rollouts/flip.s0/out-link/passwd",
        "/runs/run-a/files/rollouts/flip.s0/leak.txt",
        "/runs/run-a/files/rollouts",
        "/runs/nope/files/summary.json",
    ],
)
def test_paths_that_leave_the_run_are_404(view: Viewing, runs: Runs, path: str) -> None:
    outside = runs.root / "secret.txt"
    outside.write_text("not for the view")
    link = runs.a / "rollouts/flip.s0/leak.txt"
    if not link.is_symlink():
        link.symlink_to(outside)
    folder = runs.a / "rollouts/flip.s0/out-link"
    if not folder.is_symlink():
        folder.symlink_to("/etc")
    answer = view.get(path)
    assert answer.status == 404, (path, answer.body[:200])
    assert b"not for the view" not in answer.body
    assert b"root:" not in answer.body


# -- a run being written ---------------------------------------------------------------------


GATED_FLOW = """
import asyncio
import pathlib

from osmosis_run import AgentWorkflow, Grader

GATE = pathlib.Path(__file__).with_name("gate")


class Gated(AgentWorkflow):
    # Row qN finishes once the gate file holds a number above N: the test sets the pace.
    async def run(self, ctx):
        index = int(ctx.prompt[-1]["content"][1:])
        while int(GATE.read_text()) <= index:
            await asyncio.sleep(0.02)
        return [dict(ctx.prompt[-1]), {"role": "assistant", "content": "ok"}]


class Pass(Grader):
    async def grade(self, ctx):
        ctx.set_reward(1.0)
"""


class GatedEval:
    """A real `osmosis-run eval` of 40 rows in a subprocess, each finishing when `release` says."""

    def __init__(self, tmp_path: Path, out: Path) -> None:
        (tmp_path / "gated_flow.py").write_text(GATED_FLOW)
        self.gate = tmp_path / "gate"
        self.release(0)
        rows = write_jsonl(tmp_path / "rows.jsonl", [{"user_prompt": f"q{i}"} for i in range(40)])
        self.results = out / "results.jsonl"
        env = subprocess_env(
            PYTHONPATH=os.pathsep.join([str(tmp_path), subprocess_env()["PYTHONPATH"]])
        )
        command = [sys.executable, "-m", "osmosis_run", "eval", str(rows), "-w", "gated_flow:Gated"]
        command += ["-g", "gated_flow:Pass", "-c", "2", "--out", str(out)]
        self.process = subprocess.Popen(command, cwd=tmp_path, env=env, stderr=subprocess.PIPE)

    def release(self, count: int) -> None:
        """Let rows q0 .. q(count-1) finish (the file is replaced whole, never read half-made)."""
        temporary = self.gate.with_suffix(".tmp")
        temporary.write_text(str(count))
        os.replace(temporary, self.gate)

    def written(self) -> int:
        return len(self.results.read_bytes().splitlines()) if self.results.exists() else 0

    def wait_written(self, count: int, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while self.written() < count:
            assert self.process.poll() is None, self.process.communicate()[1].decode()
            assert time.monotonic() < deadline, f"{self.written()} of {count} results written"
            time.sleep(0.02)

    def finish(self) -> None:
        self.release(40)
        _, err = self.process.communicate(timeout=60)
        assert self.process.returncode == 0, err.decode()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate()


def test_a_run_being_written_is_followed_live(tmp_path: Path) -> None:
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    with start_view([str(runs_dir)]) as running:
        assert running.get_json("/api/runs")["runs"] == []
        evaluating = GatedEval(tmp_path, runs_dir / "live")
        try:
            deadline = time.monotonic() + 30
            while not running.get_json("/api/runs")["runs"]:
                assert time.monotonic() < deadline, "the run was never listed"
                time.sleep(0.05)
            for released in (2, 6, 13):
                evaluating.release(released)
                evaluating.wait_written(released)
                # Within 2 s of its results line, a rollout is listed and counted.
                deadline = time.monotonic() + 2
                while True:
                    run = running.get_json("/api/runs")["runs"][0]
                    total = running.get_json("/api/runs/live/rollouts?limit=500")["total"]
                    if run["rollouts"] >= released and total >= released:
                        break
                    assert time.monotonic() < deadline, (run, total, released)
                    time.sleep(0.05)
                # What the invocation planned (it says so a moment after it takes the lock).
                assert (run["state"], run["rollouts"], run["planned"]) == ("running", released, 40)
            evaluating.finish()
        finally:
            evaluating.kill()
        final = running.get_json("/api/runs")["runs"][0]
        assert (final["state"], final["rollouts"], final["planned"]) == ("finished", 40, 40)
        assert running.get_json("/api/runs/live/rollouts?limit=500")["total"] == 40


def test_a_killed_run_is_interrupted_and_a_rewritten_results_file_is_read_again(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / "fingerprint.json").write_text("{}")
    good = {
        "rollout_id": "a.s0",
        "row_index": 0,
        "line": 1,
        "sample_index": 0,
        "status": "success",
        "reward": 1.0,
    }
    (run_dir / "results.jsonl").write_text(json.dumps(good) + "\n" + '{"rollout_id": "b.s0", "tor')
    with start_view([str(tmp_path)]) as running:
        run = running.get_json("/api/runs")["runs"][0]
        assert (run["state"], run["rollouts"]) == ("interrupted", 1)  # the torn line is not read
        replaced = {**good, "rollout_id": "c.s0", "reward": 0.0}
        (run_dir / "results.jsonl").write_text(json.dumps(replaced) + "\n")  # in place: read anew
        rows = running.get_json("/api/runs/r/rollouts")["rows"]
        assert [row["i"] for row in rows] == ["c.s0"]
        temporary = run_dir / ".results.tmp"  # as --retry-failed rewrites it: a new file
        temporary.write_text(json.dumps(good) + "\n" + json.dumps(replaced) + "\n")
        temporary.replace(run_dir / "results.jsonl")
        assert running.get_json("/api/runs/r")["summary"]["rollouts"] == 2
        # The same rollout id again (a resume racing a crash): the last line wins, as in reports.
        again = {**good, "reward": 0.5}
        with (run_dir / "results.jsonl").open("a") as f:
            f.write(json.dumps(again) + "\n")
        shown = running.get_json("/api/runs/r")["summary"]
        assert shown["rollouts"] == 2
        assert shown["reward_all"]["mean"] == 0.25
        rows = running.get_json("/api/runs/r/rollouts?sort=id")["rows"]
        assert [(row["i"], row["rw"]) for row in rows] == [("a.s0", 0.5), ("c.s0", 0.0)]


# -- the token --------------------------------------------------------------------------------


def test_with_a_token_every_request_must_carry_it(runs: Runs) -> None:
    with start_view([str(runs.root), "--host", "0.0.0.0", "--token", TOKEN]) as running:
        assert running.url.endswith(f"/?token={TOKEN}")
        for path in ("/", "/api/runs", "/runs/run-a/files/summary.json", "/static/view.js"):
            refused = running.get(path)
            assert refused.status == 401, path
            assert b"needs its token" in refused.body
        assert running.get("/api/runs", {"authorization": "Bearer wrong-token"}).status == 401
        assert running.get("/api/runs", {"authorization": f"Bearer {TOKEN}"}).status == 200
        first = running.get(f"/?token={TOKEN}")
        assert first.status == 200
        cookie = first.headers["set-cookie"]
        assert cookie.startswith(f"osmosis_view_token={TOKEN};")
        assert "HttpOnly" in cookie
        assert "SameSite=Strict" in cookie
        assert running.get("/api/runs", {"cookie": f"osmosis_view_token={TOKEN}"}).status == 200


def _quote(text: str) -> str:
    from urllib.parse import quote

    return quote(text, safe="")


def test_sigterm_stops_it_too(runs: Runs) -> None:
    with start_view([str(runs.root)]) as running:
        running.process.send_signal(signal.SIGTERM)
        running.process.wait(timeout=30)
    assert running.returncode == 130
