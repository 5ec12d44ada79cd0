"""Scheduling a task's next slice: through Celery in production, on the
server's own event loop in the embedded mode, or nowhere (`manual`, for tests
that drive the runner themselves).

Always call `schedule_advance` from `transaction.on_commit` (or outside any
transaction): a worker must never pick up a task whose write is not yet visible.
"""
from __future__ import annotations

import threading

from django.conf import settings
from django.db import transaction

_manual_lock = threading.Lock()
MANUAL_QUEUE: list[tuple[int, float]] = []
MANUAL_COMPENSATIONS: list[int] = []


def schedule_advance(task_id: int, *, delay_s: float = 0.0) -> None:
    mode = settings.TETHER_RUNNER
    if mode == "celery":
        from ..tasks import advance_task

        advance_task.apply_async((task_id,), countdown=max(0.0, delay_s))
    elif mode == "embedded":
        from ..runner.embedded import embedded_runner

        embedded_runner.submit(task_id, delay_s=delay_s)
    else:
        with _manual_lock:
            MANUAL_QUEUE.append((task_id, delay_s))


def schedule_advance_on_commit(task_id: int, *, delay_s: float = 0.0) -> None:
    transaction.on_commit(lambda: schedule_advance(task_id, delay_s=delay_s))


def schedule_compensation(task_id: int) -> None:
    """Compensate a FAILED task's writes (see `runner.compensation`), off the request."""
    mode = settings.TETHER_RUNNER
    if mode == "celery":
        from ..tasks import compensate_task

        compensate_task.apply_async((task_id,))
    elif mode == "embedded":
        from ..runner.embedded import embedded_runner

        embedded_runner.submit_compensation(task_id)
    else:
        with _manual_lock:
            MANUAL_COMPENSATIONS.append(task_id)
