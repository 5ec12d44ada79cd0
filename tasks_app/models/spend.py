"""Spend per tenant, UTC day, agent and model: the rollup the dashboard and
`/metrics` read.

Incremented in the same transaction as the task's usage counters (`store.spend`:
in the statement of the decision the call made, or on its own), with one
`INSERT ... ON CONFLICT DO UPDATE` (no read, no lock held beyond the row's).
Each (tenant, day, agent, model) is spread over `SPEND_SHARDS` rows, a task
always adding to the same one (its id modulo the shards): concurrent replies
of one agent's tasks would otherwise queue for one row's lock, each through
the commit of the one before. Readers sum the rows;
the sums are exact. Amounts are pico-dollars (`tasks_app.pricing`). The agent
is its name (names never change), so the history outlives a deleted profile.
"""
from __future__ import annotations

from django.db import models

from accounts_app.models import Tenant

SPEND_SHARDS = 16
# The rollup's `agent` of an evaluation run's spend (`evals_app`): kept apart from
# the tenant's live spend, which leaves these rows out (the dashboard, /metrics).
EVALUATION_AGENT_PREFIX = "evaluation:"


class DailySpend(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+",
                               db_index=False)
    day = models.DateField(help_text="UTC")
    agent = models.CharField(max_length=64)
    model = models.CharField(max_length=200)
    calls = models.BigIntegerField(default=0)
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cached_input_tokens = models.BigIntegerField(default=0)
    cost_pico = models.BigIntegerField(default=0)
    shard = models.PositiveSmallIntegerField(default=0, help_text="task id % SPEND_SHARDS")

    class Meta:
        constraints = [
            # the upsert's conflict target; also serves a tenant's days (tenant, day, ...)
            models.UniqueConstraint(fields=["tenant", "day", "agent", "model", "shard"],
                                    name="daily_spend_unique_shard"),
        ]
        indexes = [models.Index(fields=["day"], name="daily_spend_day")]  # /metrics: today

    def __str__(self) -> str:
        return f"{self.tenant_id} {self.day} {self.agent} {self.model}"
