"""Writing events: the one place an event row is made.

`event_append` writes one with the ORM, runs the event hooks other apps
registered (`store.hooks`, same transaction) and schedules its publication;
`event_note` is the one way to append an informational event at the task's
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

from collections.abc import Collection
from datetime import datetime
from typing import Any

from django.db import transaction

from foundations.actors import Actor

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


def event_note(*, task_id: int, type: str, actor: Actor, payload: dict[str, Any] | None = None,
               statuses: Collection[str] | None = None) -> Event | None:
    """An informational event (no transition) at the task's current version.
    The task's row is locked for the instant of the insert (in the caller's
    transaction, or in one of its own), so no transition commits between the
    read of the version and the event: an event's version is never behind one
    written before it, even when the writer is a worker whose lease ran out
    (a network cut). None when the task is gone, or not in `statuses`."""
    with transaction.atomic():
        row = (Task.objects.select_for_update().filter(pk=task_id)
               .values_list("status", "version", "tenant_id", "trace_id").first())
        if row is None or (statuses is not None and row[0] not in statuses):
            return None
        return event_append(task_id=task_id, tenant_id=row[2], trace_id=row[3],
                            task_version=row[1], type=type, actor=actor, payload=payload)


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
