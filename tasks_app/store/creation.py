"""Creating a task: its row, the steps a retry inherits, and its first event.

A task is born CREATED at version 0, with a `task_created` event in the same
transaction (the caller's: a submission's idempotency race, a retry's
`retried` event on the original, are the caller's to decide). A retry's task
starts with copies of the steps before the one it retries from, each pointing
at the step it copies (`inherited_from`), so its history reads as one.
"""
from __future__ import annotations

from typing import Any

from ..actors import Actor
from ..machine import TaskStatus
from ..models import Step, Task
from .events import event_append

# Step fields a retry copies as they are.
COPIED = ("step_no", "kind", "status", "decision", "model_log", "tool", "args", "idempotency_key",
          "attempt", "output", "output_hash", "error", "finished_at", "latency_ms")


def task_create(*, actor: Actor, agent_name: str, inherited: list[Step] | None = None,
                **fields: Any) -> Task:
    """Create the task with `fields`, copy the `inherited` steps onto it, and
    append its `task_created` event; call inside a transaction."""
    task = Task.objects.create(**fields)
    if inherited:
        Step.objects.bulk_create([
            Step(task=task, inherited_from=s, started_at=s.started_at,
                 **{name: getattr(s, name) for name in COPIED})
            for s in inherited])
    event_append(task_id=task.pk, tenant_id=task.tenant_id, trace_id=task.trace_id,
                 task_version=0, type="task_created", actor=actor,
                 payload={"agent": agent_name, "agent_version": task.agent_version,
                          "goal": task.goal[:500], "to": TaskStatus.CREATED})
    return task
