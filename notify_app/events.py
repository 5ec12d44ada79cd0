"""Which task events become which notifications, and the hook that writes them.

`on_task_event` is registered with `tasks_app.store.hooks` for the task events
below: it runs inside the transaction that appends the event, so the outbox row
commits with the transition, or not at all. The SLA warning has no task event;
the sweep (`services.sweep`) emits it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .models import EventType
from .services.outbox import notification_emit

if TYPE_CHECKING:
    from tasks_app.models import Event

# task event -> notification type
NOTIFIED_TASK_EVENTS: dict[str, str] = {
    "need_approval": EventType.APPROVAL_REQUESTED,
    "need_input": EventType.QUESTION_ASKED,
    "result_uncertain": EventType.RECONCILIATION_OPENED,
    "escalated": EventType.TASK_ESCALATED,
    "fatal_error": EventType.TASK_FAILED,
    "budget_exhausted": EventType.TASK_FAILED,
    "deadline_exceeded": EventType.TASK_FAILED,
}

TITLES: dict[str, str] = {
    EventType.APPROVAL_REQUESTED: "Approval requested",
    EventType.QUESTION_ASKED: "Question asked",
    EventType.RECONCILIATION_OPENED: "Reconciliation needed",
    EventType.TASK_ESCALATED: "Task escalated to an operator",
    EventType.TASK_FAILED: "Task failed",
    EventType.APPROVAL_SLA_WARNING: "Approval about to expire",
}


def on_task_event(event: Event) -> None:
    notification_emit(
        tenant_id=event.tenant_id, task_id=event.task_id, type=NOTIFIED_TASK_EVENTS[event.type],
        event_id=event.pk, context={"event": event.type, **(event.payload or {})})
