"""The operator's setting of a tenant's quota terms (`models.TenantQuota`).

What the terms mean when tasks are admitted and submitted, and how spend is
counted against them, is the runtime's (`tasks_app.services.quotas`)."""
from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError

from foundations.errors import invalid

from ..models import TenantQuota

QUOTA_FIELDS = ("max_running", "weight", "daily_spend_limit", "monthly_spend_limit",
                "over_spend")


def quota_set(*, tenant_id: int, **changes: Any) -> TenantQuota:
    """Set some of a tenant's quota terms (the operator's: `manage.py
    tenant_quota`; the Django admin edits the same row), checked by the
    model's rules; a field given as None is cleared (back to the default)."""
    unknown = set(changes) - set(QUOTA_FIELDS)
    if unknown:
        raise invalid("invalid", "Not quota terms.", **{k: ["unknown"] for k in sorted(unknown)})
    quota = TenantQuota.objects.filter(tenant_id=tenant_id).first() or TenantQuota(
        tenant_id=tenant_id)
    for name, value in changes.items():
        setattr(quota, name, value if value is not None or name != "weight" else 1)
    try:
        quota.full_clean()
    except ValidationError as refused:
        raise invalid("invalid", "The quota is not valid.", **refused.message_dict) from None
    quota.save()
    return quota
