"""Driving the runner in-process, and polling with a deadline (never a bare sleep)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tasks_app.machine import TaskStatus
from tasks_app.models import Task

__all__ = ["drive", "slices_until_waiting", "task_page", "wait_for"]


def wait_for(
    predicate: Callable[[], Any],
    *,
    timeout: float = 20.0,
    interval: float = 0.05,
    message: str = "condition",
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


def drive(task_id: int, *, max_slices: int = 200, timeout: float = 30.0) -> Task:
    """Run slices of one task in this process until it stops being RUNNING.

    Waits out scheduled retries by polling the task's `next_run_at`.
    """
    from tasks_app.runner.loop import run_slice
    from tasks_app.services.admission import admit_created_tasks

    deadline = time.monotonic() + timeout
    for _ in range(max_slices):
        task = Task.objects.get(pk=task_id)
        if task.status == TaskStatus.CREATED:
            admit_created_tasks()
            task = Task.objects.get(pk=task_id)  # protected FSM field: no refresh_from_db
        if task.status != TaskStatus.RUNNING:
            return task
        report = run_slice(task_id)
        if report.ended == "later":
            wait_for(
                lambda: _due(task_id),
                timeout=max(0.1, deadline - time.monotonic()),
                message=f"task {task_id} retry to be due",
            )
        if time.monotonic() > deadline:
            break
    return Task.objects.get(pk=task_id)


def _due(task_id: int) -> bool:
    from django.utils import timezone

    t = Task.objects.only("next_run_at", "status").get(pk=task_id)
    return (
        t.status != TaskStatus.RUNNING or t.next_run_at is None or t.next_run_at <= timezone.now()
    )


def slices_until_waiting(task_id: int, *, max_slices: int = 20) -> Task:
    """Slices of one task until it waits (a slice ends `later`: on a child
    task, a backoff) or stops being RUNNING."""
    from tasks_app.runner.loop import run_slice
    from tasks_app.services.admission import admit_created_tasks

    for _ in range(max_slices):
        task = Task.objects.get(pk=task_id)
        if task.status == TaskStatus.CREATED:
            admit_created_tasks()
            continue
        if task.status != TaskStatus.RUNNING or run_slice(task_id).ended == "later":
            return Task.objects.get(pk=task_id)
    raise AssertionError(f"task {task_id} neither waited nor stopped")


def task_page(user: Any, task_id: int) -> str:
    """The console's page of a task, as `user` sees it."""
    from django.test import Client

    client = Client()
    client.force_login(user)
    response = client.get(f"/tasks/{task_id}/")
    assert response.status_code == 200, response.status_code
    return response.content.decode()
