"""A model call's spend as rows: the task's usage counters and the day's
rollup (`DailySpend`), always written together.

A `Bill` is what one call adds: `task` (counter -> increment, on the task
row; plain counters, the version does not move) and the same increments, and
one call, to the rollup row named by `key`. It is written

- inside the commit of the decision it paid for, so that both commit at once,
  in one round trip: `writes.Commit.bill`, the rollup a CTE of the commit's
  statement hanging off the task's version-checked UPDATE (`rollup_sql`
  `from_task`), or, with the ORM, a statement of its transaction
  (`bill_rollup`);
- or on its own (`counters.bill_write`), when its decision did not commit, or
  for a call that is not a decision's (a context summary's): on PostgreSQL one
  statement, the task's UPDATE as a CTE before the upsert.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from django.db import connection

from ..models import DailySpend

ROLLUP_KEYS = ("tenant", "day", "agent", "model", "shard")
ROLLUP_ADDED = ("calls", "input_tokens", "output_tokens", "cached_input_tokens", "cost_pico")


@dataclass(frozen=True)
class Bill:
    task: dict[str, int]  # task counter -> increment (the rollup's too)
    key: dict[str, Any]  # `ROLLUP_KEYS`: the day's rollup row


def bill_rollup(bill: Bill) -> None:
    """The rollup's upsert, in the caller's transaction (whose task UPDATE adds
    `bill.task`)."""
    with connection.cursor() as cursor:
        cursor.execute(rollup_sql(from_task=False), rollup_params(bill))


def rollup_params(bill: Bill) -> dict[str, Any]:
    return {f"sp_{k}": v for k, v in {**bill.key, "calls": 1, **bill.task}.items()}


@cache
def rollup_sql(*, from_task: bool) -> str:
    """`INSERT ... ON CONFLICT DO UPDATE` of the rollup row (written from the
    model's `_meta`); `from_task`: as a CTE of a commit's statement, a row only
    when the task's UPDATE (the CTE `task`) wrote one."""
    meta = DailySpend._meta
    column = {f.name: str(f.column) for f in meta.concrete_fields}
    table = connection.ops.quote_name(meta.db_table)
    names = [*ROLLUP_KEYS, *ROLLUP_ADDED]
    values = ", ".join(f"%(sp_{k})s" for k in names)
    source = f"SELECT {values} FROM task" if from_task else f"VALUES ({values})"
    increments = ", ".join(f"{column[k]} = {table}.{column[k]} + EXCLUDED.{column[k]}"
                           for k in ROLLUP_ADDED)
    return (f"INSERT INTO {table} ({', '.join(column[k] for k in names)}) {source} "
            f"ON CONFLICT ({', '.join(column[k] for k in ROLLUP_KEYS)}) DO UPDATE SET "
            f"{increments}")
