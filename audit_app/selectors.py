"""Reads of the audit log: a tenant's entries, newest first, filtered."""
from __future__ import annotations

import json
from datetime import datetime

from django.db.models import Q, QuerySet, TextField
from django.db.models.functions import Cast

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


def audit_entries_naming(tenant_id: int, containing: str) -> QuerySet[AuditEntry]:
    """The tenant's entries whose name or diff holds `containing` (a subject):
    what an erasure redacts and a subject's export includes, oldest first."""
    needle = json.dumps(containing)[1:-1]  # as it is spelled inside the JSON text
    return (AuditEntry.objects.filter(tenant_id=tenant_id)
            .annotate(diff_text=Cast("diff", TextField()))
            .filter(Q(diff_text__contains=needle) | Q(name__contains=containing))
            .order_by("id"))
