"""The rollout server's protocol against a real uvicorn on loopback: every endpoint, status
code, header and timing rule, as osmosis-ai 0.3.8's server answers them."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from serving import LEASE, Served, serving

from osmosis_run import LocalBackend
from osmosis_run.server import create_rollout_server

BASE = {
    "initial_messages": [{"role": "user", "content": "hi"}],
    "rollout_id": "r1",
    "chat_completions_url": "http://127.0.0.1:9/v1",
}


@pytest.fixture
def served(tmp_path: Path) -> Any:
    with serving(tmp_path, result_wait_timeout_sec=0.3, polling_lease_timeout_sec=3) as s:
        yield s


def test_health_reports_the_backend_the_instance_and_the_lifecycle(served: Served) -> None:
    response = served.client.get("/health")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["status"] == "ok"
    assert body["concurrency"] == {"max_concurrent": 4, "queued": 0, "running": 0}
    assert body["instance_id"] == body["process_id"]
    assert body["lifecycle"] == {"accepting_rollouts": True, "active_rollouts": 0}


def test_a_rollout_is_admitted_with_a_lease_then_polled_to_its_result(served: Served) -> None:
    response = served.post("r1", "hi", label="HI")
    assert response.status_code == 202
    admitted = response.json()
    assert list(admitted) == [
        "rollout_id",
        "status",
        "polling_lease_token",
        "result_wait_timeout_sec",
        "polling_lease_timeout_sec",
    ]
    assert admitted["status"] == "queued"
    assert admitted["result_wait_timeout_sec"] == 0.3
    assert admitted["polling_lease_timeout_sec"] == 3.0
    assert len(admitted["polling_lease_token"]) >= 32
    body = served.result("r1", admitted["polling_lease_token"])
    assert body == {
        "rollout_id": "r1",
        "status": "success",
        "sample": {
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "HI"},
            ],
            "label": "HI",
            "reward": 1.0,
            "remove_sample": False,
            "metrics": {},
            "extra_fields": {},
        },
        "err_message": None,
        "err_category": None,
    }
    # Once final, every poll answers the same body.
    again = served.poll("r1", admitted["polling_lease_token"])
    assert again.status_code == 200
    assert again.json() == body


def test_a_poll_waits_for_a_status_change_then_answers_the_status(served: Served) -> None:
    # The workflow runs for 1.5 s, several times the poll's 0.3 s wait: a poll that held on until
    # the status changed would take about 1.5 s, far above the bound below.
    token = served.admit("slow", label="HI", metadata={"sleep": 1.5, "grade_sleep": 0.5})
    statuses = []
    started = time.monotonic()
    while True:
        t0 = time.monotonic()
        body = served.poll("slow", token).json()
        took = time.monotonic() - t0
        statuses.append(body["status"])
        if body["status"] == "success":
            break
        assert body["sample"] is None
        assert body["err_message"] is None
        assert took < 0.3 + 0.6  # never longer than the wait (0.3 s), plus a loaded machine's slack
    assert "grading" in statuses
    assert statuses.count("running") >= 2
    assert time.monotonic() - started < 5


def test_a_poll_answers_at_once_when_the_status_changes(tmp_path: Path) -> None:
    with serving(tmp_path, result_wait_timeout_sec=5, polling_lease_timeout_sec=10) as served:
        token = served.admit("quick", label="HI", metadata={"sleep": 0.2})
        t0 = time.monotonic()
        body = served.poll("quick", token).json()
        while body["status"] != "success":
            body = served.poll("quick", token).json()
        assert time.monotonic() - t0 < 2  # not the 5 s wait


def test_a_duplicate_id_is_refused_while_it_is_held(served: Served) -> None:
    token = served.admit("dup", metadata={"sleep": 0.3})
    refused = served.post("dup")
    assert refused.status_code == 409
    assert refused.json() == {"detail": "rollout_id is already registered"}
    served.result("dup", token)
    assert served.post("dup").status_code == 409  # finished, still retained


# The bodies osmosis-ai 0.3.8's FastAPI server answers (captured from it).
BAD_BODIES = [
    (
        {"content": b""},
        [{"type": "missing", "loc": ["body"], "msg": "Field required", "input": None}],
    ),
    (
        {"content": b"{", "headers": {"content-type": "application/json"}},
        [
            {
                "type": "json_invalid",
                "loc": ["body", 1],
                "msg": "JSON decode error",
                "input": {},
                "ctx": {"error": "Expecting property name enclosed in double quotes"},
            }
        ],
    ),
    (
        {"json": [1]},
        [
            {
                "type": "model_attributes_type",
                "loc": ["body"],
                "msg": "Input should be a valid dictionary or object to extract fields from",
                "input": [1],
            }
        ],
    ),
    (
        {"json": {"rollout_id": "a"}},
        [
            {
                "type": "missing",
                "loc": ["body", "initial_messages"],
                "msg": "Field required",
                "input": {"rollout_id": "a"},
            },
            {
                "type": "missing",
                "loc": ["body", "chat_completions_url"],
                "msg": "Field required",
                "input": {"rollout_id": "a"},
            },
        ],
    ),
    (
        {"json": {**BASE, "rollout_id": "a/b"}},
        [
            {
                "type": "value_error",
                "loc": ["body", "rollout_id"],
                "msg": "Value error, rollout_id must be a single path segment (no path "
                "separators, and not '.' or '..')",
                "input": "a/b",
                "ctx": {"error": {}},
            }
        ],
    ),
    (
        {"json": {**BASE, "llm_api_key": ""}},
        [
            {
                "type": "value_error",
                "loc": ["body", "llm_api_key"],
                "msg": "Value error, llm_api_key must be omitted or a non-empty string",
                "input": "",
                "ctx": {"error": {}},
            }
        ],
    ),
    (
        {"json": {**BASE, "grade": "maybe", "initial_messages": "x"}},
        [
            {
                "type": "list_type",
                "loc": ["body", "initial_messages"],
                "msg": "Input should be a valid list",
                "input": "x",
            },
            {
                "type": "bool_parsing",
                "loc": ["body", "grade"],
                "msg": "Input should be a valid boolean, unable to interpret input",
                "input": "maybe",
            },
        ],
    ),
    (
        {"content": b'{"a":1}', "headers": {"content-type": "text/plain"}},
        [
            {
                "type": "model_attributes_type",
                "loc": ["body"],
                "msg": "Input should be a valid dictionary or object to extract fields from",
                "input": '{"a":1}',
            }
        ],
    ),
    (
        # The SDK's own server fails with a 500 here (it cannot encode the input back).
        {
            "content": json.dumps({**BASE, "agent_timeout_sec": float("inf")}).encode(),
            "headers": {"content-type": "application/json"},
        },
        [
            {
                "type": "value_error",
                "loc": ["body", "agent_timeout_sec"],
                "msg": "Value error, timeout must be finite; omit it to run unbounded",
                "input": "inf",
                "ctx": {"error": {}},
            }
        ],
    ),
]


@pytest.mark.parametrize(("request_kw", "detail"), BAD_BODIES)
def test_a_bad_body_is_a_422_with_fastapis_detail(
    served: Served, request_kw: dict[str, Any], detail: list[dict[str, Any]]
) -> None:
    response = served.client.post("/rollout", **request_kw)
    assert response.status_code == 422
    assert response.json() == {"detail": detail}
    assert served.service.table.entries == {}


def test_no_capacity_is_a_429_with_retry_after(tmp_path: Path) -> None:
    class Full(LocalBackend):
        def has_capacity(self) -> bool:
            return False

    backend = Full(workflow="server_flows:Upper")
    app = create_rollout_server(backend=backend, configure_logging=False, out=tmp_path / "r")
    from serving import serve_app

    with serve_app(app) as served:
        response = served.post("r1")
        assert response.status_code == 429
        assert response.headers["retry-after"] == "5"
        assert response.json() == {"detail": "rollout queue is full; retry later"}


def test_a_server_that_stops_admitting_answers_503(served: Served) -> None:
    served.service.stop_admitting()
    response = served.post("late")
    assert response.status_code == 503
    assert response.json() == {"detail": "rollout server is shutting down"}
    assert served.client.get("/health").json()["lifecycle"]["accepting_rollouts"] is False


def test_a_poll_needs_the_lease_header_and_the_right_lease(served: Served) -> None:
    token = served.admit("r1", metadata={"sleep": 0.2})
    missing = served.client.get("/rollout/r1/result")
    assert missing.status_code == 422
    assert missing.json() == {
        "detail": [
            {
                "type": "missing",
                "loc": ["header", LEASE],
                "msg": "Field required",
                "input": None,
            }
        ]
    }
    empty = served.client.get("/rollout/r1/result", headers={LEASE: ""})
    assert empty.status_code == 422
    assert empty.json()["detail"][0]["type"] == "string_too_short"
    wrong = served.poll("r1", "not-the-lease")
    assert (wrong.status_code, wrong.json()) == (403, {"detail": "invalid polling lease"})
    unknown = served.poll("nobody", token)
    assert (unknown.status_code, unknown.json()) == (404, {"detail": "unknown rollout_id"})
    served.result("r1", token)
    wrong = served.poll("r1", "not-the-lease")
    assert wrong.status_code == 403  # a final result is authenticated too


def test_unknown_routes_and_methods_answer_as_fastapi_does(served: Served) -> None:
    missing = served.client.get("/nope")
    assert (missing.status_code, missing.json()) == (404, {"detail": "Not Found"})
    wrong = served.client.post("/health")
    assert (wrong.status_code, wrong.json()) == (405, {"detail": "Method Not Allowed"})
    assert wrong.headers["allow"] == "GET"
    slash = served.client.get("/health/")  # Starlette's redirect, past the direct routes
    assert (slash.status_code, slash.headers["location"]) == (307, f"{served.url}/health")
    nested = served.client.get("/rollout/a/b/result", headers={LEASE: "t"})
    assert nested.status_code == 404


def test_a_route_that_crashes_answers_500_and_the_server_goes_on(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken() -> bytes:
        raise RuntimeError("boom")

    monkeypatch.setattr(served.service, "health", broken)
    crashed = served.client.get("/health")
    assert crashed.status_code == 500
    assert crashed.text == "Internal Server Error"
    monkeypatch.undo()
    assert served.client.get("/health").status_code == 200


def test_polling_renews_the_lease(tmp_path: Path) -> None:
    with serving(tmp_path, result_wait_timeout_sec=0.2, polling_lease_timeout_sec=0.6) as served:
        token = served.admit("long", label="HI", metadata={"sleep": 1.5})
        body = served.result("long", token)  # polls every 0.2 s: the 0.6 s lease holds
        assert body["status"] == "success"


def test_an_expired_lease_fails_the_rollout_and_cancels_it(tmp_path: Path) -> None:
    with serving(tmp_path, result_wait_timeout_sec=0.2, polling_lease_timeout_sec=0.5) as served:
        token = served.admit("left", label="HI", metadata={"sleep": 30})
        time.sleep(0.9)
        body = served.poll("left", token).json()
        assert body == {
            "rollout_id": "left",
            "status": "failure",
            "sample": None,
            "err_message": "polling lease expired",
            "err_category": "lease_expired",
        }
        deadline = time.monotonic() + 5
        while served.service.active and time.monotonic() < deadline:
            time.sleep(0.02)
        assert served.service.active == 0  # the execution was cancelled
        assert served.service.table.leases == 0
        run_dir = served.run_dir
    lines = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert [(x["rollout_id"], x["status"], x["error_category"]) for x in lines] == [
        ("left", "failure", "lease_expired")
    ]


def test_a_result_is_retained_for_the_retention_then_forgotten(tmp_path: Path) -> None:
    with serving(
        tmp_path,
        result_wait_timeout_sec=0.2,
        polling_lease_timeout_sec=1,
        result_retention_sec=0.4,
    ) as served:
        token = served.admit("kept", label="HI")
        assert served.result("kept", token)["status"] == "success"
        assert served.poll("kept", token).status_code == 200
        time.sleep(0.7)
        gone = served.poll("kept", token)
        assert (gone.status_code, gone.json()) == (404, {"detail": "unknown rollout_id"})
        assert served.service.table.entries == {}
        assert served.service.table.timers == 0
        # Forgotten by the table, not by the run directory: one id, one results line.
        again = served.post("kept")
        assert (again.status_code, again.json()) == (
            409,
            {"detail": "rollout_id is already recorded in this server's run directory"},
        )
        assert served.post("kept-2").status_code == 202


def test_cancel_wants_exactly_one_selector(served: Served) -> None:
    for body in ({}, {"ids": ["a"], "all": True}, {"prefix": "a", "ids": []}):
        response = served.client.post("/rollout/cancel", json=body)
        assert response.status_code == 422
        assert response.json() == {"detail": "pass exactly one selector: ids, prefix, or all"}
    bad = served.client.post("/rollout/cancel", json={"ids": "x"})
    assert bad.status_code == 422
    assert bad.json() == {
        "detail": [
            {
                "type": "list_type",
                "loc": ["body", "ids"],
                "msg": "Input should be a valid list",
                "input": "x",
            }
        ]
    }


def test_cancel_by_prefix_ids_and_all_with_dispositions(tmp_path: Path) -> None:
    with serving(
        tmp_path,
        workflow_config="server_flows:TWO_AT_ONCE",
        result_wait_timeout_sec=0.2,
        polling_lease_timeout_sec=5,
    ) as served:
        tokens = {rid: served.admit(rid, metadata={"sleep": 30}) for rid in ("a-1", "a-2", "a-3")}
        tokens["b-1"] = served.admit("b-1", metadata={"sleep": 30})
        time.sleep(0.2)
        cancelled = served.client.post("/rollout/cancel", json={"prefix": "a-"})
        assert cancelled.status_code == 200
        assert cancelled.json() == {
            "dispositions": {
                "a-1": "cancelled_running",
                "a-2": "cancelled_running",
                "a-3": "cancelled_queued",  # two at once: the third waited for a slot
            }
        }
        for rid in ("a-1", "a-2", "a-3"):
            assert served.result(rid, tokens[rid]) == {
                "rollout_id": rid,
                "status": "cancelled",
                "sample": None,
                "err_message": "cancelled",
                "err_category": None,
            }
        again = served.client.post("/rollout/cancel", json={"ids": ["a-1", "zzz"]})
        assert again.json() == {"dispositions": {"a-1": "not_found", "zzz": "not_found"}}
        everything = served.client.post("/rollout/cancel", json={"all": True}).json()
        assert everything["dispositions"]["b-1"] == "cancelled_running"
        assert everything["dispositions"]["a-2"] == "not_found"  # finished, still retained
        assert served.result("b-1", tokens["b-1"])["status"] == "cancelled"
        run_dir = served.run_dir
    lines = [json.loads(x) for x in (run_dir / "results.jsonl").read_text().splitlines()]
    assert sorted((x["rollout_id"], x["status"], x["error_category"]) for x in lines) == [
        ("a-1", "failure", "cancelled"),
        ("a-2", "failure", "cancelled"),
        ("a-3", "failure", "cancelled"),
        ("b-1", "failure", "cancelled"),
    ]


def test_a_rollout_that_ignores_its_cancellation_is_published_cancelled(served: Served) -> None:
    token = served.admit("stubborn", metadata={"stubborn": 4})
    time.sleep(0.1)
    served.client.post("/rollout/cancel", json={"ids": ["stubborn"]})
    t0 = time.monotonic()
    assert served.result("stubborn", token)["status"] == "cancelled"
    assert time.monotonic() - t0 < 3.5  # the grace (2 s), not the 4 s it holds on


SHAPES = [
    # (metadata and fields, expected status, expected sample subset, err)
    ({"metadata": {"metric": "inf"}, "label": "HI"}, "success", {"metrics": {"ok": 1.0}}, None),
    ({"label": "nope"}, "success", {"reward": 0.0}, None),
    ({"label": "HI", "metadata": {"remove": True}}, "success", {"reward": None}, None),
    ({"label": "HI", "grade": False}, "success", {"reward": None}, None),
    ({"label": "HI", "metadata": {"raise": "workflow exploded"}}, "failure", None, "agent_error"),
    (
        {"label": "HI", "metadata": {"sleep": 2}, "agent_timeout_sec": 0.2},
        "failure",
        None,
        "timeout",
    ),
    (
        {"label": "HI", "metadata": {"grade_sleep": 2}, "grader_timeout_sec": 0.2},
        "failure",
        {"reward": None},
        "timeout",
    ),
]


@pytest.mark.parametrize(("fields", "status", "sample", "category"), SHAPES)
def test_results_are_shaped_for_the_wire(
    served: Served,
    fields: dict[str, Any],
    status: str,
    sample: dict[str, Any] | None,
    category: str | None,
) -> None:
    token = served.admit("shape", **fields)
    body = served.result("shape", token)
    assert body["status"] == status
    assert body["err_category"] == category
    if sample is None:
        assert body["sample"] is None
    else:
        assert "trajectory_messages" not in body["sample"]
        assert {k: body["sample"][k] for k in sample} == sample


def test_deadlines_run_from_the_start_not_from_admission(tmp_path: Path) -> None:
    """Queued time does not count: each rollout gets its whole agent timeout once running."""
    with serving(
        tmp_path,
        workflow_config="server_flows:TWO_AT_ONCE",
        result_wait_timeout_sec=0.3,
        polling_lease_timeout_sec=5,
    ) as served:
        tokens = {
            f"d{i}": served.admit(
                f"d{i}", label="HI", metadata={"sleep": 0.4}, agent_timeout_sec=0.8
            )
            for i in range(6)
        }
        bodies = {rid: served.result(rid, token) for rid, token in tokens.items()}
    # Six rollouts of 0.4 s, two at a time, take 1.2 s: past the 0.8 s timeout from admission.
    assert {b["status"] for b in bodies.values()} == {"success"}


def test_the_failure_message_is_the_timeout_the_sdk_gives(served: Served) -> None:
    token = served.admit("late", label="HI", metadata={"sleep": 2}, agent_timeout_sec=0.2)
    assert served.result("late", token)["err_message"] == "workflow exceeded its 0.2s deadline"


def test_a_client_that_disconnects_mid_poll_leaves_nothing_behind(tmp_path: Path) -> None:
    with serving(tmp_path, result_wait_timeout_sec=5, polling_lease_timeout_sec=10) as served:
        token = served.admit("dc", label="HI", metadata={"sleep": 1})
        with (
            httpx.Client(base_url=served.url, timeout=0.2) as impatient,
            pytest.raises(httpx.ReadTimeout),
        ):
            impatient.get("/rollout/dc/result", headers={LEASE: token})
        deadline = time.monotonic() + 2
        while served.service.table.waiting and time.monotonic() < deadline:
            time.sleep(0.02)
        assert served.service.table.waiting == 0  # the poll stopped waiting when it hung up
        assert served.result("dc", token)["status"] == "success"  # the rollout went on


def test_api_key_guards_every_route(tmp_path: Path) -> None:
    with serving(tmp_path, api_key="s3cret-key-for-tests") as served:
        client = served.client
        routes = [
            ("GET", "/health", None),
            ("POST", "/rollout", BASE),
            ("GET", "/rollout/r1/result", None),
            ("POST", "/rollout/cancel", {"all": True}),
            ("GET", "/nope", None),
        ]
        for auth in (None, "Bearer wrong", "s3cret-key-for-tests", "Bearer s3cret-key-for-test"):
            headers = {"Authorization": auth} if auth else {}
            for method, path, body in routes:
                response = client.request(method, path, json=body, headers=headers)
                assert (response.status_code, response.json()) == (
                    401,
                    {"detail": "unauthorized"},
                ), (auth, path)
        good = {"Authorization": "Bearer s3cret-key-for-tests"}
        assert client.get("/health", headers=good).status_code == 200
        response = client.post("/rollout", json=BASE, headers=good)
        assert response.status_code == 202
        token = response.json()["polling_lease_token"]
        poll = client.get("/rollout/r1/result", headers={**good, LEASE: token})
        assert poll.status_code == 200
        run_dir = served.run_dir
    assert "s3cret-key-for-tests" not in "".join(
        p.read_text(errors="replace") for p in run_dir.rglob("*") if p.is_file()
    )


def test_factory_arguments_are_checked_as_the_sdk_checks_them(tmp_path: Path) -> None:
    backend = LocalBackend(workflow="server_flows:Upper")
    cases: list[tuple[dict[str, Any], str]] = [
        (
            {"result_wait_timeout_sec": 0},
            "result_wait_timeout_sec must be finite and greater than zero",
        ),
        (
            {"result_wait_timeout_sec": float("nan")},
            "result_wait_timeout_sec must be finite and greater than zero",
        ),
        ({"result_retention_sec": -1}, "result_retention_sec must be finite and non-negative"),
        (
            {"result_wait_timeout_sec": 5, "polling_lease_timeout_sec": 5},
            "polling_lease_timeout_sec must exceed result_wait_timeout_sec",
        ),
        ({"api_key": "  "}, "api_key must be non-empty when provided"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=re.escape(message)) as caught:
            create_rollout_server(
                backend=backend, configure_logging=False, out=tmp_path / "x", **kwargs
            )
        assert str(caught.value) == message
