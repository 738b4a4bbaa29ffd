"""The bundled examples, run through LocalBackend: calculator agent, graders, chat workflow."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import re
import socket
from pathlib import Path
from typing import Any

import pytest
from fake_openai import serve_fake_openai

from osmosis_run import (
    ExecutionOutcome,
    ExecutionRequest,
    GraderContext,
    LocalBackend,
    RolloutContext,
    RolloutSample,
)
from osmosis_run.examples.calculator import (
    CalculatorAgent,
    CalculatorConfig,
    ExactMatchGrader,
    PartialCreditGrader,
    find_expression,
    format_number,
    safe_eval,
)
from osmosis_run.examples.chat import ChatCompletionsWorkflow, ChatConfig, completions_endpoint

ROOT = Path(__file__).resolve().parent.parent
DATASETS = ROOT / "datasets"
CALCULATOR = "osmosis_run.examples.calculator"
_ENV = (
    "OSMOSIS_CHAT_COMPLETIONS_URL",
    "OSMOSIS_API_KEY",
    "OSMOSIS_ROLLOUT_ID",
    "http_proxy",
    "HTTP_PROXY",
    "all_proxy",
    "ALL_PROXY",
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in _ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OSMOSIS_ARTIFACT_ROOT", str(tmp_path / "artifacts"))


def _user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def _execute(
    backend: LocalBackend,
    prompt: list[dict[str, Any]],
    *,
    label: str | None = "0",
    metadata: dict[str, Any] | None = None,
    endpoint: tuple[str, str | None] | None = None,
) -> ExecutionOutcome:
    request = ExecutionRequest(id="r1", prompt=prompt, label=label, metadata=metadata)

    async def main() -> ExecutionOutcome:
        if endpoint is None:
            return await backend.execute(request)
        url, api_key = endpoint
        with RolloutContext(chat_completions_url=url, api_key=api_key):
            return await backend.execute(request)

    return asyncio.run(main())


def _calculator(grader: str = "ExactMatchGrader", **config: Any) -> LocalBackend:
    return LocalBackend(
        workflow=CalculatorAgent,
        workflow_config=CalculatorConfig(name="calculator", **config),
        grader=f"{CALCULATOR}:{grader}",
    )


def _answer(outcome: ExecutionOutcome) -> str:
    sample = outcome.result.sample
    assert sample is not None
    return str(sample.messages[-1]["content"])


# -- the calculator agent ------------------------------------------------------------------------


def test_calculator_transcript_is_tool_call_tool_result_answer(tmp_path: Path) -> None:
    prompt = [{"role": "system", "content": "Be exact."}, *_user("What is 17 * 23 + 4?")]
    outcome = _execute(_calculator(), prompt, label="395")
    sample = outcome.result.sample
    assert sample is not None
    assert sample.messages[:2] == prompt
    call, result, answer = sample.messages[2:]
    assert call["role"] == "assistant"
    assert call["tool_calls"] == [
        {
            "id": "call_0",
            "type": "function",
            "function": {"name": "calculator", "arguments": '{"expression": "17 * 23 + 4"}'},
        }
    ]
    assert result == {"role": "tool", "tool_call_id": "call_0", "content": "395"}
    assert answer == {"role": "assistant", "content": "The answer is 395."}
    assert sample.metrics == {"tool_calls": 1.0}
    assert sample.reward == 1.0
    log = tmp_path / "artifacts" / "r1" / "artifacts" / "calc.log"
    assert log.read_text(encoding="utf-8") == "17 * 23 + 4 = 395\n"


@pytest.mark.parametrize(
    ("question", "answer"),
    [
        ("What is 12 plus 30?", "The answer is 42."),
        ("What is 7 multiplied by 6?", "The answer is 42."),
        ("What is 84 divided by 2?", "The answer is 42."),
        ("What is 2 to the power of 10?", "The answer is 1024."),
        ("What is 9 squared?", "The answer is 81."),
        ("Evaluate: -(2 + 3) * 4", "The answer is -20."),
        ("What is 2.5 * 4.2?", "The answer is 10.5."),
    ],
)
def test_calculator_answers_symbols_and_word_forms(question: str, answer: str) -> None:
    assert _answer(_execute(_calculator(), _user(question))) == answer


@pytest.mark.parametrize(
    ("question", "answer"),
    [
        # The documented "then" bug: left to right, ignoring precedence (right answer: 14).
        ("Compute 2 + 3 * 4, then give me the result.", "The answer is 20."),
        # True division where "rounded down" asks for floor division (right answer: 3).
        ("What is 17 divided by 5, rounded down?", "The answer is 3.4."),
        # A word problem: it computes the longest run of arithmetic, here just "12".
        ("A box holds 12 eggs. How many eggs are in 5 boxes?", "The answer is 12."),
    ],
)
def test_calculator_is_wrong_on_purpose(question: str, answer: str) -> None:
    outcome = _execute(_calculator(), _user(question), label="999")
    assert _answer(outcome) == answer
    assert outcome.result.sample is not None
    assert outcome.result.sample.reward == 0.0


def test_calculator_without_expression_is_a_validation_error() -> None:
    outcome = _execute(_calculator(), _user("What is seven plus eight?"), label="15")
    assert outcome.result.status == "failure"
    assert outcome.result.err_category == "validation_error"
    assert outcome.result.err_message == (
        "no arithmetic expression in the prompt: 'What is seven plus eight?'"
    )
    assert outcome.grader is None


def test_calculator_precision_comes_from_the_config() -> None:
    assert _answer(_execute(_calculator(precision=2), _user("What is 10 / 3?"))) == (
        "The answer is 3.33."
    )


def test_calculator_reads_the_last_user_message_and_text_parts() -> None:
    prompt: list[dict[str, Any]] = [
        {"role": "user", "content": "What is 1 + 1?"},
        {"role": "assistant", "content": "2"},
        {"role": "user", "content": [{"type": "text", "text": "And 5 * 5?"}]},
    ]
    assert _answer(_execute(_calculator(), prompt)) == "The answer is 25."


@pytest.mark.parametrize(
    ("expression", "value"),
    [("17 * 23 + 4", 395), ("-(2 + 3) ** 2", -25), ("7 // 2", 3), ("7 / 2", 3.5), ("17 % 5", 2)],
)
def test_safe_eval_computes_arithmetic(expression: str, value: float) -> None:
    assert safe_eval(expression) == value


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("__import__('os')", "unsupported syntax in an arithmetic expression: Call"),
        ("(1).__class__", "unsupported syntax in an arithmetic expression: Attribute"),
        ("x + 1", "unsupported syntax in an arithmetic expression: Name"),
        ("[1] * 3", "unsupported syntax in an arithmetic expression: List"),
        ("True + 1", "unsupported syntax in an arithmetic expression: Constant"),
        ("1 / 0", "division by zero in '1 / 0'"),
        ("2 ** 1000", "exponent 1000 is too large (the limit is 100)"),
        ("(-8) ** 0.5", "(-8) ** 0.5 is not a real number"),
        ("1e308 * 10", "the result of '1e308 * 10' is too large"),
        ("1 +", "not an arithmetic expression: '1 +'"),
    ],
)
def test_safe_eval_refuses_everything_else(expression: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        safe_eval(expression)


def test_find_expression_takes_the_longest_run() -> None:
    assert find_expression("Question 3: what is 4 + 5?") == "4 + 5"


@pytest.mark.parametrize(
    ("value", "text"), [(395, "395"), (395.0, "395"), (10 / 3, "3.333333"), (-0.0, "0")]
)
def test_format_number(value: float, text: str) -> None:
    assert format_number(value) == text


# -- the graders ---------------------------------------------------------------------------------


def _grade(
    grader: ExactMatchGrader | PartialCreditGrader,
    answer: str,
    label: str | None,
    metadata: dict[str, Any] | None = None,
) -> float | None:
    sample = RolloutSample(messages=[*_user("q"), {"role": "assistant", "content": answer}])
    ctx = GraderContext(label=label, sample=sample, metadata=metadata)
    asyncio.run(grader.grade(ctx))
    return sample.reward


@pytest.mark.parametrize(
    ("answer", "label", "reward"),
    [
        ("The answer is 395.", "395", 1.0),
        ("The answer is 395.0.", "395", 1.0),
        ("The answer is 395.", "395.0", 1.0),
        ("The answer is 1,234.", "1234", 1.0),
        ("The answer is -20.", "-20", 1.0),
        ("The answer is 394.", "395", 0.0),
        ("I do not know.", "395", 0.0),
        ("Paris.", "paris", 1.0),
        ("Lyon.", "Paris", 0.0),
    ],
)
def test_exact_match_grader(answer: str, label: str, reward: float) -> None:
    assert _grade(ExactMatchGrader(), answer, label) == reward


@pytest.mark.parametrize(
    ("answer", "label", "metadata", "reward"),
    [
        ("The answer is 100.", "100", None, 1.0),
        ("The answer is 90.", "100", None, 0.9),
        ("The answer is 0.5.", "0", None, 0.5),
        ("The answer is 250.", "100", None, 0.0),
        ("No number here.", "100", None, 0.0),
        ("The answer is 10.4.", "10", {"tolerance": 0.5}, 1.0),
        ("The answer is 11.", "10", {"tolerance": 0.5}, 0.9),
    ],
)
def test_partial_credit_grader(
    answer: str, label: str, metadata: dict[str, Any] | None, reward: float
) -> None:
    assert _grade(PartialCreditGrader(), answer, label, metadata) == reward


@pytest.mark.parametrize(
    ("grader", "label", "metadata", "message"),
    [
        (
            "ExactMatchGrader",
            None,
            {},
            "ExactMatchGrader needs a label: give the row a ground_truth",
        ),
        (
            "PartialCreditGrader",
            "Paris",
            None,
            "PartialCreditGrader needs a numeric label, got 'Paris'",
        ),
        (
            "PartialCreditGrader",
            "7",
            {"tolerance": "big"},
            "metadata \"tolerance\" must be a number >= 0, got 'big'",
        ),
    ],
)
def test_grader_misuse_is_a_validation_error(
    grader: str, label: str | None, metadata: dict[str, Any] | None, message: str
) -> None:
    outcome = _execute(_calculator(grader), _user("What is 3 + 4?"), label=label, metadata=metadata)
    assert outcome.result.status == "failure"
    assert outcome.result.err_category == "validation_error"
    assert outcome.result.err_message == message


# -- the bundled datasets ------------------------------------------------------------------------


def _rows(name: str) -> list[dict[str, Any]]:
    with (DATASETS / name).open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def _prompt(row: dict[str, Any]) -> list[dict[str, Any]]:
    if "messages" in row:
        return list(row["messages"])
    if "prompt" in row:
        prompt = row["prompt"]
        return _user(prompt) if isinstance(prompt, str) else list(prompt)
    system = [{"role": "system", "content": row["system_prompt"]}] if "system_prompt" in row else []
    return [*system, *_user(row["user_prompt"])]


def _request(row: dict[str, Any]) -> ExecutionRequest:
    label = row.get("ground_truth", row.get("label"))
    return ExecutionRequest(
        id=str(row["id"]),
        prompt=_prompt(row),
        label=None if label is None else str(label),
        metadata=row.get("metadata"),
    )


def _run_dataset(name: str) -> list[ExecutionOutcome]:
    backend = LocalBackend(
        workflow=f"{CALCULATOR}:CalculatorAgent",
        workflow_config=f"{CALCULATOR}:config",
        grader=f"{CALCULATOR}:ExactMatchGrader",
    )

    async def main() -> list[ExecutionOutcome]:
        requests = [_request(row) for row in _rows(name)]
        return await asyncio.gather(*(backend.execute(request) for request in requests))

    return asyncio.run(main())


@pytest.mark.parametrize("name", ["calculator.jsonl", "calculator-small.jsonl"])
def test_bundled_dataset_has_a_realistic_reward_spread(name: str) -> None:
    outcomes = _run_dataset(name)
    failures = [o.result for o in outcomes if o.result.status != "success"]
    rewards = [(o.result.sample.reward or 0.0) if o.result.sample else 0.0 for o in outcomes]
    mean = sum(rewards) / len(rewards)
    assert 0.5 < mean < 1.0
    assert failures
    assert {failure.err_category for failure in failures} == {"validation_error"}


def test_bundled_dataset_exercises_every_row_shape() -> None:
    rows = _rows("calculator.jsonl")
    assert len(rows) == 300
    assert len({row["id"] for row in rows}) == len(rows)
    assert any("messages" in row for row in rows)
    assert any(isinstance(row.get("prompt"), str) for row in rows)
    assert any(isinstance(row.get("prompt"), list) for row in rows)
    assert any("system_prompt" in row for row in rows)
    assert any(isinstance(row.get("ground_truth"), int) for row in rows)
    assert any("label" in row for row in rows)
    assert any("metadata" not in row for row in rows)


def test_bundled_datasets_are_what_the_generator_writes(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location(
        "make_calculator", DATASETS / "make_calculator.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows = module.build_rows()
    module.write_jsonl(tmp_path / "full.jsonl", [row for _, _, row in rows])
    module.write_jsonl(tmp_path / "small.jsonl", module.small_subset(rows))
    assert (tmp_path / "full.jsonl").read_bytes() == (DATASETS / "calculator.jsonl").read_bytes()
    small = (DATASETS / "calculator-small.jsonl").read_bytes()
    assert (tmp_path / "small.jsonl").read_bytes() == small


# -- the chat workflow ---------------------------------------------------------------------------


def _chat(**config: Any) -> LocalBackend:
    return LocalBackend(
        workflow=ChatCompletionsWorkflow,
        workflow_config=ChatConfig(name="chat", **config),
        grader=f"{CALCULATOR}:ExactMatchGrader",
    )


def test_chat_sends_model_messages_and_key_and_keeps_usage() -> None:
    prompt = [{"role": "system", "content": "Be brief."}, *_user("What is 2 + 2?")]
    with serve_fake_openai(lambda body: "The answer is 4.", api_key="sk-test") as server:
        outcome = _execute(
            _chat(model="tiny", max_tokens=16), prompt, label="4", endpoint=(server.url, "sk-test")
        )
    [received] = server.requests
    assert received.path == "/v1/chat/completions"
    assert received.authorization == "Bearer sk-test"
    assert received.body == {
        "model": "tiny",
        "messages": prompt,
        "temperature": 0.0,
        "max_tokens": 16,
    }
    sample = outcome.result.sample
    assert sample is not None
    assert sample.reward == 1.0
    assert sample.messages[:2] == prompt
    assert sample.messages[2] == {
        "role": "assistant",
        "content": "The answer is 4.",
        "usage": {"prompt_tokens": 7, "completion_tokens": 4, "total_tokens": 11},
        "model": "tiny",
    }
    assert sample.metrics == {"prompt_tokens": 7.0, "completion_tokens": 4.0, "total_tokens": 11.0}


def test_chat_sends_no_authorization_without_a_key() -> None:
    with serve_fake_openai() as server:
        outcome = _execute(_chat(), _user("hello"), label=None, endpoint=(server.url, None))
    assert server.requests[0].authorization is None
    assert server.requests[0].body["model"] == "gpt-4o-mini"
    assert outcome.result.status == "success"
    assert _answer(outcome) == "You said: hello"


def test_chat_http_error_names_the_status_but_never_the_key() -> None:
    with serve_fake_openai(api_key="sk-right") as server:
        outcome = _execute(_chat(), _user("hi"), endpoint=(server.url, "sk-wrong-secret"))
    result = outcome.result
    assert result.status == "failure"
    assert result.err_category == "agent_error"
    assert result.err_message == (
        f"chat completions request to {server.url}/chat/completions failed: HTTP 401: "
        '{"error": {"message": "Incorrect API key provided: ***"}}'
    )
    assert "sk-wrong-secret" not in json.dumps(result.model_dump(mode="json"))


def test_chat_without_url_is_a_validation_error() -> None:
    outcome = _execute(_chat(), _user("hi"))
    assert outcome.result.err_category == "validation_error"
    assert outcome.result.err_message == (
        "no chat completions URL: pass --chat-completions-url or set OSMOSIS_CHAT_COMPLETIONS_URL"
    )


def test_chat_unreachable_server_is_an_agent_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    outcome = _execute(
        _chat(timeout_s=5), _user("hi"), endpoint=(f"http://127.0.0.1:{port}/v1", "k")
    )
    assert outcome.result.err_category == "agent_error"
    message = outcome.result.err_message or ""
    assert message.startswith(f"cannot reach http://127.0.0.1:{port}/v1/chat/completions: ")


@pytest.mark.parametrize(
    ("url", "endpoint"),
    [
        ("http://h/v1", "http://h/v1/chat/completions"),
        ("http://h/v1/", "http://h/v1/chat/completions"),
        ("http://h/v1/chat/completions", "http://h/v1/chat/completions"),
        ("http://h/v1/rollouts/r1", "http://h/v1/rollouts/r1/chat/completions"),
    ],
)
def test_completions_endpoint(url: str, endpoint: str) -> None:
    assert completions_endpoint(url) == endpoint
