"""A slice of work on one task: take the lease, advance step by step until the
task waits, ends, or the slice is used up, then hand the task back.

Re-enqueueing at the end of a slice lets tasks share workers fairly; a waiting
task is not re-enqueued and holds no worker. A Celery worker whose task ends
or waits within the slice goes on, for what is left of it, with the task that
admission starts in the freed slot (`hand_off`, once per message).
"""
from __future__ import annotations

import os
import socket
import time
import uuid
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from config.logs import bind_log, log_scope
from config.metrics import step_scope

from ..services.admission import handing_off_one
from ..services.dispatch import schedule_advance
from .faults import step_fault
from .lease import lease_release, lease_take
from .memo import SliceMemo
from .step import Next, advance_one_step


def new_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class SliceReport:
    leased: bool
    steps: int
    ended: str  # "stop", "later", "slice", "error", "no_lease"
    handed_on: int = 0  # tasks advanced after this one in the same slice (`hand_off`)


# A task handed on is advanced ahead of RUNNING tasks whose messages are already
# queued. At most one per message: a queued task then waits at most about twice
# as long as it would without hand-offs, and the broker carries half the
# messages. (Unbounded, a steady stream of admissions kept queued tasks waiting
# for whole slices.)
HAND_ON_MAX = 1


def run_slice(task_id: int, *, owner: str | None = None, hand_off: bool = False) -> SliceReport:
    """Advance `task_id` for a slice. With `hand_off` (the Celery worker), a task
    that admission starts because this one freed its slot is advanced next, in
    what is left of the slice, instead of through the broker (`HAND_ON_MAX`)."""
    owner = owner or new_owner()
    until = time.monotonic() + settings.TETHER["SLICE_S"]
    first: SliceReport | None = None
    handed_on = 0
    while True:
        may_hand_on = hand_off and handed_on < HAND_ON_MAX
        slot: AbstractContextManager[list[int]] = (
            handing_off_one() if may_hand_on else nullcontext([]))
        with slot as handed, log_scope():  # the context of each task's slice, cleared after
            report = _advance(task_id, owner=owner, until=until)
        first = first or report
        if not handed:
            return replace(first, handed_on=handed_on)
        task_id = handed[0]
        if time.monotonic() >= until:
            schedule_advance(task_id)  # no time left here: its own slice, through the queue
            return replace(first, handed_on=handed_on)
        handed_on += 1


def _advance(task_id: int, *, owner: str, until: float) -> SliceReport:
    leased = lease_take(task_id=task_id, owner=owner)
    if leased is None:
        # Another executor holds it, or the task is not RUNNING: nothing to do.
        return SliceReport(False, 0, "no_lease")
    bind_log(task_id=task_id, trace_id=leased.trace_id, tenant=leased.tenant_id,
             agent=(leased.agent_snapshot or {}).get("name", ""))
    cfg = settings.TETHER
    steps = 0
    memo = SliceMemo(leased=leased)  # what each step leaves for the next one of this slice
    try:
        while True:
            # counted, timed, logged and traced once per step
            with step_scope(trace_id=leased.trace_id, task_id=task_id) as observed:
                result = advance_one_step(task_id=task_id, owner=owner, memo=memo)
                observed.outcome = result.next.value
            steps += 1
            if result.next is Next.STOP:
                lease_release(task_id=task_id, owner=owner)
                return SliceReport(True, steps, "stop")
            if result.next is Next.LATER:
                lease_release(task_id=task_id, owner=owner,
                              next_run_at=timezone.now() + timedelta(seconds=result.delay_s))
                schedule_advance(task_id, delay_s=result.delay_s)
                return SliceReport(True, steps, "later")
            if time.monotonic() >= until or steps >= cfg["SLICE_MAX_STEPS"]:
                lease_release(task_id=task_id, owner=owner)
                schedule_advance(task_id)
                return SliceReport(True, steps, "slice")
    except Exception as exc:
        # A bug or an outage must neither wedge the task nor spin on it: the step
        # that failed was not committed; the error is counted and the task comes
        # back after a growing backoff, or stops when the errors go on (`faults`).
        delay = step_fault(task_id=task_id, owner=owner, exc=exc)
        if delay is None:
            lease_release(task_id=task_id, owner=owner)
            return SliceReport(True, steps, "error")
        lease_release(task_id=task_id, owner=owner,
                      next_run_at=timezone.now() + timedelta(seconds=delay))
        schedule_advance(task_id, delay_s=delay)
        return SliceReport(True, steps, "error")
