"""Spend per tenant, UTC day, agent and model: the rollup the dashboard and
`/metrics` read.

One row per (tenant, day, agent, model), incremented by
`services.spend.spend_record` in the same transaction as the task's usage
counters, with one `INSERT ... ON CONFLICT DO UPDATE` (no read, no lock held
beyond the row's). Amounts are pico-dollars (`tasks_app.pricing`). The agent
is its name (names never change), so the history outlives a deleted profile.
"""
from __future__ import annotations

from django.db import models

from .tenancy import Tenant


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

    class Meta:
        constraints = [
            # the upsert's conflict target; also serves a tenant's days (tenant, day, ...)
            models.UniqueConstraint(fields=["tenant", "day", "agent", "model"],
                                    name="daily_spend_unique"),
        ]
        indexes = [models.Index(fields=["day"], name="daily_spend_day")]  # /metrics: today

    def __str__(self) -> str:
        return f"{self.tenant_id} {self.day} {self.agent} {self.model}"
