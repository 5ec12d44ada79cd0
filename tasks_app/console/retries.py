"""The task page's retry and resource-lease parts: the "Retry from step N" form,
the links between a task and its retries, and what a call waits for."""
from __future__ import annotations

from typing import Any

from django import forms

from foundations.console_access import ConsoleUser

from ..leases.selectors import waiting_for
from ..models import Step, Task
from ..retries.services import MAX_COMMENT, RETRYABLE, default_from_step


class RetryForm(forms.Form):
    from_step = forms.IntegerField(min_value=1, max_value=2**31 - 1, label="From step")
    comment = forms.CharField(required=False, max_length=MAX_COMMENT)


def retry_panel(cu: ConsoleUser, task: Task) -> dict[str, Any]:
    """Context for the task page: retry links, the retry action, a resource wait."""
    can_retry = cu.can_operate and task.status in RETRYABLE
    retry_step = 0
    if can_retry:
        retry_step = default_from_step(list(Step.objects.filter(task_id=task.pk)
                                            .only("step_no", "status", "kind")
                                            .order_by("step_no")))
    return {
        "can_retry": can_retry,
        "retry_step": retry_step,
        "retried_by": list(task.retried_by.order_by("id").values_list("id", flat=True)),
        "resource_wait": waiting_for(task.pk) if task.status == "RUNNING" else None,
    }
