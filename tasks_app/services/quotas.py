"""Tenant quotas: what each tenant may run and spend (`accounts_app.models.TenantQuota`,
set by the operator through `accounts_app.services.quotas`), read where it matters.

- Admission (`services.admission`) reads each waiting tenant's terms
  (`admission_terms`): its running limit, its weight, and whether it is held
  because a spend limit is reached and its quota queues instead of refusing.
- A submission (`services.tasks`, one task or a batch) is refused with a 429
  `spend_limit_reached` once the tenant's spend for the UTC day or month has
  reached its limit, unless its quota queues (`spend_refusal`).
- The recovery sweep warns once per period when a tenant's spend passes
  `SPEND_WARNING_AT` of a limit (`spend_warnings_claim`; notify_app sends the
  `spend_warning` webhook), and the dashboard shows the same figures
  (`spend_use`).

Spend is the `DailySpend` rollup (`services.spend`): what model calls cost,
as their replies were priced. It lags a call by the call: a task in flight
when the limit is reached goes on, and stops where its own budget
(`max_cost`) and its agent's `on_exhaustion` say.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db.models import Q, Sum
from django.utils import timezone

from accounts_app.models import OverSpend, TenantQuota
from accounts_app.models.quotas import month_start
from foundations.errors import DomainError, ErrorKind

from ..models import DailySpend
from ..models.spend import EVALUATION_AGENT_PREFIX
from ..pricing import PICO

SPEND_WARNING_AT = Decimal("0.8")
DAY, MONTH = "day", "month"


@dataclass(frozen=True)
class Terms:
    """What admission needs of one tenant."""

    max_running: int
    weight: int
    held: bool  # a spend limit is reached and the quota queues: nothing starts


@dataclass(frozen=True)
class SpendUse:
    """A tenant's spend against one of its limits."""

    period: str  # "day" or "month"
    starts: date
    limit: Decimal
    spent: Decimal

    @property
    def fraction(self) -> float:
        return float(self.spent / self.limit) if self.limit else 1.0

    @property
    def reached(self) -> bool:
        return self.spent >= self.limit

    @property
    def warning(self) -> bool:
        return self.spent >= self.limit * SPEND_WARNING_AT


def default_terms() -> Terms:
    return Terms(max_running=settings.TETHER["MAX_RUNNING_PER_TENANT"], weight=1, held=False)


def admission_terms(tenant_ids: Iterable[int]) -> dict[int, Terms]:
    """The terms of these tenants (the defaults for those without a quota)."""
    ids = list(tenant_ids)
    quotas = {q.tenant_id: q for q in TenantQuota.objects.filter(tenant_id__in=ids)} if ids else {}
    queuing = [q for q in quotas.values() if q.has_spend_limit and q.over_spend == OverSpend.QUEUE]
    spent = _spent([q.tenant_id for q in queuing]) if queuing else {}
    default = default_terms()
    terms = {}
    for tenant_id in ids:
        quota = quotas.get(tenant_id)
        if quota is None:
            terms[tenant_id] = default
            continue
        held = quota in queuing and any(
            u.reached for u in _uses(quota, spent.get(tenant_id, (0, 0))))
        terms[tenant_id] = Terms(
            max_running=default.max_running if quota.max_running is None else quota.max_running,
            weight=max(1, quota.weight), held=held)
    return terms


def spend_use(tenant_id: int) -> list[SpendUse]:
    """The tenant's spend against each limit it has (none: no limits)."""
    quota = TenantQuota.objects.filter(tenant_id=tenant_id).first()
    if quota is None or not quota.has_spend_limit:
        return []
    return _uses(quota, _spent([tenant_id]).get(tenant_id, (0, 0)))


