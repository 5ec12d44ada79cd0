"""Crash recovery, driven by the database (run periodically by every worker
process's sweeper, `runner.sweeper`, one at a time; by Celery beat too where it
runs; by the embedded runner's own timer).

- CREATED tasks are admitted while slots are free;
- RUNNING tasks whose lease expired (their worker died) are re-enqueued, and
  so are RUNNING tasks nobody holds whose next run is due (a lost message, or
  one never sent: an enqueue that failed while the broker was down);
- pending approvals past their SLA expire;
- FAILED tasks whose compensation is due and has not run (its message lost,
  its worker killed) are handed to a worker again (`compensation`);
- tasks waiting for an answer or an approval past their deadline fail
  (`deadline_exceeded`): the deadline holds while nobody runs them. Tasks
  waiting for a reconciliation (the outside world's state is unknown) or for an
  operator (escalated: the operator decides) are left to their person;
- then the hooks other apps registered (`store.hooks.on_sweep`).

What happens to a step left mid-call is decided by the ledger when the task
runs again: same key for tools that honour keys, UNCERTAIN (status query,
then a reconciliation) for plain writes.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from approvals_app.services.decisions import approvals_expire, questions_expire
from foundations.actors import SYSTEM
from foundations.errors import DomainError
from foundations.metrics import count_recoveries

from ..machine import TaskStatus
from ..models import Task
from ..services.admission import admit_created_tasks
from ..services.dispatch import schedule_advance
from ..store.hooks import run_sweep_hooks
from ..store.tasks import task_transition
from .compensation import resweep_compensations

DEADLINE_WAITS = (TaskStatus.WAITING_FOR_INPUT, TaskStatus.WAITING_FOR_APPROVAL)

STALE_UNLEASED_S = 10


@dataclass(frozen=True)
class SweepReport:
    admitted: int
    requeued: int
    approvals_expired: int  # and questions (their counts together)
    deadlines_failed: int = 0
    compensations_resent: int = 0


def recovery_sweep(*, batch: int = 500) -> SweepReport:
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
    requeued = 0
    for task_id in orphans:
        if not schedule_advance(task_id):
            break  # the broker is down: the next sweep tries again
        requeued += 1
    count_recoveries(requeued)
    expired = approvals_expire() + questions_expire()
    compensations = resweep_compensations()
    failed = fail_waiting_past_deadline(batch=batch)
    run_sweep_hooks()  # other apps' periodic work (notify_app: SLA warnings, stuck deliveries)
    return SweepReport(admitted=len(admitted), requeued=requeued, approvals_expired=expired,
                       deadlines_failed=failed, compensations_resent=compensations)


def fail_waiting_past_deadline(*, batch: int = 500) -> int:
    """Fail tasks waiting for an answer or an approval whose deadline passed."""
    now = timezone.now()
    due = list(
        Task.objects.filter(status__in=DEADLINE_WAITS, deadline_at__lt=now)
        .order_by("id").values_list("id", "version", "status")[:batch]
    )
    failed = 0
    for task_id, version, status in due:
        try:
            with transaction.atomic():
                task_transition(
                    task_id=task_id, event="deadline_exceeded", actor=SYSTEM,
                    expected_version=version,
                    payload={"reason": "deadline", "while": status},
                    fields={"failure_reason": "deadline",
                            "failure_detail": {"detail": {"while": status}, "version": version,
                                               "at": now.isoformat()}},
                )
        except DomainError:
            continue  # somebody acted on it meanwhile; the next sweep looks again
        failed += 1
    return failed
