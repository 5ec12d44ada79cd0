"""Reads of resource leases: the API's list, and what a task waits for."""
from __future__ import annotations

from typing import Any

from django.db.models import Q
from django.utils import timezone

from ..models import LeaseWaiter, ResourceLease

MAX_LISTED = 500


def leases_of_tenant(tenant_id: int, *, resource: str | None = None) -> list[dict[str, Any]]:
    """Held leases and leases with waiters, newest first (at most `MAX_LISTED`)."""
    waiting = LeaseWaiter.objects.filter(tenant_id=tenant_id)
    if resource:
        waiting = waiting.filter(resource=resource)
    waiters: dict[str, list[dict[str, Any]]] = {}
    for w in waiting.order_by("since")[:MAX_LISTED]:
        waiters.setdefault(w.resource, []).append(
            {"task": w.task_id, "step_no": w.step_no, "since": w.since})
    rows = ResourceLease.objects.filter(tenant_id=tenant_id).filter(
        ~Q(holder_key="") | Q(resource__in=list(waiters)))
    if resource:
        rows = rows.filter(resource=resource)
    now = timezone.now()
    return [{
        "resource": r.resource, "fencing_token": r.fencing_token,
        "holder": ({"task": r.holder_task_id, "step_no": r.holder_step_no,
                    "idempotency_key": r.holder_key} if r.holder_key else None),
        "acquired_at": r.acquired_at if r.holder_key else None,
        "expires_at": r.expires_at,
        "expired": bool(r.holder_key and r.expires_at and r.expires_at <= now),
        "waiters": waiters.get(r.resource, []),
    } for r in rows.order_by("-updated_at")[:MAX_LISTED]]


def waiting_for(task_id: int) -> dict[str, Any] | None:
    """The resource a task waits for and who holds it ("waiting for resource order:7,
    held by task 123 step 4"), or None."""
    waiter = LeaseWaiter.objects.filter(task_id=task_id).order_by("-since").first()
    if waiter is None:
        return None
    lease = ResourceLease.objects.filter(tenant_id=waiter.tenant_id,
                                         resource=waiter.resource).first()
    held = lease is not None and bool(lease.holder_key)
    return {"resource": waiter.resource, "step_no": waiter.step_no, "since": waiter.since,
            "held_by": ({"task": lease.holder_task_id, "step_no": lease.holder_step_no}
                        if held and lease is not None else None)}
