"""Recording what model calls cost: the task's usage counters and the daily rollup.

`spend_record` is called once per model reply that reports usage (a decision's,
or a context summary's), right after the reply arrives and before its decision
is committed: the call was made and
paid for whether or not its decision commits (a stale version, a crash), so
its cost counts against the task's `max_cost` and the tenant's spend either
way, like every model call counts against the budget. In one short
transaction (on PostgreSQL one statement: `store.counters.task_usage_add`) it
adds the tokens and the cost to the task's counters (plain increments: the
task's version does not move) and to the tenant's `DailySpend` row for the
day, agent, model and the task's shard (`INSERT ... ON CONFLICT DO UPDATE`,
written from the model's `_meta`); the process's spend counter moves after
commit.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from config.metrics import count_spend

from ..gateway.base import ModelReply
from ..models import DailySpend
from ..models.spend import SPEND_SHARDS
from ..pricing import PICO, TokenUsage, pico_text, prices_of
from ..store.counters import task_usage_add

COUNTERS = ("input_tokens", "output_tokens", "cached_input_tokens", "cost_pico")


@dataclass(frozen=True)
class Charged:
    """What one model call cost."""

    usage: TokenUsage
    cost_pico: int
    priced: bool

    reported: bool = True  # False: the reply reported no usage (nothing recorded)

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


def spend_of_reply(*, task_id: int, tenant_id: int, agent: dict[str, Any],
                   reply: ModelReply) -> Charged:
    """A decision's model call (see `spend_of_call`). A reply without usage (the
    scripted backend) costs nothing and writes nothing."""
    if reply.usage is None:
        return NOTHING
    return spend_of_call(task_id=task_id, tenant_id=tenant_id, agent=agent, model=reply.model,
                         usage=reply.usage, used_fallback=reply.used_fallback)


def spend_of_call(*, task_id: int, tenant_id: int, agent: dict[str, Any], model: str,
                  usage: TokenUsage, used_fallback: bool) -> Charged:
    """Price one call with the prices of the model that answered (the fallback's
    when it did) from the task's frozen profile `agent`, and record it."""
    prices = prices_of(agent.get("model") or {}, fallback=used_fallback)
    charged = Charged(usage=usage, cost_pico=prices.cost_pico(usage) if prices else 0,
                      priced=prices is not None)
    spend_record(task_id=task_id, tenant_id=tenant_id, agent=str(agent.get("name") or ""),
                 model=model, charged=charged)
    return charged


def spend_record(*, task_id: int, tenant_id: int, agent: str, model: str,
                 charged: Charged) -> None:
    """Add one call's usage and cost to the task and to the day's rollup, together."""
    u = charged.usage
    amounts = {"input_tokens": u.input_tokens, "output_tokens": u.output_tokens,
               "cached_input_tokens": u.cached_input_tokens, "cost_pico": charged.cost_pico}
    day = timezone.now().date()  # UTC (USE_TZ): the rollup's days are UTC days
    rollup = {"tenant": tenant_id, "day": day, "agent": agent[:64], "model": model[:200],
              "shard": task_id % SPEND_SHARDS, "calls": 1, **amounts}
    task_usage_add(task_id, amounts,
                   with_statement=(_upsert_sql(), {f"r_{k}": v for k, v in rollup.items()}))
    transaction.on_commit(lambda: count_spend(model=model, dollars=charged.cost_pico / PICO))


@cache
def _upsert_sql() -> str:
    meta = DailySpend._meta
    column = {f.name: str(f.column) for f in meta.concrete_fields}
    keys = ["tenant", "day", "agent", "model", "shard"]
    added = ["calls", *COUNTERS]
    table = connection.ops.quote_name(meta.db_table)
    increments = ", ".join(f"{column[k]} = {table}.{column[k]} + EXCLUDED.{column[k]}"
                           for k in added)
    return (f"INSERT INTO {table} ({', '.join(column[k] for k in keys + added)}) "
            f"VALUES ({', '.join(f'%(r_{k})s' for k in keys + added)}) "
            f"ON CONFLICT ({', '.join(column[k] for k in keys)}) DO UPDATE SET {increments} "
            "RETURNING 1")
