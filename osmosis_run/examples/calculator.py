"""An offline calculator agent and two graders for it: the example that needs no model or key.

``CalculatorAgent`` reads the last user message, finds the arithmetic in it, "calls" a
calculator tool (an ``ast``-based evaluator, never ``eval``) and answers "The answer is N.".
It is deterministic, and wrong on purpose in documented ways, so a run over
``datasets/calculator.jsonl`` shows a realistic spread of rewards and a few failures:

- Word problems: it does not understand stories; it computes the longest run of arithmetic it
  finds, often a single number from the text.
- "then": a prompt containing the word "then" makes it evaluate left to right, ignoring
  operator precedence ("2 + 3 * 4, then ..." gives 20).
- "rounded down": it reads "17 divided by 5, rounded down" as ``17 / 5`` and answers 3.4.
- Spelled-out numbers ("seven plus eight"): it finds no expression and raises ``ValueError``,
  which the runner records as a ``validation_error`` failure.

Run it with ``osmosis-run eval --config configs/calculator.toml``.
"""

from __future__ import annotations

import ast
import json
import math
import operator
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import Field

from osmosis_run.sdk.context import AgentWorkflowContext, GraderContext
from osmosis_run.sdk.types import AgentWorkflowConfig, AgentWorkflowOutput, RolloutSample
from osmosis_run.sdk.workflow import AgentWorkflow, Grader

__all__ = [
    "CalculatorAgent",
    "CalculatorConfig",
    "ExactMatchGrader",
    "PartialCreditGrader",
    "answers_match",
    "config",
    "find_expression",
    "format_number",
    "last_number",
    "partial_credit",
    "safe_eval",
]

Number = int | float

DEFAULT_PRECISION = 6
MAX_EXPONENT = 100
TOOL_CALL_ID = "call_0"

# Longest phrases first, so "multiplied by" wins over a bare "by".
_WORD_OPERATORS = (
    (re.compile(r"\bto the power of\b", re.IGNORECASE), "**"),
    (re.compile(r"\bmultiplied by\b", re.IGNORECASE), "*"),
    (re.compile(r"\bdivided by\b", re.IGNORECASE), "/"),
    (re.compile(r"\bsquared\b", re.IGNORECASE), "** 2"),
    (re.compile(r"\bplus\b", re.IGNORECASE), "+"),
    (re.compile(r"\bminus\b", re.IGNORECASE), "-"),
    (re.compile(r"\btimes\b", re.IGNORECASE), "*"),
    (re.compile(r"\b(?:modulo|mod)\b", re.IGNORECASE), "%"),
)
_ARITHMETIC_RUN = re.compile(r"[\d.+\-*/%()\s]+")
_THEN = re.compile(r"\bthen\b", re.IGNORECASE)
_TOKEN = re.compile(r"\d+(?:\.\d+)?|\*\*|//|[-+*/%]")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


def _power(base: Number, exponent: Number) -> Number:
    if abs(exponent) > MAX_EXPONENT:
        raise ValueError(f"exponent {exponent} is too large (the limit is {MAX_EXPONENT})")
    if base < 0 and not float(exponent).is_integer():
        raise ValueError(f"({base}) ** {exponent} is not a real number")
    return base**exponent


_BINARY: dict[type[ast.operator], Callable[[Any, Any], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: _power,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Number]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}


def safe_eval(expression: str) -> Number:
    """Evaluate an arithmetic expression: numbers, + - * / // % **, parentheses, unary signs.

    Raises:
        ValueError: the text is not such an expression, or it divides by zero or overflows.
    """
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise ValueError(f"not an arithmetic expression: {expression!r}") from None
    try:
        result = _evaluate(tree.body)
    except ZeroDivisionError:
        raise ValueError(f"division by zero in {expression!r}") from None
    except OverflowError:
        raise ValueError(f"the result of {expression!r} is too large") from None
    if isinstance(result, float) and not math.isfinite(result):
        raise ValueError(f"the result of {expression!r} is too large")
    return result


