"""Pricing what model calls cost, and billing it: the task's usage counters and
the daily rollup (`store.spend`).

A decision's model call is priced as its reply arrives (`priced_reply`): the
prices of the model that answered, from the task's frozen profile. Its
`Bill` commits with the decision it paid for, in the decision's own statement
(`runner.recording`); when that decision does not commit (a stale version, an
error), the bill is written on its own (`runner.results.Spent.charge`): the
call was made and paid for either way, so its cost counts against the task's
`max_cost` and the tenant's spend either way, like every model call counts
against the budget. A call that is not a decision's (a context summary's) is
billed on its own at once (`spend_of_call`). Either way the task's counters
(plain increments: the task's version does not move) and the tenant's
`DailySpend` row for the day, agent, model and the task's shard move
together. The process's spend counter moves when the reply is priced.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from foundations.metrics import count_spend

from ..gateway.base import ModelReply
from ..models.spend import EVALUATION_AGENT_PREFIX, SPEND_SHARDS
from ..pricing import PICO, TokenUsage, pico_text, prices_of
from ..store.counters import bill_write
from ..store.spend import Bill


@dataclass(frozen=True)
class Charged:
    """What one model call cost."""

    usage: TokenUsage
    cost_pico: int
    priced: bool

    reported: bool = True  # False: the reply reported no usage (nothing recorded)
    bill: Bill | None = None  # what it adds to the task and the rollup (`store.spend`)

    @property
    def model_log(self) -> dict[str, Any]:
        """`{"usage": ...}` for the step's model log (empty when nothing was reported)."""
        if not self.reported:
            return {}
        return {"usage": {"input_tokens": self.usage.input_tokens,
                          "output_tokens": self.usage.output_tokens,
                          "cached_input_tokens": self.usage.cached_input_tokens,
                          "cost": pico_text(self.cost_pico), "priced": self.priced}}


NOTHING = Charged(usage=TokenUsage(), cost_pico=0, priced=False, reported=False)


def priced_reply(*, task_id: int, tenant_id: int, agent: dict[str, Any],
                 reply: ModelReply, evaluation_run: bool = False) -> Charged:
    """A decision's model call, priced and billed but not written (its `bill`
    commits with the decision). A reply without usage (the scripted backend)
    costs nothing and bills nothing."""
    if reply.usage is None:
        return NOTHING
    return _priced(task_id=task_id, tenant_id=tenant_id, agent=agent, model=reply.model,
                   usage=reply.usage, used_fallback=reply.used_fallback,
                   evaluation_run=evaluation_run)


def spend_of_call(*, task_id: int, tenant_id: int, agent: dict[str, Any], model: str,
                  usage: TokenUsage, used_fallback: bool,
                  evaluation_run: bool = False) -> Charged:
    """A call that is not a decision's, priced and billed on its own at once."""
    charged = _priced(task_id=task_id, tenant_id=tenant_id, agent=agent, model=model,
                      usage=usage, used_fallback=used_fallback, evaluation_run=evaluation_run)
    assert charged.bill is not None
    bill_write(task_id, charged.bill)
    return charged


def _priced(*, task_id: int, tenant_id: int, agent: dict[str, Any], model: str,
            usage: TokenUsage, used_fallback: bool, evaluation_run: bool) -> Charged:
    """Price one call with the prices of the model that answered (the fallback's
    when it did) from the task's frozen profile `agent`, and bill it. An
    evaluation run's spend is rolled up apart from the live spend
    (`EVALUATION_AGENT_PREFIX`)."""
    prices = prices_of(agent.get("model") or {}, fallback=used_fallback)
    cost_pico = prices.cost_pico(usage) if prices else 0
    amounts = {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
               "cached_input_tokens": usage.cached_input_tokens, "cost_pico": cost_pico}
    day = timezone.now().date()  # UTC (USE_TZ): the rollup's days are UTC days
    bill = Bill(task=amounts, key={
        "tenant": tenant_id, "day": day,
        "agent": ((EVALUATION_AGENT_PREFIX if evaluation_run else "")
                  + str(agent.get("name") or ""))[:64],
        "model": model[:200], "shard": task_id % SPEND_SHARDS})
    count_spend(model=model, dollars=cost_pico / PICO)
    return Charged(usage=usage, cost_pico=cost_pico, priced=prices is not None, bill=bill)
