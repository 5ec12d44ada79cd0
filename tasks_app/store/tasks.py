"""Moving a task: `task_transition`, the one call that changes a task's status
outside the runner's one-statement commits (which describe theirs the same
way, `store.commits`), and the guarded writes that are not transitions.

`task_transition` fires a django-fsm transition (a pure guard), bumps
`version` with an optimistic ``UPDATE ... WHERE id = ? AND version = ?`` and
appends the transition's event, with the transition's effects (`effects`), all
in one transaction (`writes.write`, with the ORM: its fields may be
expressions, and its events run the hooks other apps registered). Unknown
events and events not allowed from the current state are refused (409) and
change nothing; so is a stale `expected_version`. No row lock is taken: the
version check is the fence.

A caller that already holds the task's row as of `expected_version` (the
runner, within its lease) passes it as `known`: the transition then sends no
``SELECT``, its ``UPDATE`` is also conditioned on that status, and the row is
read only to explain a refusal.
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import Expression

from foundations.actors import Actor
from foundations.errors import DomainError, ErrorKind, conflict

from ..machine import TRANSITIONS
from ..models import Task
from .writes import Commit, TaskAt, write


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
        # An unknown event is refused like a disallowed one (409), changing nothing.
        raise DomainError("unknown_event", f"unknown event {event!r}", kind=ErrorKind.CONFLICT,
                          details={"event": event})
    # The runner calls with `known` inside its own transaction and handles a
    # refusal outside it: no read, no savepoint (two round trips) then.
    with nullcontext() if known is not None else transaction.atomic():
        if known is not None and expected_version is not None:
            task = TaskAt(id=task_id, tenant_id=known.tenant_id, trace_id=known.trace_id,
                          version=expected_version, status=known.status)
        else:
            row = Task.objects.only("id", "tenant_id", "trace_id", "status",
                                    "version").get(pk=task_id)
            if expected_version is not None and row.version != expected_version:
                raise conflict("stale_version", "the task has moved on since this view was taken",
                               expected_version=expected_version, current_version=row.version,
                               status=row.status)
            task = TaskAt(id=task_id, tenant_id=row.tenant_id, trace_id=row.trace_id,
                          version=row.version, status=row.status)
        done = write(Commit(
            task=task, event=event, actor=actor, transition=True, set=fields or {},
            payload={k: v for k, v in (payload or {}).items() if not isinstance(v, Expression)},
        ), statement=False)
        if done is None:
            if known is not None:
                # Read the row only now, to say why (nothing was written).
                return task_transition(task_id=task_id, event=event, actor=actor,
                                       expected_version=expected_version, payload=payload,
                                       fields=fields)
            raise conflict("stale_version", "another writer committed first", current_version=None)
    assert done.event_id is not None  # a transition writes its event
    return Transitioned(task_id=task_id, version=done.version, status=done.target,
                        event_id=done.event_id)


def task_update_guarded(*, task_id: int, version: int, **fields: Any) -> bool:
    """A write that is not a transition (counters, lease): only if the version still holds."""
    return Task.objects.filter(pk=task_id, version=version).update(**fields) == 1
