"""Closing a task's open human requests when the task ends (cancel, failure):
each kind of request, with the status it has while open and the one it ends
in, is registered with
the task store (`store.hooks.on_task_end_close`), which closes them in the
transaction that ends the task."""
from __future__ import annotations

from tasks_app.store.hooks import on_task_end_close

from ..models import (
    Approval,
    Decision,
    Question,
    QuestionStatus,
    Reconciliation,
    ReconciliationStatus,
)

# Each kind of request, the status it has while it is open, and the one it
# gets when its task ends first.
OPEN_REQUESTS = (
    (Approval, Decision.PENDING, Decision.CANCELED),
    (Question, QuestionStatus.OPEN, QuestionStatus.CANCELED),
    (Reconciliation, ReconciliationStatus.OPEN, ReconciliationStatus.CANCELED),
)


def register() -> None:
    for model, open_status, canceled_status in OPEN_REQUESTS:
        on_task_end_close(model, open_status, canceled_status)
