"""A step that raised an unexpected error: tried again a bounded number of
times, then the task fails with that error (or escalates, as its profile's
`on_exhaustion` says).

An error the step does not expect (a bug, a stored schema that cannot be
applied, an outage) leaves nothing of the step committed. The task is handed
back and tried again after an exponential backoff with full jitter, capped at
`TETHER_BACKOFF_MAX_S`. Errors are counted while the task stands still (same
version and step count; `Task.fault_at`, `Task.fault_attempts`), on the row,
so the count holds across slices, workers and restarts; after
`TETHER_STEP_ERROR_RETRIES` retries the next error stops the task, with
failure reason `step_error` and the error in the failure detail. A step that
commits anything moves the task on, and the count starts again.

Each attempt logs one line, with one traceback trimmed to its outermost and
innermost frames (a RecursionError's would be thousands of lines).
"""
from __future__ import annotations

import logging
import traceback

from django.conf import settings

from foundations.actors import Actor
from tools_app.executor.jsonsafe import storable

from ..machine import TaskStatus
from ..models import Task
from ..snapshot import TaskSnapshot
from ..store.counters import task_fault_count
from .backoff import backoff_s
from .stopping import exhaust

log = logging.getLogger(__name__)

OUTER_FRAMES, INNER_FRAMES = 12, 8
MAX_ERROR_CHARS = 2000


def step_fault(*, task_id: int, owner: str, exc: Exception) -> float | None:
    """Count `exc`, raised by a step of the task whose lease `owner` holds. The
    delay before the task is tried again, or None when it stopped (failed,
    escalated, or no longer running under this lease). Never raises."""
    retries = int(settings.TETHER["STEP_ERROR_RETRIES"])
    error = storable(f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS])
    try:
        task = Task.objects.filter(pk=task_id, lease_owner=owner).first()
        if task is None or task.status != TaskStatus.RUNNING:
            _log(task_id, exc, "the task no longer runs under this lease")
            return None
        at = f"{task.version}/{task.steps_count}"
        attempt = task.fault_attempts + 1 if task.fault_at == at else 1
        if attempt > retries:
            _log(task_id, exc, f"attempt {attempt} of {retries + 1}: the task stops")
            exhaust(TaskSnapshot.of(task), "step_error", Actor.worker(owner),
                     detail={"type": "step_error", "error": error, "attempts": attempt})
            return None
        task_fault_count(task_id, owner=owner, attempt=attempt, at=at)
    except Exception as counting:  # noqa: BLE001 - an outage: try again later, uncounted
        _log(task_id, exc, f"not counted ({type(counting).__name__}: {counting})")
        return backoff_s(1, full_jitter=True)
    delay = backoff_s(attempt, full_jitter=True)
    _log(task_id, exc, f"attempt {attempt} of {retries + 1}, again in {delay:.2f}s")
    return delay


def _log(task_id: int, exc: Exception, outcome: str) -> None:
    log.error("task %s: a step raised %s; %s\n%s", task_id, type(exc).__name__, outcome,
              trimmed_traceback(exc))


def trimmed_traceback(exc: BaseException) -> str:
    """The traceback of `exc` (and of the errors it chains), each stack cut to
    its outermost and innermost frames."""
    described = traceback.TracebackException.from_exception(exc)
    seen: set[int] = set()
    pending: list[traceback.TracebackException | None] = [described]
    while pending:
        part = pending.pop()
        if part is None or id(part) in seen:
            continue
        seen.add(id(part))
        frames = list(part.stack)
        if len(frames) > OUTER_FRAMES + INNER_FRAMES:
            left_out = len(frames) - OUTER_FRAMES - INNER_FRAMES
            gap = traceback.FrameSummary(f"... {left_out} frames left out ...", 0, "...",
                                         lookup_line=False, line="")
            part.stack = traceback.StackSummary.from_list(
                [*frames[:OUTER_FRAMES], gap, *frames[-INNER_FRAMES:]])
        pending += [part.__cause__, part.__context__]
    return "".join(described.format()).rstrip()
