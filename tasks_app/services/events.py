"""Appending events. `event_append` writes an event row and schedules its
publication; the runner's one-statement commits (`runner.commits`) write
theirs in SQL and schedule it with `event_announce`. Nothing else publishes.
Hooks other apps registered (`services.hooks`) run inside `event_append`.

Publication happens in `transaction.on_commit`, so a rolled-back event is
never shown to anybody, and a subscriber never sees an event the database
does not have. Metrics count it and the task's trace shows it
(`task_traces`) at the same moment.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction

from config.metrics import count_task_event

from ..live.publish import publish_event
from ..machine import FINAL_STATUS_OF
from ..models import Event
from .actors import Actor
from .hooks import run_event_hooks
from .task_traces import trace_event

# In one-statement commits (PostgreSQL): the event of a transition whose
# version-checked `UPDATE` is the CTE named `task`, returning the new version.
# Nothing is inserted when that UPDATE matched no row.
TRANSITION_EVENT_CTE = """event AS (
    INSERT INTO tasks_app_event (task_id, tenant_id, task_version, type, payload, actor,
                                 actor_role, trace_id, created_at)
    SELECT %(task_id)s, %(tenant_id)s, task.version, %(event_type)s, %(payload)s,
           %(actor)s, %(actor_role)s, %(trace_id)s, %(now)s
      FROM task
 RETURNING id
)"""


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


def event_announce(event: Event) -> None:
    """Publish `event` once its transaction commits (at once outside a transaction)."""
    transaction.on_commit(lambda: _publish(event))


def announce_written(*, event_id: int, task_id: int, tenant_id: int, trace_id: str,
                     task_version: int, type: str, payload: dict[str, Any], actor: Actor,
                     at: datetime) -> None:
    """Publish, once committed, an event a one-statement commit wrote in SQL
    (`TRANSITION_EVENT_CTE` and the like): the row as written, without reading it."""
    event_announce(Event(id=event_id, task_id=task_id, tenant_id=tenant_id, trace_id=trace_id,
                         task_version=task_version, type=type, payload=payload,
                         actor=actor.name, actor_role=actor.role, created_at=at))


def _publish(event: Event) -> None:
    count_task_event(event.type, final_status=FINAL_STATUS_OF.get(event.type, ""))
    trace_event(event)
    publish_event(event)
