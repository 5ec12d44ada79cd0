"""A tenant's retention period: the operator's default (`TETHER_RETENTION_DAYS`)
unless the tenant's admin set a shorter one; never longer than the operator's
maximum (`TETHER_RETENTION_MAX_DAYS`)."""
from __future__ import annotations

from typing import Any

from django.conf import settings

from accounts_app.models import Tenant
from audit_app.services import Who, audit_record
from foundations.errors import invalid

from ..models import RetentionPolicy


def retention_days(tenant: Tenant) -> int:
    policy = RetentionPolicy.objects.filter(tenant=tenant).first()
    return _bounded(policy.days if policy else int(settings.TETHER["RETENTION_DAYS"]))


def retention_of(tenant: Tenant) -> dict[str, Any]:
    policy = RetentionPolicy.objects.filter(tenant=tenant).first()
    return {"days": retention_days(tenant), "own": policy is not None,
            "default_days": _bounded(int(settings.TETHER["RETENTION_DAYS"])),
            "max_days": int(settings.TETHER["RETENTION_MAX_DAYS"])}


def retention_set(*, tenant: Tenant, days: int | None, actor: Who) -> dict[str, Any]:
    """Set (or with None, drop) the tenant's own period; audited."""
    before = retention_of(tenant)
    if days is None:
        RetentionPolicy.objects.filter(tenant=tenant).delete()
    else:
        most = int(settings.TETHER["RETENTION_MAX_DAYS"])
        if not 1 <= days <= most:
            raise invalid("retention_out_of_range",
                          f"Retention is 1 to {most} days (the operator's maximum).",
                          days=[f"Ensure this value is between 1 and {most}."])
        RetentionPolicy.objects.update_or_create(
            tenant=tenant, defaults={"days": days, "updated_by_id": actor.user_id})
    after = retention_of(tenant)
    audit_record(actor=actor, tenant_id=tenant.pk, kind="retention", name=tenant.name,
                 action="updated", before=before, after=after)
    return after


def _bounded(days: int) -> int:
    return min(days, int(settings.TETHER["RETENTION_MAX_DAYS"]))
