"""Write datasets/calculator.jsonl and calculator-small.jsonl, seeded: the same bytes every run.

    python datasets/make_calculator.py

The rows mix every row shape osmosis-run reads (``user_prompt``, ``system_prompt`` +
``user_prompt``, ``messages``, ``prompt`` as a string or a list; ``ground_truth`` as a string or
an integer, or ``label``) and include, on purpose, questions the example ``CalculatorAgent``
gets wrong (word problems, "then" prompts, "rounded down" division) or fails on (numbers spelled
out), so a run shows a realistic reward spread and a few ``validation_error`` failures.
Answers are computed here independently of the agent, with exact integer and decimal arithmetic.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

SEED = 20260101
HERE = Path(__file__).resolve().parent
SMALL_SIZE = 20

Answer = int | Decimal
Question = tuple[str, Answer]
Maker = Callable[[random.Random], Question]

_PHRASES = (
    "What is {e}?",
    "Compute {e}.",
    "Calculate {e}",
    "Evaluate: {e}",
    "Please work out {e} for me.",
    "{e} = ?",
)
_SYSTEM_PROMPTS = (
    "You are a careful calculator. Answer with a number.",
    "Solve the arithmetic problem. Use the calculator tool.",
    "You are a math tutor. Give the final answer at the end.",
)
_SPELLED = (
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
)


def _ask(rng: random.Random, expression: str) -> str:
    return rng.choice(_PHRASES).format(e=expression)


def _add(rng: random.Random) -> Question:
    a, b = rng.randint(1, 999), rng.randint(1, 999)
    return _ask(rng, f"{a} + {b}"), a + b


def _sub(rng: random.Random) -> Question:
    a, b = rng.randint(1, 999), rng.randint(1, 999)
    return _ask(rng, f"{a} - {b}"), a - b


def _mul(rng: random.Random) -> Question:
    a, b = rng.randint(2, 99), rng.randint(2, 99)
    return _ask(rng, f"{a} * {b}"), a * b


def _div(rng: random.Random) -> Question:
    b, q = rng.randint(2, 20), rng.randint(2, 50)
    return _ask(rng, f"{b * q} / {b}"), q


def _floordiv(rng: random.Random) -> Question:
    a, b = rng.randint(10, 200), rng.randint(2, 12)
    return _ask(rng, f"{a} // {b}"), a // b


def _mod(rng: random.Random) -> Question:
    a, b = rng.randint(10, 200), rng.randint(2, 12)
    return _ask(rng, f"{a} % {b}"), a % b


def _pow(rng: random.Random) -> Question:
    a, b = rng.randint(2, 12), rng.randint(2, 5)
    return _ask(rng, f"{a} ** {b}"), a**b


_MIXED: tuple[tuple[str, Callable[[int, int, int, int], int]], ...] = (
    ("{a} * {b} + {c}", lambda a, b, c, _d: a * b + c),
    ("{a} + {b} * {c}", lambda a, b, c, _d: a + b * c),
    ("({a} + {b}) * {c}", lambda a, b, c, _d: (a + b) * c),
    ("{a} * ({b} - {c})", lambda a, b, c, _d: a * (b - c)),
    ("{a} - {b} * {c} + {d}", lambda a, b, c, d: a - b * c + d),
    ("({a} - {b}) * ({c} + {d})", lambda a, b, c, d: (a - b) * (c + d)),
)


def _mixed(rng: random.Random) -> Question:
    template, answer = rng.choice(_MIXED)
    a, b, c, d = (rng.randint(2, 30) for _ in range(4))
    return _ask(rng, template.format(a=a, b=b, c=c, d=d)), answer(a, b, c, d)


def _decimal(rng: random.Random) -> Question:
    a = Decimal(rng.randint(1, 999)) / 10
    b = Decimal(rng.randint(1, 99)) / 10
    symbol = rng.choice("+-*")
    answer = {"+": a + b, "-": a - b, "*": a * b}[symbol]
    return _ask(rng, f"{a} {symbol} {b}"), answer


def _negative(rng: random.Random) -> Question:
    a, b = rng.randint(2, 50), rng.randint(2, 50)
    if rng.random() < 0.5:
        return _ask(rng, f"-{a} * {b}"), -a * b
    return _ask(rng, f"{a} * -{b}"), -a * b


def _words(rng: random.Random) -> Question:
    a, b = rng.randint(2, 60), rng.randint(2, 12)
    choices: list[Question] = [
        (f"What is {a} plus {b}?", a + b),
        (f"What is {a} minus {b}?", a - b),
        (f"What is {a} times {b}?", a * b),
        (f"What is {a} multiplied by {b}?", a * b),
        (f"What is {a * b} divided by {b}?", a),
        (f"What is {a} modulo {b}?", a % b),
        (f"What is {b} to the power of 3?", b**3),
        (f"What is {a} squared?", a * a),
    ]
    return rng.choice(choices)


def _then(rng: random.Random) -> Question:
    """Precedence-sensitive most of the time: the agent's "then" bug gets those wrong."""
    a, b, c = rng.randint(2, 20), rng.randint(2, 20), rng.randint(2, 9)
    choices: list[Question] = [
        (f"Compute {a} + {b} * {c}, then give me the result.", a + b * c),
        (f"Work out {a} - {b} * {c} and then report the answer.", a - b * c),
        (f"First evaluate {a} + {b} * {c}, then tell me what you got.", a + b * c),
        (f"Compute {a} + {b} - {c}, then give me the result.", a + b - c),
    ]
    return rng.choices(choices, weights=(3, 2, 2, 3))[0]


def _rounded_down(rng: random.Random) -> Question:
    """The agent answers these with true division: always wrong (a is not a multiple of b)."""
    b = rng.randint(3, 12)
    a = b * rng.randint(2, 20) + rng.randint(1, b - 1)
    return f"What is {a} divided by {b}, rounded down?", a // b


