"""What a server leaves: a run directory as eval's (results lines, result.json, trajectory.json
with the request's extra fields, artifacts, summary), that ``osmosis-run report`` reads; and a
graceful shutdown with rollouts in flight."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from serving import serving

from osmosis_run.store.rundata import load_run


def test_served_rollouts_leave_an_eval_run_directory(
    tmp_path: Path, cli: Callable[..., Any]
) -> None:
    with serving(tmp_path, result_wait_timeout_sec=0.5, polling_lease_timeout_sec=5) as served:
        good = served.admit("good", "hi", label="HI", extra_fields={"trainer_step": 7})
        wrong = served.admit("wrong", "hi", label="nope", metadata={"topic": "x"})
        boom = served.admit("boom", "hi", label="HI", metadata={"raise": "workflow exploded"})
        for rid, token in (("good", good), ("wrong", wrong), ("boom", boom)):
            served.result(rid, token)
        run_dir = served.run_dir
    lines = {
        x["rollout_id"]: x
        for x in map(json.loads, (run_dir / "results.jsonl").read_text().splitlines())
    }
    assert {rid: (x["status"], x["reward"]) for rid, x in lines.items()} == {
        "good": ("success", 1.0),
        "wrong": ("success", 0.0),
        "boom": ("failure", None),
    }
    assert lines["boom"]["error_category"] == "agent_error"
    assert lines["boom"]["error_message"] == "workflow exploded"
    assert lines["wrong"]["metadata"] == {"topic": "x"}
    good_dir = run_dir / "rollouts" / "good"
    assert (good_dir / "artifacts" / "answer.txt").read_text() == "HI"
    trajectory = json.loads((good_dir / "trajectory.json").read_text())
    assert trajectory["schema_version"] == "ATIF-v1.7"
    assert trajectory["extra"]["osmosis"]["request_extra_fields"] == {"trainer_step": 7}
    assert trajectory["extra"]["osmosis"]["reward"] == 1.0
    result = json.loads((good_dir / "result.json").read_text())
    assert result["status"] == "success"
    assert result["request"]["id"] == "good"
    assert not (run_dir / "rollouts" / "boom" / "trajectory.json").exists()  # no sample
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["rollouts"], summary["counts"]["success"], summary["counts"]["failure"]) == (
        3,
        2,
        1,
    )
    run = load_run(run_dir)
    assert sorted(line.rollout_id for line in run.lines) == ["boom", "good", "wrong"]
    report = cli("report", str(run_dir), "--html", str(tmp_path / "served.html"))
    assert report.exit_code == 0, report.stderr
    html = (tmp_path / "served.html").read_text()
    assert "workflow exploded" in html


def test_shutdown_drains_then_cancels_what_is_left(tmp_path: Path) -> None:
    with serving(tmp_path, result_wait_timeout_sec=0.3, polling_lease_timeout_sec=30) as served:
        served.service.drain_s = 0.8
        for i in range(3):
            served.admit(f"quick-{i}", label="HI", metadata={"sleep": 0.3})
        served.admit("forever", label="HI", metadata={"sleep": 60})
        time.sleep(0.1)
        run_dir = served.run_dir
        started = time.monotonic()
        served.server.should_exit = True
        deadline = time.monotonic() + 10
        while served.service.active and time.monotonic() < deadline:
            time.sleep(0.02)
        took = time.monotonic() - started
    assert took < 5
    lines = {
        x["rollout_id"]: x
        for x in map(json.loads, (run_dir / "results.jsonl").read_text().splitlines())
    }
    assert {rid: (x["status"], x["error_category"]) for rid, x in lines.items()} == {
        "quick-0": ("success", None),
        "quick-1": ("success", None),
        "quick-2": ("success", None),
        "forever": ("failure", "cancelled"),
    }
    assert json.loads((run_dir / "summary.json").read_text())["rollouts"] == 4


def test_a_poll_in_flight_at_shutdown_is_answered(tmp_path: Path) -> None:
    with serving(tmp_path, result_wait_timeout_sec=1.0, polling_lease_timeout_sec=30) as served:
        token = served.admit("slow", label="HI", metadata={"sleep": 0.5})
        with httpx.Client(base_url=served.url, timeout=10) as client:
            import threading

            answers: list[httpx.Response] = []
            poller = threading.Thread(
                target=lambda: answers.append(
                    client.get("/rollout/slow/result", headers={"X-Osmosis-Rollout-Lease": token})
                )
            )
            poller.start()
            time.sleep(0.1)
            served.service.stop_admitting()
            served.server.should_exit = True
            poller.join(10)
    assert answers[0].status_code == 200
    assert answers[0].json()["status"] in ("running", "success")


def test_the_model_key_a_request_brings_is_in_no_file_of_the_run(tmp_path: Path) -> None:
    key = "sk-trainer-key-0123456789abcdef"
    with serving(tmp_path, result_wait_timeout_sec=0.5, polling_lease_timeout_sec=5) as served:
        token = served.admit(
            "leaky", label="HI", llm_api_key=key, metadata={"raise": f"bad key {key}"}
        )
        served.result("leaky", token)
        run_dir = served.run_dir
    line = json.loads((run_dir / "results.jsonl").read_text().splitlines()[0])
    assert line["error_message"] == "bad key [REDACTED]"
    written = [path for path in run_dir.rglob("*") if path.is_file()]
    assert written
    assert [path for path in written if key.encode() in path.read_bytes()] == []
