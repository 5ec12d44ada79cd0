"""What a task's transition brings with it, written once for every path that
moves a task (`tasks.task_transition` with the ORM, `commits` in one
statement):

- `ending_fields`: a task that ends has its `finished_at`, and no lease and
  no `next_run_at` any more;
- closing its open work: open steps end (`steps.open_steps_end_as`) and open
  human requests (registered from above, `hooks.on_task_end_close`) are
  canceled, in the same transaction: `close_open_work` (ORM, or one statement
  on PostgreSQL) or `closing_ctes` inside a commit's statement;
- `after_transition`: a RUNNING slot freed schedules admission after commit,
  and a FAILED task schedules its compensation after commit (and is marked
  `compensation_due_at` by `ending_fields`, for the sweep should that be lost);
  any task that ends runs the `on_task_ended` hooks after commit.
"""
from __future__ import annotations

from datetime import datetime, timedelta
from functools import cache
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from ..machine import TERMINAL, TaskStatus
from ..models import Step
from ..models.tasks import OPEN_STEP_STATUSES
from .hooks import OPEN_REQUESTS, run_slot_freed, run_task_ended, run_task_failed
from .sql import json_param, table
from .steps import close_open_steps, open_steps_end_as


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


def after_transition(task_id: int, source: str, target: str) -> None:
    """Schedule, for after the transaction commits, what the transition triggers above the store."""
    if source == TaskStatus.RUNNING and target != TaskStatus.RUNNING:
        run_slot_freed()  # a CREATED task may start
    if target == TaskStatus.FAILED:
        # Irreversible failure: undo what the task's writes did.
        transaction.on_commit(lambda: run_task_failed(task_id))
    if ends(target):
        transaction.on_commit(lambda: run_task_ended(task_id))


def close_open_work(task_id: int, *, event: str, payload: dict[str, Any]) -> None:
    """A task that ended leaves nothing open. Same transaction as the terminal
    transition; on PostgreSQL one statement (every task that ends pays for it,
    and there is usually nothing open)."""
    if connection.vendor != "postgresql":
        close_open_steps(task_id, event=event, payload=payload)
        for model, open_status, canceled_status in OPEN_REQUESTS:
            model.objects.filter(task_id=task_id, status=open_status).update(  # type: ignore[attr-defined]
                status=canceled_status)
        return
    parts, fixed = closing_ctes()
    with connection.cursor() as cur:
        cur.execute(f"WITH {', '.join(parts)} SELECT 1",
                    {**fixed, **closing_params(task_id=task_id, event=event, payload=payload,
                                               now=timezone.now())})


def closing_params(*, task_id: int, event: str, payload: dict[str, Any],
                   now: datetime) -> dict[str, Any]:
    """The varying parameters of `closing_ctes`."""
    status, error = open_steps_end_as(event, payload)
    return {"task_id": task_id, "close_status": str(status), "close_at": now,
            "close_error": json_param(Step, "error", error)}


@cache
def closing_ctes(guard: str = "") -> tuple[tuple[str, ...], dict[str, Any]]:
    """The CTEs that close a task's open steps and requests (PostgreSQL), and
    their fixed parameters. `guard`, a condition every part also needs (that
    the version-checked UPDATE of the same statement matched), lets a
    statement that ends a task embed them."""
    also = f" AND {guard}" if guard else ""
    fixed: dict[str, Any] = {"open_steps": [s.value for s in OPEN_STEP_STATUSES]}
    parts = [f"closed_steps AS (UPDATE {table(Step)} SET status = %(close_status)s, "
             "error = %(close_error)s, finished_at = %(close_at)s "
             f"WHERE task_id = %(task_id)s AND status = ANY(%(open_steps)s){also})"]
    for n, (model, open_status, canceled_status) in enumerate(OPEN_REQUESTS):
        fixed[f"open_{n}"], fixed[f"canceled_{n}"] = str(open_status), str(canceled_status)
        parts.append(f"closed_{n} AS (UPDATE {table(model)} SET status = %(canceled_{n})s "
                     f"WHERE task_id = %(task_id)s AND status = %(open_{n})s{also})")
    return tuple(parts), fixed
