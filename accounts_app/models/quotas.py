"""A tenant's quota, set by the operator (the Django admin, `manage.py
tenant_quota`), never by the tenant: how many of its tasks may run at once,
its weight when tenants wait for slots together, and what it may spend per
UTC day and month. A tenant without a row has the defaults (the global
per-tenant limit, weight 1, no spend limit)."""
from __future__ import annotations

from datetime import date
from decimal import Decimal

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from .tenancy import Tenant


class OverSpend(models.TextChoices):
    REFUSE = "refuse", "Refuse new tasks (429)"
    QUEUE = "queue", "Accept new tasks, start them when the period allows"


class TenantQuota(models.Model):
    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="quota",
                                  primary_key=True)
    max_running = models.PositiveIntegerField(
        null=True, blank=True,
        help_text="Tasks of this tenant RUNNING at once (empty: TETHER_MAX_RUNNING_PER_TENANT).")
    weight = models.PositiveIntegerField(
        default=1, validators=[MinValueValidator(1), MaxValueValidator(1000)],
        help_text="Share of the slots when several tenants wait (weighted fair admission).")
    daily_spend_limit = models.DecimalField(
        max_digits=14, decimal_places=2, null=True, blank=True,
        validators=[MinValueValidator(Decimal("0"))],
        help_text="Dollars of model spend per UTC day (empty: no limit).")
    monthly_spend_limit = models.DecimalField(
        max_digits=14, decimal_places=2, null=True, blank=True,
        validators=[MinValueValidator(Decimal("0"))],
        help_text="Dollars of model spend per UTC calendar month (empty: no limit).")
    over_spend = models.CharField(
        max_length=8, choices=OverSpend.choices, default=OverSpend.REFUSE,
        help_text="What a submission gets once a spend limit is reached.")
    # The start of the period whose 80 % warning was sent (once per period).
    warned_day = models.DateField(null=True, blank=True, editable=False)
    warned_month = models.DateField(null=True, blank=True, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "tasks_app_tenantquota"

    def __str__(self) -> str:
        return f"quota of {self.tenant_id}"

    @property
    def has_spend_limit(self) -> bool:
        return self.daily_spend_limit is not None or self.monthly_spend_limit is not None


def month_start(day: date) -> date:
    return day.replace(day=1)
