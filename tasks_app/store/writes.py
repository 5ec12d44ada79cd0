"""A commit described once (`Commit`), and the two ways it is written.

A `Commit` says what one transaction does to a task known at a version: the
task's guarded UPDATE (its version and status must still be the ones read; a
transition also moves the status through the state machine and bumps the
version), a new step and/or the move of an existing one (`steps`' guard), the
ledger row claimed for a new step's key or the record of a claimed call
(`tools_app.executor.ledger.record_while`), the event, and, for a transition,
its effects (`effects`: the ending fields, closing open work, admission and
compensation after commit), and the spend of the model call it records
(`bill`: `spend`). Either all of it is written, or nothing (the version moved
on: `write` returns None).

`write` runs it as one PostgreSQL statement of data-modifying CTEs, each part
hanging off the version-checked UPDATE (`statement`: built per shape, once,
with table and column names from `_meta`), or with the ORM in one transaction
(SQLite, and `task_transition`, whose fields may be expressions and whose
events run hooks). The same rows either way; the event is published after
commit either way.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone
from django_fsm import can_proceed

from config.errors import conflict
from tools_app.executor.ledger import record_while, recordable
from tools_app.models import ToolExecution

from ..actors import Actor
from ..keys import idempotency_key, idempotency_key_around
from ..models import Event, Step, Task
from .effects import (
    after_transition,
    close_open_work,
    closing_params,
    ending_fields,
    ends,
)
from .events import announce_written, event_append
from .spend import Bill, bill_rollup, rollup_params
from .sql import one_statement, run_one
from .statement import db_value, insertable, statement_of
from .steps import BORN_AS, sources_of, step_guard


@dataclass(frozen=True)
class TaskAt:
    """The task as the writer read it: the commit holds only if it is still so."""

    id: int
    tenant_id: int
    trace_id: str
    version: int
    status: str


@dataclass(frozen=True)
class NewStep:
    fields: dict[str, Any]  # its columns but `task`; with `keyed`, but its key
    keyed: tuple[str, dict[str, Any]] | None = None  # (tool, args): key made from its new id


@dataclass(frozen=True)
class StepMove:
    step_id: int
    source: str  # its status as the writer read it
    fields: dict[str, Any]  # "status" included


@dataclass(frozen=True)
class LedgerRecord:
    key: str
    owner: str
    fields: dict[str, Any]  # `ledger.recorded_fields`


@dataclass(frozen=True)
class Commit:
    task: TaskAt
    event: str  # the event's type; with `transition`, the state machine's event
    actor: Actor
    payload: dict[str, Any]  # a transition's also gets "from" and "to"
    transition: bool = False
    set: dict[str, Any] = field(default_factory=dict)  # task columns := value
    add: dict[str, int] = field(default_factory=dict)  # task columns += n
    new_step: NewStep | None = None
    move: StepMove | None = None
    claim: dict[str, Any] | None = None  # the new step's ledger row, but its key and step
    record: LedgerRecord | None = None
    payload_key: bool = False  # the event's payload also carries the new step's key
    bill: Bill | None = None  # the spend of the model call the commit records (`spend`)


@dataclass(frozen=True)
class Committed:
    version: int
    event_id: int
    target: str  # the task's status now
    step: Step | None  # the new step as written
    recorded: bool  # the ledger record was written (the claim held)


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


def write(c: Commit, *, statement: bool | None = None, savepoint: bool = True) -> Committed | None:
    """Write `c` (None: the task moved on, nothing written). `statement`: one
    SQL statement (default: on PostgreSQL); `savepoint`: inside a caller's
    transaction, a failing statement does not poison it."""
    now = timezone.now()
    target = c.task.status
    payload = c.payload
    set_ = {**c.set, "updated_at": now}
    if c.transition:
        target = fire_guard(c.task.status, c.event, version=c.task.version)
        payload = {"from": c.task.status, "to": target, **payload}
        set_.update(ending_fields(target, now))
    if c.move is not None:
        step_guard(c.move.source, c.move.fields["status"], step_id=c.move.step_id)
    if c.new_step is not None and c.new_step.fields["status"] not in BORN_AS:
        step_guard("(new)", c.new_step.fields["status"])
    if c.bill is not None:
        c = replace(c, add={**c.add, **c.bill.task})
    use_sql = _one_statement() if statement is None else statement
    run = _with_sql if use_sql else _with_orm
    done = run(c, target=target, set_=set_, payload=payload, now=now, savepoint=savepoint)
    if done is not None and c.transition:
        after_transition(c.task.id, c.task.status, target)
    return done


def _one_statement() -> bool:
    return one_statement()


# --- with the ORM ---------------------------------------------------------------------


def _with_orm(c: Commit, *, target: str, set_: dict[str, Any], payload: dict[str, Any],
              now: datetime, savepoint: bool) -> Committed | None:
    t = c.task
    version = t.version + 1 if c.transition else t.version
    fields = {**set_, **{col: F(col) + n for col, n in c.add.items() if n}}
    if c.transition:
        fields.update(status=target, version=version)
    # The task's UPDATE comes first: refused, it wrote nothing, and nothing else is written.
    with transaction.atomic(savepoint=False):
        if Task.objects.filter(pk=t.id, version=t.version, status=t.status).update(
                **fields) != 1:
            return None
        step = None
        if c.new_step is not None:
            step = Step(task_id=t.id, **c.new_step.fields)
            step.save(force_insert=True)
            if c.new_step.keyed is not None:
                tool, args = c.new_step.keyed
                step.idempotency_key = idempotency_key(task_id=t.id, step_id=step.pk, tool=tool,
                                                       args=args)
                Step.objects.filter(pk=step.pk).update(idempotency_key=step.idempotency_key)
        if c.move is not None:
            Step.objects.filter(pk=c.move.step_id,
                                status__in=sources_of(c.move.fields["status"])).update(
                **c.move.fields)
        if c.claim is not None and step is not None:
            ToolExecution.objects.create(idempotency_key=step.idempotency_key, step_id=step.pk,
                                         **c.claim)
        recorded = c.record is not None and bool(
            recordable(c.record.key, c.record.owner).update(**c.record.fields))
        if c.payload_key and step is not None:
            payload = {**payload, "idempotency_key": step.idempotency_key}
        event = event_append(task_id=t.id, tenant_id=t.tenant_id, trace_id=t.trace_id,
                             task_version=version, type=c.event, actor=c.actor, payload=payload)
        if c.transition and ends(target):
            close_open_work(t.id, event=c.event, payload=c.payload)
        if c.bill is not None:
            bill_rollup(c.bill)
    return Committed(version=version, event_id=event.pk, target=target, step=step,
                     recorded=recorded)


# --- in one statement (PostgreSQL) ----------------------------------------------------


def _with_sql(c: Commit, *, target: str, set_: dict[str, Any], payload: dict[str, Any],
              now: datetime, savepoint: bool) -> Committed | None:
    t = c.task
    ending = c.transition and ends(target)
    new, move, record = c.new_step, c.move, c.record
    shape = (c.transition, ending, tuple(set_), tuple(c.add),
             None if new is None else (tuple(new.fields), new.keyed is not None),
             None if move is None else tuple(move.fields),
             None if c.claim is None else tuple(c.claim),
             None if record is None else tuple(record.fields), c.payload_key,
             c.bill is not None)
    params: dict[str, Any] = {
        "task_id": t.id, "tenant_id": t.tenant_id, "trace_id": t.trace_id, "version": t.version,
        "from": t.status, "to": target, "now": now, "event_type": c.event,
        "payload": db_value(Event, "payload", payload), "actor": c.actor.name,
        "actor_role": c.actor.role,
        **{f"t_{k}": db_value(Task, k, v) for k, v in set_.items()},
        **{f"a_{k}": v for k, v in c.add.items()},
    }
    if new is not None:
        params.update({f"s_{k}": db_value(Step, k, v) for k, v in _step_row(new, now).items()})
        if new.keyed is not None:
            tool, args = new.keyed
            params["key_head"], params["key_tail"] = idempotency_key_around(
                task_id=t.id, tool=tool, args=args)
    if move is not None:
        params.update({f"m_{k}": db_value(Step, k, v) for k, v in move.fields.items()},
                      step_id=move.step_id, step_from=list(sources_of(move.fields["status"])))
    if c.claim is not None:
        params.update({f"c_{k}": db_value(ToolExecution, k, v) for k, v in c.claim.items()})
    if c.bill is not None:
        params.update(rollup_params(c.bill))
    if record is not None:
        equal, differ = record_while(record.key, record.owner)
        params.update({f"r_{k}": db_value(ToolExecution, k, v) for k, v in record.fields.items()})
        params.update({f"r_eq_{k}": v for k, v in equal.items()})
        params.update({f"r_ne_{k}": v for k, v in differ.items()})
    sql, fixed = statement_of(shape)
    if ending:
        params.update(fixed, **closing_params(task_id=t.id, event=c.event, payload=c.payload,
                                              now=now))
    row = run_one(sql, params, savepoint=savepoint)
    if row is None:
        return None
    version, event_id, step_id, key, recorded = row
    step = None
    if new is not None:
        step = Step(pk=step_id, task_id=t.id, **{**new.fields, "idempotency_key": key})
        if c.payload_key:
            payload = {**payload, "idempotency_key": key}
    announce_written(event_id=event_id, task_id=t.id, tenant_id=t.tenant_id,
                     trace_id=t.trace_id, task_version=version, type=c.event, payload=payload,
                     actor=c.actor, at=now)
    return Committed(version=int(version), event_id=int(event_id), target=target, step=step,
                     recorded=recorded == 1)


def _step_row(new: NewStep, now: datetime) -> dict[str, Any]:
    """Every column of the new step, as the ORM would fill it (SQL sets no defaults)."""
    return {**_step_defaults(now), **new.fields}


def _step_defaults(now: datetime) -> dict[str, Any]:
    return {f.name: (now if getattr(f, "auto_now_add", False) else f.get_default())
            for f in insertable(Step) if f.name != "task"}


