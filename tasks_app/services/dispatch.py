"""Scheduling a task's next slice: through Celery in production, on the
server's own event loop in the embedded mode, or nowhere (`manual`, for tests
that drive the runner themselves).

Always call `schedule_advance` from `transaction.on_commit` (or outside any
transaction): a worker must never pick up a task whose write is not yet visible.

By then the write is committed, so a broker that is down must not turn it into
an error: a failed enqueue is logged and left to the recovery sweep
(`runner.recovery`), which re-enqueues RUNNING tasks that nobody holds and
admits CREATED ones; the lease makes a second message for one task harmless.
How long a publish may try is bounded in the Celery configuration
(`CELERY_BROKER_CONNECTION_TIMEOUT`, `CELERY_TASK_PUBLISH_RETRY_POLICY`).
"""
from __future__ import annotations

import logging
import threading

from django.conf import settings
from django.db import transaction

log = logging.getLogger(__name__)
_manual_lock = threading.Lock()
MANUAL_QUEUE: list[tuple[int, float]] = []
MANUAL_COMPENSATIONS: list[int] = []


def schedule_advance(task_id: int, *, delay_s: float = 0.0) -> bool:
    """Hand the task's next slice to the runner; False when the broker refused it."""
    mode = settings.TETHER_RUNNER
    if mode == "celery":
        from ..tasks import advance_task

        try:
            advance_task.apply_async((task_id,), countdown=max(0.0, delay_s))
        except Exception:  # any broker failure: the task is committed, the sweep recovers it
            log.warning("could not enqueue task %s; the recovery sweep will", task_id,
                        exc_info=True)
            return False
    elif mode == "embedded":
        from ..runner.embedded import embedded_runner

        embedded_runner.submit(task_id, delay_s=delay_s)
    else:
        with _manual_lock:
            MANUAL_QUEUE.append((task_id, delay_s))
    return True


def schedule_advance_on_commit(task_id: int, *, delay_s: float = 0.0) -> None:
    transaction.on_commit(lambda: schedule_advance(task_id, delay_s=delay_s))


def schedule_compensation(task_id: int) -> None:
    """Compensate a FAILED task's writes (see `runner.compensation`), off the request."""
    mode = settings.TETHER_RUNNER
    if mode == "celery":
        from ..tasks import compensate_task

        try:
            compensate_task.apply_async((task_id,))
        except Exception:  # the FAILED transition is committed; nothing sweeps this up
            log.error("could not enqueue the compensation of task %s", task_id, exc_info=True)
    elif mode == "embedded":
        from ..runner.embedded import embedded_runner

        embedded_runner.submit_compensation(task_id)
    else:
        with _manual_lock:
            MANUAL_COMPENSATIONS.append(task_id)
