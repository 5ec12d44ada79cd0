"""Crash recovery, driven by the database (run periodically by Celery beat, or by
the embedded runner's own timer).

- CREATED tasks are admitted while slots are free;
- RUNNING tasks whose lease expired (their worker died) are re-enqueued, and
  so are RUNNING tasks nobody holds whose next run is due (a lost message);
- pending approvals past their SLA expire.

What happens to a step left mid-call is decided by the ledger when the task
runs again: same key for tools that honour keys, UNCERTAIN (status query,
then a reconciliation) for plain writes.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.db.models import Q
from django.utils import timezone

from ..machine import TaskStatus
from ..models import Task
from ..services.admission import admit_created_tasks
from ..services.dispatch import schedule_advance

STALE_UNLEASED_S = 10


@dataclass(frozen=True)
class SweepReport:
    admitted: int
    requeued: int
    approvals_expired: int


def recovery_sweep(*, batch: int = 500) -> SweepReport:
    from approvals_app.services.decisions import approvals_expire

    admitted = admit_created_tasks()
    now = timezone.now()
    stale = now - timedelta(seconds=STALE_UNLEASED_S)
    orphans = list(
        Task.objects.filter(status=TaskStatus.RUNNING)
        .filter(
            Q(lease_expires_at__lt=now)
            | Q(lease_owner="", next_run_at__lt=now - timedelta(seconds=2))
            | Q(lease_owner="", next_run_at__isnull=True, updated_at__lt=stale)
        )
        .order_by("id")
        .values_list("id", flat=True)[:batch]
    )
    for task_id in orphans:
        schedule_advance(task_id)
    return SweepReport(admitted=len(admitted), requeued=len(orphans), approvals_expired=approvals_expire())
