"""Which task events become which notifications, and their titles.

The hook that writes them (`services.outbox.on_task_event`) is registered with
`tasks_app.store.hooks` for the task events below. The SLA warning has no
task event, nor has the spend warning; the sweep (`services.sweep`) emits them.
"""
from __future__ import annotations

from .models import EventType

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

# the task events that close an approval (decided, or expired): its Slack message follows
DECISION_EVENTS = ("approval_granted", "approval_rejected")

TITLES: dict[str, str] = {
    EventType.APPROVAL_REQUESTED: "Approval requested",
    EventType.QUESTION_ASKED: "Question asked",
    EventType.RECONCILIATION_OPENED: "Reconciliation needed",
    EventType.TASK_ESCALATED: "Task escalated to an operator",
    EventType.TASK_FAILED: "Task failed",
    EventType.APPROVAL_SLA_WARNING: "Approval about to expire",
    EventType.SPEND_WARNING: "Model spend at 80 % of the tenant's limit",
}

