"""Closing a task's open human requests when the task ends (cancel, failure):
each kind of request, with the status it has while open, is registered with
the task store (`store.hooks.on_task_end_close`), which closes them in the
transaction that ends the task."""
from __future__ import annotations

from tasks_app.store.hooks import on_task_end_close

from ..models import Approval, Question, Reconciliation

# Each kind of request, and the status it has while it is open.
OPEN_REQUESTS = ((Approval, "pending"), (Question, "open"), (Reconciliation, "open"))


def register() -> None:
    for model, open_status in OPEN_REQUESTS:
        on_task_end_close(model, open_status)