def spend_refusal(tenant_id: int) -> None:
    """Refuse a new task (429) when the tenant's spend reached a limit and its
    quota refuses rather than queues."""
    quota = TenantQuota.objects.filter(tenant_id=tenant_id).first()
    if quota is None or not quota.has_spend_limit or quota.over_spend == OverSpend.QUEUE:
        return
    for use in _uses(quota, _spent([tenant_id]).get(tenant_id, (0, 0))):
        if use.reached:
            raise DomainError(
                "spend_limit_reached",
                f"The tenant's model spend this {use.period} (${use.spent:.2f}) has reached "
                f"its limit (${use.limit:.2f}); new tasks are refused until the "
                f"{use.period} ends.",
                kind=ErrorKind.QUOTA_EXCEEDED,
                details={"period": use.period, "limit": f"{use.limit:.2f}",
                         "spent": f"{use.spent:.2f}",
                         "retry_after_s": _seconds_until_end(use)})


def spend_warnings_claim(tenant_id: int) -> list[SpendUse]:
    """The limits of this tenant past `SPEND_WARNING_AT` not yet warned about in
    their period, marked warned (call in the transaction that sends the warning:
    a conditional update, so two sweeps cannot both claim one)."""
    claimed = []
    for use in spend_use(tenant_id):
        if not use.warning or not use.spent:
            continue  # (a limit of 0 refuses at once; there is nothing to warn of)
        column = "warned_day" if use.period == DAY else "warned_month"
        updated = (TenantQuota.objects.filter(tenant_id=tenant_id)
                   .filter(Q(**{f"{column}__isnull": True}) | ~Q(**{column: use.starts}))
                   .update(**{column: use.starts}))
        if updated:
            claimed.append(use)
    return claimed


def tenants_with_spend_limits() -> list[int]:
    return list(TenantQuota.objects.filter(
        Q(daily_spend_limit__isnull=False) | Q(monthly_spend_limit__isnull=False))
        .values_list("tenant_id", flat=True))


def _spent(tenant_ids: list[int]) -> dict[int, tuple[int, int]]:
    """(today, this month) in pico-dollars, per tenant: one read of the rollup.
    Evaluation runs' cost is kept apart (their agent is `evaluation:<name>`) and
    counts against no limit."""
    today = timezone.now().date()
    rows = (DailySpend.objects.filter(tenant_id__in=tenant_ids, day__gte=month_start(today))
            .exclude(agent__startswith=EVALUATION_AGENT_PREFIX)
            .order_by().values("tenant_id")
            .annotate(today=Sum("cost_pico", filter=Q(day=today)), month=Sum("cost_pico")))
    return {r["tenant_id"]: (r["today"] or 0, r["month"] or 0) for r in rows}


def _uses(quota: TenantQuota, spent: tuple[int, int]) -> list[SpendUse]:
    today = timezone.now().date()
    uses = []
    if quota.daily_spend_limit is not None:
        uses.append(SpendUse(DAY, today, quota.daily_spend_limit, _dollars(spent[0])))
    if quota.monthly_spend_limit is not None:
        uses.append(SpendUse(MONTH, month_start(today), quota.monthly_spend_limit,
                             _dollars(spent[1])))
    return uses


def _dollars(pico: int) -> Decimal:
    return Decimal(pico) / PICO


def _seconds_until_end(use: SpendUse) -> int:
    if use.period == DAY:
        end = use.starts + timedelta(days=1)
    else:
        end = (use.starts + timedelta(days=32)).replace(day=1)
    ends_at = datetime.combine(end, time.min, tzinfo=UTC)
    return max(1, int((ends_at - timezone.now()).total_seconds()))


def quota_summary(tenant_id: int) -> dict[str, Any]:
    """The tenant's quota and its use, as its dashboard shows them."""
    quota = TenantQuota.objects.filter(tenant_id=tenant_id).first()
    terms = default_terms()
    uses = spend_use(tenant_id)
    return {
        "set": quota is not None,
        "max_running": (terms.max_running if quota is None or quota.max_running is None
                        else quota.max_running),
        "weight": quota.weight if quota else 1,
        "over_spend": quota.over_spend if quota else OverSpend.REFUSE,
        "spend": [{"period": u.period, "limit": f"{u.limit:.2f}", "spent": f"{u.spent:.2f}",
                   "percent": min(999, round(100 * u.fraction)), "reached": u.reached,
                   "warning": u.warning} for u in uses],
        "reached": [u.period for u in uses if u.reached],
        "warning": [u.period for u in uses if u.warning and not u.reached],
    }
