"""The one service that changes a task's status.

`task_transition` fires a django-fsm transition (a pure guard), bumps
`version` with an optimistic ``UPDATE ... WHERE id = ? AND version = ?`` and
appends the transition's event, all in one transaction. Unknown events and
events not allowed from the current state are refused (409) and change
nothing; so is a stale `expected_version`. No row lock is taken: the version
check is the fence.

A caller that already holds the task's row as of `expected_version` (the
runner, within its lease) passes it as `known`: the transition then sends no
``SELECT``, its ``UPDATE`` is also conditioned on that status, and the row is
read only to explain a refusal.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from django.db import connection, transaction
from django.db.models import Expression
from django.utils import timezone
from django_fsm import can_proceed

from approvals_app.services.closing import OPEN_REQUESTS, close_open_requests
from config.errors import DomainError, ErrorKind, conflict

from ..machine import TERMINAL, TRANSITIONS, TaskStatus
from ..models import Step, StepStatus, Task
from ..models.tasks import OPEN_STEP_STATUSES
from .actors import Actor
from .dispatch import schedule_compensation
from .events import event_append
from .hooks import run_slot_freed_hooks


@dataclass(frozen=True)
class KnownTask:
    """What the caller read of the task at `expected_version`."""

    status: str
    tenant_id: int
    trace_id: str


@dataclass(frozen=True)
class Transitioned:
    task_id: int
    version: int
    status: str
    event_id: int


def task_transition(
    *,
    task_id: int,
    event: str,
    actor: Actor,
    expected_version: int | None = None,
    payload: dict[str, Any] | None = None,
    fields: dict[str, Any] | None = None,
    known: KnownTask | None = None,
) -> Transitioned:
    """Fire `event`; `fields` are written in the same guarded UPDATE (F() allowed)."""
    if event not in TRANSITIONS:
        # DESIGN.md: an unknown event is refused like a disallowed one (409), changing nothing.
        raise DomainError("unknown_event", f"unknown event {event!r}", kind=ErrorKind.CONFLICT,
                          details={"event": event})
    # The runner calls with `known` inside its own transaction and handles a
    # refusal outside it: no savepoint (two round trips) is needed then.
    with transaction.atomic(savepoint=known is None):
        if known is not None and expected_version is not None:
            task = Task(pk=task_id, tenant_id=known.tenant_id, trace_id=known.trace_id,
                        status=known.status, version=expected_version)
        else:
            task = Task.objects.only("id", "tenant_id", "trace_id", "status",
                                     "version").get(pk=task_id)
        if expected_version is not None and task.version != expected_version:
            raise conflict("stale_version", "the task has moved on since this view was taken",
                           expected_version=expected_version, current_version=task.version,
                           status=task.status)
        source, _ = fire_guard(task, event)
        now = timezone.now()
        updates: dict[str, Any] = {"status": task.status, "version": task.version + 1,
                                   "updated_at": now}
        if task.status in TERMINAL:
            updates.update(finished_at=now, lease_owner="", lease_expires_at=None, next_run_at=None)
        updates.update(fields or {})
        changed = Task.objects.filter(pk=task_id, version=task.version, status=source).update(
            **updates)
        if changed != 1:
            if known is not None:
                # Read the row only now, to say why (nothing was written).
                return task_transition(task_id=task_id, event=event, actor=actor,
                                       expected_version=expected_version, payload=payload,
                                       fields=fields)
            raise conflict("stale_version", "another writer committed first", current_version=None)
        new_version = task.version + 1
        ev = event_append(
            task_id=task_id,
            tenant_id=task.tenant_id,
            trace_id=task.trace_id,
            task_version=new_version,
            type=event,
            actor=actor,
            payload={"from": source, "to": task.status,
                     **{k: v for k, v in (payload or {}).items() if not isinstance(v, Expression)}},
        )
        if task.status in TERMINAL:
            _close_open_work(task_id, event=event, payload=payload or {})
        if task.status == TaskStatus.FAILED:
            # Irreversible failure: undo what the task's writes did, after commit.
            transaction.on_commit(lambda: schedule_compensation(task_id))
        if source == TaskStatus.RUNNING and task.status != TaskStatus.RUNNING:
            # A RUNNING slot was freed: a CREATED task may start (after this commits).
            run_slot_freed_hooks()
    return Transitioned(task_id=task_id, version=new_version, status=task.status, event_id=ev.pk)


def fire_guard(task: Task, event: str) -> tuple[str, str]:
    """Fire `event` on the in-memory `task` (django-fsm: a pure guard that sets
    its status, nothing else): (source, target). Refused (409) when the state
    machine does not allow it."""
    method = getattr(task, event)
    if not can_proceed(method):
        raise conflict("illegal_transition",
                       f"{event} is not allowed when the task is {task.status}",
                       event=event, status=task.status, version=task.version)
    source = task.status
    method()
    return source, task.status


def _close_open_work(task_id: int, *, event: str, payload: dict[str, Any]) -> None:
    """A task that ended leaves nothing open: its open steps get a typed result
    (a late tool result is then discarded at commit) and its open human
    requests are closed. Same transaction as the terminal transition; on
    PostgreSQL one statement (every task that ends pays for it, and there is
    usually nothing open)."""
    status, error = open_steps_end_as(event, payload)
    now = timezone.now()
    if connection.vendor != "postgresql":
        Step.objects.filter(task_id=task_id, status__in=OPEN_STEP_STATUSES).update(
            status=status, error=error, finished_at=now)
        close_open_requests(task_id=task_id)
        return
    sql, open_statuses = _close_open_work_sql()
    with connection.cursor() as cur:
        cur.execute(sql, {**open_statuses, **close_open_work_params(
            task_id=task_id, status=status, error=error, now=now)})


def open_steps_end_as(event: str, payload: dict[str, Any]) -> tuple[StepStatus, dict[str, Any]]:
    """The status and error an open step is left with when `event` ends its task."""
    if event == "task_canceled":
        return StepStatus.DISCARDED, {
            "type": "canceled", "message": str(payload.get("reason") or "task canceled")}
    return StepStatus.FAILED, {"type": "task_ended", "message": f"the task ended ({event})"}


def close_open_work_params(*, task_id: int, status: str, error: dict[str, Any],
                           now: Any) -> dict[str, Any]:
    """The varying parameters of `close_open_work_ctes`."""
    return {"task_id": task_id, "close_status": str(status), "close_at": now,
            "close_error": Step._meta.get_field("error").get_db_prep_save(error, connection)}


@cache
def close_open_work_ctes(guard: str = "") -> tuple[tuple[str, ...], dict[str, Any]]:
    """The CTEs that close a task's open steps and requests (PostgreSQL), and
    their fixed parameters. `guard`, a condition every part also needs (say,
    that a version-checked UPDATE in the same statement matched), lets a
    statement that ends a task embed them."""
    also = f" AND {guard}" if guard else ""
    fixed: dict[str, Any] = {"open_steps": [s.value for s in OPEN_STEP_STATUSES]}
    parts = [f"closed_steps AS (UPDATE {Step._meta.db_table} SET status = %(close_status)s, "
             "error = %(close_error)s, finished_at = %(close_at)s "
             f"WHERE task_id = %(task_id)s AND status = ANY(%(open_steps)s){also})"]
    for n, (model, open_status) in enumerate(OPEN_REQUESTS):
        fixed[f"open_{n}"] = open_status
        parts.append(f"closed_{n} AS (UPDATE {model._meta.db_table} SET status = 'canceled' "
                     f"WHERE task_id = %(task_id)s AND status = %(open_{n})s{also})")
    return tuple(parts), fixed


@cache
def _close_open_work_sql() -> tuple[str, dict[str, Any]]:
    """The one statement of `_close_open_work` (built once), and its fixed parameters."""
    parts, fixed = close_open_work_ctes()
    return f"WITH {', '.join(parts)} SELECT 1", fixed


def task_update_guarded(*, task_id: int, version: int, **fields: Any) -> bool:
    """A write that is not a transition (counters, lease): only if the version still holds."""
    return Task.objects.filter(pk=task_id, version=version).update(**fields) == 1
