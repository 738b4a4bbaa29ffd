"""Run budgets: ``--time-limit``, ``--max-cost`` and ``--max-tokens`` stop a run cleanly.

Each counts this invocation, as ``timeout(1)`` counts a command: the wall time since the run
started (the executor's start included: Ray actors, worker processes), and the tokens and cost
of every model call through this invocation's gateway that the upstream answered (a cancelled
rollout's calls too: they were paid for; the model cache's answers are free). When one runs
out, the scheduler stops as a Ctrl-C stops it: no rollout starts, those in flight are
cancelled, what finished is kept; summary.json's ``budget`` says which ran out, and the command
exits 124. The same command resumes, with a fresh budget (or a larger one).

Tokens and cost are the gateway's accounting (``Ledger.live``): a run without the gateway
(``--no-gateway``, or no endpoint) cannot count them, and a cost needs ``--token-price``;
``check_budgets`` refuses both before anything runs. Calls in flight when a budget runs out
still finish and are counted, so a run may end slightly past its ``--max-cost``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from osmosis_run.errors import ConfigError
from osmosis_run.results.records import BudgetStop
from osmosis_run.run.seam import Spending
from osmosis_run.run.settings.models import format_duration

if TYPE_CHECKING:
    from osmosis_run.run.settings import EvalSettings

__all__ = ["Budgets", "check_budgets", "stop_message"]


@dataclass(frozen=True, slots=True)
class Budgets:
    """The budgets of one invocation (None: no such budget).

    Attributes:
        time_limit_s: seconds of wall time.
        max_cost: USD, priced at ``price``.
        max_tokens: total tokens.
        price: USD per million prompt and completion tokens (``--token-price``).
    """

    time_limit_s: float | None = None
    max_cost: float | None = None
    max_tokens: int | None = None
    price: tuple[float, float] | None = None

    @classmethod
    def of(cls, settings: EvalSettings) -> Budgets:
        """The budgets a run's settings give."""
        e = settings.execution
        return cls(e.time_limit, e.max_cost, e.max_tokens, settings.gateway.token_price)

    @property
    def counts_spending(self) -> bool:
        """Whether a budget counts the model calls (and the gateway must be watched)."""
        return self.max_cost is not None or self.max_tokens is not None

    def out_of_time(self, elapsed_s: float) -> BudgetStop:
        """The stop of a run whose ``--time-limit`` ran out after ``elapsed_s``."""
        assert self.time_limit_s is not None
        return BudgetStop(
            budget="time_limit",
            limit=self.time_limit_s,
            spent=round(elapsed_s, 3),
            reached=f"time limit {format_duration(self.time_limit_s)} reached",
        )

    def spent(self, spending: Spending) -> BudgetStop | None:
        """The stop of a run whose tokens or cost have reached their budget, else None."""
        tokens = spending.billed_tokens
        if self.max_tokens is not None and tokens >= self.max_tokens:
            return BudgetStop(
                budget="max_tokens",
                limit=self.max_tokens,
                spent=tokens,
                reached=f"token limit {self.max_tokens:,} reached ({tokens:,} used)",
            )
        if self.max_cost is not None and self.price is not None:
            prompt, completion = self.price
            cost = (
                spending.billed_prompt_tokens * prompt
                + spending.billed_completion_tokens * completion
            ) / 1e6
            if cost >= self.max_cost:
                return BudgetStop(
                    budget="max_cost",
                    limit=self.max_cost,
                    spent=round(cost, 6),
                    reached=f"cost limit ${self.max_cost:g} reached (${cost:.4f} spent)",
                )
        return None


def stop_message(stop: BudgetStop, *, done: int, planned: int | None) -> str:
    """The one line that ends a run a budget stopped, for stderr and summary.json.

    For example ``time limit 45m reached after 1,234 of 5,000 rollouts; the same command
    resumes``.
    """
    of = f" of {planned:,}" if planned is not None else ""
    return f"{stop.reached} after {done:,}{of} rollouts; the same command resumes"


def check_budgets(settings: EvalSettings) -> None:
    """Refuse budgets the run cannot count, before anything runs (exit 2).

    Raises:
        ConfigError: ``--max-cost`` without ``--token-price``; ``--max-cost`` or
            ``--max-tokens`` without the model gateway (``--no-gateway``, or no endpoint).
    """
    e, g = settings.execution, settings.gateway
    given = [
        name
        for name, value in (("--max-cost", e.max_cost), ("--max-tokens", e.max_tokens))
        if value is not None
    ]
    if not given:
        return
    if e.max_cost is not None and g.token_price is None:
        raise ConfigError(
            "--max-cost needs --token-price PROMPT,COMPLETION (USD per million tokens, such as "
            "2.5,10) to price the gateway's tokens"
        )
    if settings.uses_gateway:
        return
    why = (
        "--no-gateway passes the endpoint straight through"
        if g.no_gateway
        else "there is no model endpoint (--chat-completions-url)"
    )
    verb, it = ("counts", "it") if len(given) == 1 else ("count", "them")
    raise ConfigError(
        f"{' and '.join(given)} {verb} the model gateway's tokens, but {why}; "
        f"drop {it}, or use --time-limit"
    )
