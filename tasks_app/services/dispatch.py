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

Who runs a slice sits above this module (the Celery entry points in
`tasks_app.tasks`, the embedded runner in `runner.embedded`), so it is not
imported: each mode's `Executor` is registered here by `TasksAppConfig.ready`
(`register_executor`), and `settings.TETHER_RUNNER` picks one at each call.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction

log = logging.getLogger(__name__)
_manual_lock = threading.Lock()
MANUAL_QUEUE: list[tuple[int, float]] = []
MANUAL_COMPENSATIONS: list[int] = []


@dataclass(frozen=True)
class Executor:
    """How one `TETHER_RUNNER` mode runs work off the request. Each callable may
    raise (a broker that is down): the work is committed, so that is logged."""

    advance: Callable[[int, float], object]  # (task id, delay in seconds)
    compensate: Callable[[int], object]  # (task id)
    admit: Callable[[], object] | None = None  # run admission (None: the caller runs it)


_executors: dict[str, Executor] = {}


def register_executor(mode: str, executor: Executor) -> None:
    """Run `mode`'s work with `executor`; a mode nobody registered (`manual`) queues it
    in this process for the tests to drive."""
    _executors[mode] = executor


def schedule_advance(task_id: int, *, delay_s: float = 0.0) -> bool:
    """Hand the task's next slice to the runner; False when the broker refused it."""
    executor = _executors.get(settings.TETHER_RUNNER)
    if executor is None:
        with _manual_lock:
            MANUAL_QUEUE.append((task_id, delay_s))
        return True
    try:
        executor.advance(task_id, delay_s)
    except Exception:  # any broker failure: the task is committed, the sweep recovers it
        log.warning("could not enqueue task %s; the recovery sweep will", task_id,
                    exc_info=True)
        return False
    return True


def schedule_advance_on_commit(task_id: int, *, delay_s: float = 0.0) -> None:
    transaction.on_commit(lambda: schedule_advance(task_id, delay_s=delay_s))


def schedule_admission() -> bool:
    """Have a worker run admission soon; False when this mode has no worker to ask
    (or the broker refused): the caller runs it."""
    executor = _executors.get(settings.TETHER_RUNNER)
    if executor is None or executor.admit is None:
        return False
    try:
        executor.admit()
    except Exception:  # the broker is down: the caller admits itself
        log.warning("could not hand admission to a worker", exc_info=True)
        return False
    return True


def schedule_compensation(task_id: int) -> None:
    """Compensate a FAILED task's writes (see `runner.compensation`), off the request."""
    executor = _executors.get(settings.TETHER_RUNNER)
    if executor is None:
        with _manual_lock:
            MANUAL_COMPENSATIONS.append(task_id)
        return
    try:
        executor.compensate(task_id)
    except Exception:  # the FAILED commit marked it due: the recovery sweep hands it out again
        log.error("could not enqueue the compensation of task %s; the recovery sweep will",
                  task_id, exc_info=True)
