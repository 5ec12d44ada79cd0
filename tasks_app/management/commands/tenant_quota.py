"""Show or set a tenant's quota (the operator's; tenants cannot change it).

A command of tasks_app, not of accounts_app, which owns the quota: besides its
terms it shows the tenant's spend against them (`services.quotas.spend_use`)."""
from decimal import Decimal, InvalidOperation

from django.core.management.base import BaseCommand, CommandError

from accounts_app.models import OverSpend, Tenant
from accounts_app.services.quotas import quota_set
from foundations.errors import DomainError
from tasks_app.services.quotas import spend_use

NONE = "none"
UNSET = object()  # an option not given (None is an option given as "none")


def _count(text: str) -> int | None:
    return None if text == NONE else int(text)


def _dollars(text: str) -> Decimal | None:
    if text == NONE:
        return None
    try:
        return Decimal(text)
    except InvalidOperation:
        raise CommandError(f"not an amount of dollars: {text!r}") from None


def _shown(value: object, unset: str) -> str:
    return unset if value is None else str(value)


class Command(BaseCommand):
    help = ("Show a tenant's quota, or set some of its terms (`none` clears one: back to "
            "the default).")

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("tenant", help="the tenant's name")
        parser.add_argument("--max-running", type=_count, default=UNSET,
                            help="its tasks RUNNING at once (none: the global per-tenant limit)")
        parser.add_argument("--weight", type=_count, default=UNSET,
                            help="its share of slots when tenants wait together (1..1000)")
        parser.add_argument("--daily-spend", type=_dollars, default=UNSET,
                            help="dollars of model spend per UTC day (none: no limit)")
        parser.add_argument("--monthly-spend", type=_dollars, default=UNSET,
                            help="dollars of model spend per UTC month (none: no limit)")
        parser.add_argument("--over-spend", choices=[c.value for c in OverSpend], default=UNSET,
                            help="at a spend limit: refuse new tasks (429) or queue them")

    def handle(self, *args, **opts):  # type: ignore[no-untyped-def]
        tenant = Tenant.objects.filter(name=opts["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant named {opts['tenant']!r}")
        given = {"max_running": "max_running", "weight": "weight",
                 "daily_spend": "daily_spend_limit", "monthly_spend": "monthly_spend_limit",
                 "over_spend": "over_spend"}
        changes = {field: opts[option] for option, field in given.items()
                   if opts.get(option, UNSET) is not UNSET}
        if changes:
            try:
                quota_set(tenant_id=tenant.pk, **changes)
            except DomainError as refused:
                raise CommandError(f"{refused.message} {refused.details}") from None
        quota = getattr(Tenant.objects.get(pk=tenant.pk), "quota", None)
        if quota is None:
            self.stdout.write(f"tenant {tenant.name}: no quota (the defaults)")
            return
        self.stdout.write(
            f"tenant {tenant.name}: max_running {_shown(quota.max_running, 'default')}, "
            f"weight {quota.weight}, daily spend limit {_shown(quota.daily_spend_limit, 'none')}, "
            f"monthly spend limit {_shown(quota.monthly_spend_limit, 'none')}, "
            f"over spend: {quota.over_spend}")
        for use in spend_use(tenant.pk):
            self.stdout.write(f"  spent this {use.period}: ${use.spent:.2f} of "
                              f"${use.limit:.2f} ({use.fraction:.0%})")
