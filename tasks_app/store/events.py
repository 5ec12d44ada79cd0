"""Writing events: the one place an event row is made.

`event_append` writes one with the ORM, runs the event hooks other apps
registered (`store.hooks`, same transaction) and schedules its publication;
`event_now` is the one way to append an informational event at the task's
current version (its one locking rule);
PostgreSQL's one-statement commits (`backends.postgres`) insert theirs with
`EVENT_INSERT` and publish it with `written_event`, from the row as written
(their backend runs the hooks, in the same transaction).

Publication happens in `transaction.on_commit`, so a rolled-back event is
never shown to anybody, and a subscriber never sees an event the database
does not have. What publishing does (metrics, the task's trace, the live
feed) is registered from above (`hooks.on_event_committed`).
"""
from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction

from ..actors import Actor
from ..models import Event, Task
from .hooks import run_event_hooks, run_publishers
from .sql import table

# The columns of an event, in the order `EVENT_INSERT`'s SELECT lists them.
EVENT_COLUMNS = ("task_id", "tenant_id", "task_version", "type", "payload", "actor",
                 "actor_role", "trace_id", "created_at")
EVENT_INSERT = f"INSERT INTO {table(Event)} ({', '.join(EVENT_COLUMNS)})"


def event_append(
    *,
    task_id: int,
    tenant_id: int,
    trace_id: str,
    task_version: int,
    type: str,
    actor: Actor,
    payload: dict[str, Any] | None = None,
) -> Event:
    event = Event.objects.create(
        task_id=task_id,
        tenant_id=tenant_id,
        trace_id=trace_id,
        task_version=task_version,
        type=type,
        payload=payload or {},
        actor=actor.name,
        actor_role=actor.role,
    )
    run_event_hooks(event)  # same transaction: what a hook writes commits with the event
    event_announce(event)
    return event


def event_now(task_id: int, type: str, actor: Actor, payload: dict[str, Any], *,
              while_status: str | None = None) -> bool:
    """An informational event on the task at its current version (no
    transition): a wait, a lease, a compensation's step. False, writing
    nothing, when the task is gone or, with `while_status`, no longer in it.

    The task's row is locked for the instant of the insert (FOR UPDATE; on
    SQLite the transaction's write lock): a transition committing meanwhile is
    waited for and its version read, so an event is never written at a
    version older than a transition committed before it (the timeline is read
    in id order, and replay by version). Unlocked, a read of the version and
    then the insert let a transition slip in between."""
    with transaction.atomic():
        row = (Task.objects.select_for_update().filter(pk=task_id)
               .values_list("status", "version", "tenant_id", "trace_id").first())
        if row is None or (while_status is not None and row[0] != while_status):
            return False
        status, version, tenant_id, trace_id = row
        event_append(task_id=task_id, tenant_id=tenant_id, trace_id=trace_id,
                     task_version=version, type=type, actor=actor, payload=payload)
    return True


def event_announce(event: Event) -> None:
    """Publish `event` once its transaction commits (at once outside a transaction)."""
    transaction.on_commit(lambda: run_publishers(event))


def written_event(*, event_id: int, task_id: int, tenant_id: int, trace_id: str,
                  task_version: int, type: str, payload: dict[str, Any], actor: Actor,
                  at: datetime) -> Event:
    """An event a backend wrote in SQL, as written (without reading it back),
    published once committed."""
    event = Event(id=event_id, task_id=task_id, tenant_id=tenant_id, trace_id=trace_id,
                  task_version=task_version, type=type, payload=payload, actor=actor.name,
                  actor_role=actor.role, created_at=at)
    event_announce(event)
    return event
