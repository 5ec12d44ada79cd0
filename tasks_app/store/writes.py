"""A commit described once (`Commit`), and written by the backend.

A `Commit` (`shapes`) says what one transaction does to a task known at a
version: the task's guarded UPDATE (its version and status must still be the
ones read; a transition also moves the status through the state machine and
bumps the version), a new step and/or the move of an existing one (`steps`'
guard), the ledger row claimed for a new step's key or the record of a claimed
call (`tools_app.executor.ledger.record_while`), the event, and, for a
transition, its effects (`effects`: the ending fields, closing open work,
admission and compensation after commit), the spend of the model call it
records (`bill`: `spend`), and what the caller writes with it once the rows
exist (`then`: an approval or a question opened for the new step). Either all
of it is written, or nothing (the version moved on: `write` returns None).

`write` checks the guards and computes what every backend writes alike (the
target status, the ending fields, the event's payload); the backend of the
connection writes it (`backends`: on PostgreSQL one statement of
data-modifying CTEs; with the ORM, one transaction: SQLite, and
`task_transition`, whose fields may be expressions). The same rows either
way; the event's hooks run in the transaction, its publication after commit,
either way.
"""
from __future__ import annotations

import functools
from dataclasses import replace

from django.db import transaction
from django.utils import timezone
from django_fsm import can_proceed

from foundations.errors import conflict

from ..models import Task
from .backends import backend
from .blobs import out_of_row, write_blobs
from .effects import after_transition, ending_fields
from .shapes import Commit, Committed, LedgerRecord, NewStep, StepMove, TaskAt
from .steps import BORN_AS, step_guard

__all__ = ["Commit", "Committed", "LedgerRecord", "NewStep", "StepMove", "TaskAt", "fire_guard",
           "write"]


def fire_guard(source: str, event: str, *, version: int) -> str:
    """The status `event` moves a task in `source` to, as the model's django-fsm
    transition says. Refused (409) when the state machine does not allow it."""
    target = _target_of(source, event)
    if target is None:
        raise conflict("illegal_transition", f"{event} is not allowed when the task is {source}",
                       event=event, status=source, version=version)
    return target


@functools.cache
def _target_of(source: str, event: str) -> str | None:
    """Fire `event` on a task in `source` (a pure guard on the status alone, so
    its answer is remembered: building a model instance for it was a few
    per cent of a worker's CPU); None when refused."""
    task = Task(status=source)
    method = getattr(task, event)
    if not can_proceed(method):
        return None
    method()
    return str(task.status)


def write(c: Commit, *, statement: bool = True, savepoint: bool = True) -> Committed | None:
    """Write `c` (None: the task moved on, nothing written). `statement`: as the
    connection's backend writes it (False: with the ORM, for fields that are
    expressions); `savepoint`: inside a caller's transaction, a failing
    statement does not poison it."""
    now = timezone.now()
    target = c.task.status
    payload = c.payload
    if c.bill is not None:
        c = replace(c, add={**c.add, **c.bill.task})
    stored, blobs = out_of_row(c)  # its large values as references, and their blobs
    set_ = {**stored.set, "updated_at": now}
    if c.transition:
        assert c.event is not None, "a transition is its event"
        target = fire_guard(c.task.status, c.event, version=c.task.version)
        payload = {"from": c.task.status, "to": target, **payload}
        set_.update(ending_fields(target, now))
    if c.move is not None:
        step_guard(c.move.source, c.move.fields["status"], step_id=c.move.step_id)
    if c.new_step is not None and c.new_step.fields["status"] not in BORN_AS:
        step_guard("(new)", c.new_step.fields["status"])
    writer = backend()

    def commit(c: Commit) -> Committed | None:
        return (writer.commit(c, target=target, set_=set_, payload=payload, now=now,
                              savepoint=savepoint) if statement
                else writer.commit_orm(c, target=target, set_=set_, payload=payload, now=now))

    if not blobs:
        done = commit(stored)
    else:  # the blobs and the commit in one transaction: no reference without its blob
        with transaction.atomic():
            write_blobs(tenant_id=c.task.tenant_id, task_id=c.task.id, blobs=blobs)
            done = commit(stored)
            if done is None:
                transaction.set_rollback(True)  # the task moved on: no blob either
        if done is not None and done.step is not None and c.new_step is not None:
            for name, value in c.new_step.fields.items():  # the caller's values, not references
                setattr(done.step, name, value)
    if done is not None and c.transition:
        after_transition(c.task.id, c.task.status, target)
    return done
