"""Closing a task's open human requests when the task ends (cancel, failure)."""
from __future__ import annotations

from ..models import Approval, Question, Reconciliation


def close_open_requests(*, task_id: int) -> None:
    Approval.objects.filter(task_id=task_id, status="pending").update(status="canceled")
    Question.objects.filter(task_id=task_id, status="open").update(status="canceled")
    Reconciliation.objects.filter(task_id=task_id, status="open").update(status="canceled")
