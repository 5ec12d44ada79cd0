"""Reads of the audit log: a tenant's entries, newest first, filtered."""
from __future__ import annotations

from datetime import datetime

from django.db.models import QuerySet

from .models import AuditEntry


def audit_entries(tenant_id: int, *, kind: str = "", name: str = "", actor: str = "",
                  since: datetime | None = None) -> QuerySet[AuditEntry]:
    qs = AuditEntry.objects.filter(tenant_id=tenant_id)
    if kind:
        qs = qs.filter(kind=kind)
    if name:
        qs = qs.filter(name=name)
    if actor:
        qs = qs.filter(actor=actor)
    if since is not None:
        qs = qs.filter(created_at__gte=since)
    return qs.order_by("-id")
