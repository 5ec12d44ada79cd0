"""The task state machine: states, events and the transition table.

This table is the single source of truth. `Task`'s django-fsm transitions are
declared from it, the store (`store.writes.fire_guard`) is the only code that
fires them, and tests walk every (state, event) pair against it. (Steps have
their own table: `store.steps.STEP_TRANSITIONS`.)
"""
from __future__ import annotations

from django.db import models


class TaskStatus(models.TextChoices):
    CREATED = "CREATED"
    RUNNING = "RUNNING"
    WAITING_FOR_INPUT = "WAITING_FOR_INPUT"
    WAITING_FOR_APPROVAL = "WAITING_FOR_APPROVAL"
    WAITING_FOR_RECONCILIATION = "WAITING_FOR_RECONCILIATION"
    WAITING_FOR_HUMAN = "WAITING_FOR_HUMAN"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELED = "CANCELED"


S = TaskStatus
WAITING = (
    S.WAITING_FOR_INPUT,
    S.WAITING_FOR_APPROVAL,
    S.WAITING_FOR_RECONCILIATION,
    S.WAITING_FOR_HUMAN,
)
TERMINAL = (S.SUCCEEDED, S.FAILED, S.CANCELED)
NON_TERMINAL = (S.CREATED, S.RUNNING, *WAITING)

# event -> (allowed source states, target state)
TRANSITIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "task_started": ((S.CREATED,), S.RUNNING),
    "need_input": ((S.RUNNING,), S.WAITING_FOR_INPUT),
    "input_received": ((S.WAITING_FOR_INPUT,), S.RUNNING),
    "need_approval": ((S.RUNNING,), S.WAITING_FOR_APPROVAL),
    "approval_granted": ((S.WAITING_FOR_APPROVAL,), S.RUNNING),
    "approval_rejected": ((S.WAITING_FOR_APPROVAL,), S.RUNNING),
    "step_succeeded": ((S.RUNNING,), S.RUNNING),
    "retryable_error": ((S.RUNNING,), S.RUNNING),
    "result_uncertain": ((S.RUNNING,), S.WAITING_FOR_RECONCILIATION),
    "reconciled": ((S.WAITING_FOR_RECONCILIATION,), S.RUNNING),
    "escalated": ((S.RUNNING,), S.WAITING_FOR_HUMAN),
    "resumed": ((S.WAITING_FOR_HUMAN,), S.RUNNING),
    "final_accepted": ((S.RUNNING,), S.SUCCEEDED),
    "fatal_error": ((S.RUNNING, *WAITING), S.FAILED),
    "budget_exhausted": ((S.RUNNING, *WAITING), S.FAILED),
    "deadline_exceeded": ((S.RUNNING, *WAITING), S.FAILED),
    "task_canceled": (NON_TERMINAL, S.CANCELED),
}
EVENTS = tuple(TRANSITIONS)
# transition event -> the final status it reaches (the events that end a task)
FINAL_STATUS_OF = {event: target for event, (_from, target) in TRANSITIONS.items()
                   if target in TERMINAL}


def target_of(status: str, event: str) -> str | None:
    """The state `event` leads to from `status`, or None when it is not allowed."""
    rule = TRANSITIONS.get(event)
    if rule is None or status not in rule[0]:
        return None
    return rule[1]
