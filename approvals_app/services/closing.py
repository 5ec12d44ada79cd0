"""Closing a task's open human requests when the task ends (cancel, failure)."""
from __future__ import annotations

from ..models import Approval, Question, Reconciliation

# Each kind of request, and the status it has while it is open.
OPEN_REQUESTS = ((Approval, "pending"), (Question, "open"), (Reconciliation, "open"))


def close_open_requests(*, task_id: int) -> None:
    for model, open_status in OPEN_REQUESTS:
        model.objects.filter(task_id=task_id, status=open_status).update(status="canceled")
