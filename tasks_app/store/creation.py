"""Creating a task: its row, the steps a retry inherits, and its first event.

A task is born CREATED at version 0, with a `task_created` event in the same
transaction (the caller's: a submission's idempotency race, a retry's
`retried` event on the original, are the caller's to decide). A retry's task
starts with copies of the steps before the one it retries from, each pointing
at the step it copies (`inherited_from`), so its history reads as one.
"""
from __future__ import annotations

from typing import Any

from foundations.actors import Actor

from ..machine import TaskStatus
from ..models import Event, Step, Task
from ..payloads import TASK_FIELDS, Blob
from .blobs import copy_uses, swapped, write_blobs
from .events import event_announce, event_append
from .hooks import run_event_hooks

# Step fields a retry copies as they are.
COPIED = ("step_no", "kind", "status", "decision", "model_log", "tool", "args", "idempotency_key",
          "attempt", "output", "output_hash", "error", "finished_at", "latency_ms")


def tasks_create_many(*, actor: Actor, rows: list[tuple[str, dict[str, Any]]]) -> list[Task]:
    """Create many tasks at once (a batch submission), each given as (its agent's
    name, its fields): the rows and their `task_created` events in two bulk
    inserts, the same rows and events `task_create` writes one at a time; call
    inside a transaction."""
    blobs: list[list[Blob]] = [[] for _ in rows]
    tasks = Task.objects.bulk_create([Task(**swapped(fields, TASK_FIELDS, out))
                                      for (_, fields), out in zip(rows, blobs, strict=True)])
    for task, (_, fields), out in zip(tasks, rows, blobs, strict=True):
        _stored_out_of_row(task, fields, out)
    events = Event.objects.bulk_create([
        Event(task_id=task.pk, tenant_id=task.tenant_id, trace_id=task.trace_id, task_version=0,
              type=CREATED_EVENT, actor=actor.name, actor_role=actor.role,
              payload=_created_payload(agent_name, task))
        for (agent_name, _), task in zip(rows, tasks, strict=True)])
    for event in events:
        run_event_hooks(event)  # what `event_append` does for each event it writes
        event_announce(event)
    return tasks


CREATED_EVENT = "task_created"


def _stored_out_of_row(task: Task, fields: dict[str, Any], blobs: list[Blob]) -> None:
    """The blobs of the task's large input, in the creation's transaction; the
    instance keeps the caller's values."""
    if blobs:
        write_blobs(tenant_id=task.tenant_id, task_id=task.pk, blobs=blobs)
        for name in TASK_FIELDS:
            if name in fields:
                setattr(task, name, fields[name])


def _created_payload(agent_name: str, task: Task) -> dict[str, Any]:
    return {"agent": agent_name, "agent_version": task.agent_version,
            "goal": task.goal[:500], "to": TaskStatus.CREATED}


def task_create(*, actor: Actor, agent_name: str, inherited: list[Step] | None = None,
                **fields: Any) -> Task:
    """Create the task with `fields`, copy the `inherited` steps onto it, and
    append its `task_created` event; call inside a transaction."""
    blobs: list[Blob] = []
    task = Task.objects.create(**swapped(fields, TASK_FIELDS, blobs))
    _stored_out_of_row(task, fields, blobs)
    if inherited:
        copy_uses(task_id=task.pk, rows=inherited)
        Step.objects.bulk_create([
            Step(task=task, inherited_from=s, started_at=s.started_at,
                 **{name: getattr(s, name) for name in COPIED})
            for s in inherited])
    event_append(task_id=task.pk, tenant_id=task.tenant_id, trace_id=task.trace_id,
                 task_version=0, type=CREATED_EVENT, actor=actor,
                 payload=_created_payload(agent_name, task))
    return task