def _evaluate(node: ast.expr) -> Number:
    value = node.value if isinstance(node, ast.Constant) else None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _BINARY[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    raise ValueError(f"unsupported syntax in an arithmetic expression: {type(node).__name__}")


def find_expression(text: str) -> str:
    """Return the longest run of arithmetic in ``text``, after turning "plus" etc. into symbols.

    Raises:
        ValueError: the text holds no arithmetic with a digit in it.
    """
    normalized = text
    for pattern, symbol in _WORD_OPERATORS:
        normalized = pattern.sub(f" {symbol} ", normalized)
    runs = [run.strip(" .\t\r\n") for run in _ARITHMETIC_RUN.findall(normalized)]
    runs = [run for run in runs if any(char.isdigit() for char in run)]
    if not runs:
        raise ValueError(f"no arithmetic expression in the prompt: {text!r}")
    return " ".join(max(runs, key=len).split())


def _left_to_right(expression: str) -> str:
    """Parenthesize a flat expression left to right (the agent's documented "then" bug)."""
    tokens: list[str] = _TOKEN.findall(expression)
    if "".join(tokens) != expression.replace(" ", "") or len(tokens) < 3 or len(tokens) % 2 == 0:
        return expression
    numbers, operators = tokens[0::2], tokens[1::2]
    if not all(token[0].isdigit() for token in numbers) or any(
        token[0].isdigit() for token in operators
    ):
        return expression
    result = numbers[0]
    for symbol, number in zip(operators, numbers[1:], strict=True):
        result = f"({result} {symbol} {number})"
    return result


def format_number(value: Number, precision: int = DEFAULT_PRECISION) -> str:
    """Format a result: integers as they are, floats rounded to ``precision`` places."""
    if isinstance(value, int):
        return str(value)
    rounded = round(value, precision)
    if rounded.is_integer():
        return str(int(rounded))
    return f"{rounded:.{precision}f}".rstrip("0").rstrip(".")


def _text(content: Any) -> str:
    """The text of a message's content: a string, or the text parts of a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [part.get("text") for part in content if isinstance(part, dict)]
        return "\n".join(part for part in parts if isinstance(part, str))
    return ""


def _last_user_text(prompt: list[dict[str, Any]]) -> str:
    for message in reversed(prompt):
        if message.get("role") == "user":
            return _text(message.get("content"))
    raise ValueError("the prompt has no user message")


def _tool_call(expression: str) -> dict[str, Any]:
    arguments = json.dumps({"expression": expression})
    call = {"id": TOOL_CALL_ID, "type": "function"}
    return {**call, "function": {"name": "calculator", "arguments": arguments}}


def _write_log(artifacts_dir: Path, expression: str, answer: str) -> None:
    (artifacts_dir / "calc.log").write_text(f"{expression} = {answer}\n", encoding="utf-8")


class CalculatorConfig(AgentWorkflowConfig):
    """Settings of the calculator agent."""

    precision: int = Field(DEFAULT_PRECISION, ge=0, le=15)


config = CalculatorConfig(name="calculator", description="offline calculator agent")


class CalculatorAgent(AgentWorkflow[CalculatorConfig]):
    """Answer arithmetic questions through one calculator tool call; no model, no network."""

    async def run(self, ctx: AgentWorkflowContext[CalculatorConfig]) -> AgentWorkflowOutput:
        """Solve the last user message's arithmetic and return the tool-using transcript."""
        question = _last_user_text(ctx.prompt)
        expression = find_expression(question)
        if _THEN.search(question):
            expression = _left_to_right(expression)
        precision = int(getattr(ctx.config, "precision", DEFAULT_PRECISION))
        answer = format_number(safe_eval(expression), precision)
        if ctx.artifacts_dir is not None:
            _write_log(ctx.artifacts_dir, expression, answer)
        messages = [
            *(dict(message) for message in ctx.prompt),
            {"role": "assistant", "content": None, "tool_calls": [_tool_call(expression)]},
            {"role": "tool", "tool_call_id": TOOL_CALL_ID, "content": answer},
            {"role": "assistant", "content": f"The answer is {answer}."},
        ]
        calls = sum(len(message.get("tool_calls") or ()) for message in messages)
        return AgentWorkflowOutput(
            messages=messages, metrics={"tool_calls": calls}, info={"expression": expression}
        )


def last_number(text: str) -> float | None:
    """Return the last number in ``text`` ("1,234" counts as 1234), or None."""
    matches = _NUMBER.findall(_THOUSANDS.sub("", text))
    return float(matches[-1]) if matches else None


def _as_number(label: str) -> float | None:
    try:
        value = float(_THOUSANDS.sub("", label.strip()))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _same(got: float, expected: float) -> bool:
    return math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-9)


def answers_match(answer: str, label: str) -> bool:
    """Compare the answer's last number with a numeric label, else the normalized texts."""
    expected = _as_number(label)
    if expected is None:
        return answer.strip().rstrip(".").casefold() == label.strip().rstrip(".").casefold()
    got = last_number(answer)
    return got is not None and _same(got, expected)


def partial_credit(got: float | None, expected: float, *, tolerance: float = 0.0) -> float:
    """Return 1.0 within ``tolerance``, else ``1 - relative error`` floored at 0, or 0 for None."""
    if got is None:
        return 0.0
    error = abs(got - expected)
    if error <= tolerance or _same(got, expected):
        return 1.0
    return round(max(0.0, 1.0 - error / max(abs(expected), 1.0)), 4)


def _final_answer(sample: RolloutSample | None) -> str:
    """The text of the sample's last assistant message ("" when there is none)."""
    if sample is None:
        return ""
    for message in reversed(sample.messages):
        if message.get("role") == "assistant":
            return _text(message.get("content"))
    return ""


def _label(ctx: GraderContext, grader: str) -> str:
    if ctx.label is None:
        raise ValueError(f"{grader} needs a label: give the row a ground_truth")
    return ctx.label


def _tolerance(metadata: dict[str, Any] | None) -> float:
    value = (metadata or {}).get("tolerance", 0.0)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError(f'metadata "tolerance" must be a number >= 0, got {value!r}')
    return float(value)


class ExactMatchGrader(Grader):
    """Reward 1.0 when the final answer's last number equals the label, else 0.0."""

    async def grade(self, ctx: GraderContext) -> None:
        """Set the reward to 1.0 on a numeric (or, for text labels, textual) match."""
        label = _label(ctx, "ExactMatchGrader")
        ctx.set_reward(1.0 if answers_match(_final_answer(ctx.sample), label) else 0.0)


class PartialCreditGrader(Grader):
    """Reward in [0, 1]: full credit within ``metadata["tolerance"]``, less by relative error."""

    async def grade(self, ctx: GraderContext) -> None:
        """Set the reward from the distance between the final answer and the numeric label."""
        label = _label(ctx, "PartialCreditGrader")
        expected = _as_number(label)
        if expected is None:
            raise ValueError(f"PartialCreditGrader needs a numeric label, got {label!r}")
        got = last_number(_final_answer(ctx.sample))
        ctx.set_reward(partial_credit(got, expected, tolerance=_tolerance(ctx.metadata)))