def _story(rng: random.Random) -> Question:
    """A word problem: the agent computes a number from the story, not the answer."""
    a, b = rng.randint(6, 24), rng.randint(2, 9)
    choices: list[Question] = [
        (f"A box holds {a} eggs. How many eggs are in {b} boxes?", a * b),
        (f"Sam had {a + 20} marbles and gave away {b}. How many are left?", a + 20 - b),
        (f"A train travels {a * 10} km every hour. How far does it go in {b} hours?", a * 10 * b),
        (f"{a * b} apples are shared equally among {b} children. How many does each get?", a),
        (f"Mia reads {a} pages a day for {b} days. How many pages does she read?", a * b),
    ]
    return rng.choice(choices)


def _spelled(rng: random.Random) -> Question:
    """Numbers in words: the agent finds no expression and fails with a ValueError."""
    a, b = rng.randint(5, 12), rng.randint(1, 5)
    word, answer = rng.choice([("plus", a + b), ("minus", a - b), ("times", a * b)])
    return f"What is {_SPELLED[a]} {word} {_SPELLED[b]}?", answer


# (op, difficulty, count, maker): 300 rows in all.
PLAN: tuple[tuple[str, str, int, Maker], ...] = (
    ("add", "easy", 30, _add),
    ("sub", "easy", 30, _sub),
    ("mul", "easy", 30, _mul),
    ("div", "medium", 20, _div),
    ("floordiv", "medium", 15, _floordiv),
    ("mod", "medium", 15, _mod),
    ("pow", "hard", 15, _pow),
    ("mixed", "hard", 37, _mixed),
    ("decimal", "medium", 20, _decimal),
    ("negative", "medium", 15, _negative),
    ("words", "medium", 25, _words),
    ("then", "hard", 20, _then),
    ("rounded_down", "hard", 8, _rounded_down),
    ("word_problem", "hard", 14, _story),
    ("spelled_out", "hard", 6, _spelled),
)
SHAPES = ("user_prompt", "system_user", "messages", "prompt_string", "prompt_list")
SHAPE_WEIGHTS = (65, 12, 12, 6, 5)


def _prompt_fields(rng: random.Random, shape: str, question: str) -> dict[str, Any]:
    system = rng.choice(_SYSTEM_PROMPTS)
    if shape == "system_user":
        return {"system_prompt": system, "user_prompt": question}
    if shape == "prompt_string":
        return {"prompt": question}
    if shape == "prompt_list":
        return {"prompt": [{"role": "user", "content": question}]}
    if shape == "messages":
        return {"messages": _chat(rng, system, question)}
    return {"user_prompt": question}


def _chat(rng: random.Random, system: str, question: str) -> list[dict[str, str]]:
    if rng.random() < 0.5:
        return [{"role": "system", "content": system}, {"role": "user", "content": question}]
    return [
        {"role": "user", "content": "Hi! Can you help me with some arithmetic?"},
        {"role": "assistant", "content": "Of course. What would you like to compute?"},
        {"role": "user", "content": question},
    ]


def _answer_text(answer: Answer) -> str:
    return str(answer) if isinstance(answer, int) else f"{answer.normalize():f}"


def _label_fields(rng: random.Random, answer: Answer) -> dict[str, Any]:
    roll = rng.random()
    if roll < 0.08:
        return {"label": _answer_text(answer)}
    if roll < 0.22 and isinstance(answer, int):
        return {"ground_truth": answer}
    return {"ground_truth": _answer_text(answer)}


def _metadata(rng: random.Random, op: str, difficulty: str) -> dict[str, Any] | None:
    if rng.random() < 0.04:
        return None
    metadata: dict[str, Any] = {"difficulty": difficulty, "op": op}
    if op == "decimal" and rng.random() < 0.5:
        metadata["tolerance"] = 0.01
    return metadata


def build_rows(seed: int = SEED) -> list[tuple[str, str, dict[str, Any]]]:
    """Return ``(shape, op, row)`` triples in dataset order; the same seed gives the same rows."""
    rng = random.Random(seed)
    questions = [(op, level, *make(rng)) for op, level, count, make in PLAN for _ in range(count)]
    rng.shuffle(questions)
    rows = []
    for number, (op, level, question, answer) in enumerate(questions, start=1):
        shape = rng.choices(SHAPES, weights=SHAPE_WEIGHTS)[0]
        row: dict[str, Any] = {"id": f"calc-{number:04d}"}
        row |= _prompt_fields(rng, shape, question) | _label_fields(rng, answer)
        metadata = _metadata(rng, op, level)
        if metadata is not None:
            row["metadata"] = metadata
        rows.append((shape, op, row))
    return rows


def small_subset(rows: list[tuple[str, str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Pick SMALL_SIZE rows, in dataset order, covering every op and every row shape."""
    chosen: dict[str, dict[str, Any]] = {}
    seen: set[str] = set()
    for shape, op, row in rows:
        if op not in seen or shape not in seen:
            seen |= {op, shape}
            chosen[row["id"]] = row
    for _, _, row in rows:
        if len(chosen) >= SMALL_SIZE:
            break
        chosen.setdefault(row["id"], row)
    return sorted(chosen.values(), key=lambda row: str(row["id"]))[:SMALL_SIZE]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    """Write rows as JSON lines."""
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    path.write_text(text, encoding="utf-8")


def main() -> None:
    """Write both files next to this script."""
    rows = build_rows()
    write_jsonl(HERE / "calculator.jsonl", [row for _, _, row in rows])
    write_jsonl(HERE / "calculator-small.jsonl", small_subset(rows))


if __name__ == "__main__":
    main()
