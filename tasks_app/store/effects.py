"""What a task's transition brings with it, written once for every path that
moves a task (every `writes.Commit` with `transition`, whichever backend
writes it):

- `ending_fields`: a task that ends has its `finished_at`, and no lease and
  no `next_run_at` any more;
- closing its open work: open steps end (`steps.open_steps_end_as`) and open
  human requests (registered from above, `hooks.on_task_end_close`) are
  canceled, in the same transaction, by the backend that writes the commit
  (`backends`: the ORM's statements, or CTEs of PostgreSQL's one statement);
- `after_transition`: a RUNNING slot freed schedules admission after commit,
  and a FAILED task schedules its compensation after commit (and is marked
  `compensation_due_at` by `ending_fields`, for the sweep should that be lost);
  any task that ends runs the `on_task_ended` hooks after commit;
- the compensation marks: `ending_fields` marks a FAILED task due,
  `compensation_settled` clears the mark when a run ends, `compensations_due`
  hands the due ones out again (the recovery sweep).
"""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from ..machine import TERMINAL, TaskStatus
from ..models import Task
from .hooks import run_slot_freed, run_task_ended, run_task_failed


def ends(target: str) -> bool:
    return target in TERMINAL


def ending_fields(target: str, now: datetime) -> dict[str, Any]:
    """The task's columns a transition to `target` sets besides its status. A
    FAILED task's compensation is due: the FAILED commit also schedules it, and
    should that message be lost, the recovery sweep hands it out again."""
    if not ends(target):
        return {}
    fields: dict[str, Any] = {"finished_at": now, "lease_owner": "", "lease_expires_at": None,
                              "next_run_at": None}
    if target == TaskStatus.FAILED:
        fields["compensation_due_at"] = now + compensation_resweep()
    return fields


def compensation_resweep() -> timedelta:
    """How long a compensation may take before the sweep hands it out again."""
    return timedelta(seconds=float(settings.TETHER["COMPENSATION_RESWEEP_S"]))


def compensation_settled(task_id: int) -> None:
    """The task's compensation run ended (or there is nothing to undo): no longer due."""
    Task.objects.filter(pk=task_id).update(compensation_due_at=None)


def compensations_due(*, batch: int) -> list[int]:
    """The FAILED tasks whose compensation is due (its message lost, its worker
    killed), at most `batch`, each due again one `compensation_resweep` later
    unless a run settles it first. In the caller's transaction: the rows are
    locked (others' skipped) until it commits."""
    now = timezone.now()
    due = list(Task.objects.select_for_update(skip_locked=True)
               .filter(compensation_due_at__lte=now).order_by("compensation_due_at")
               .values_list("id", flat=True)[:batch])
    if due:
        Task.objects.filter(pk__in=due).update(compensation_due_at=now + compensation_resweep())
    return due


def after_transition(task_id: int, source: str, target: str) -> None:
    """Schedule, for after the transaction commits, what the transition triggers above the store."""
    if source == TaskStatus.RUNNING and target != TaskStatus.RUNNING:
        run_slot_freed()  # a CREATED task may start
    if target == TaskStatus.FAILED:
        # Irreversible failure: undo what the task's writes did.
        transaction.on_commit(lambda: run_task_failed(task_id))
    if ends(target):
        transaction.on_commit(lambda: run_task_ended(task_id))
