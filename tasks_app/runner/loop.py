"""A slice of work on one task: take the lease, advance step by step until the
task waits, ends, or the slice is used up, then hand the task back.

Re-enqueueing at the end of a slice lets tasks share workers fairly; a waiting
task is not re-enqueued and holds no worker.

A slice is a coroutine (`slice_of`) on the process's I/O loop: the driver
(`driver`) runs hundreds at once, the embedded runner runs them on the
server's loop, and `run_slice` runs one for a synchronous caller (the tests,
the manual runner), its database phases on the calling thread (`hops`).

A slice whose task ends or waits within the slice goes on, for what is left
of it, with the task that admission starts in the freed slot (`hand_off`,
once per message).
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from datetime import timedelta

from django.conf import settings
from django.db import DatabaseError
from django.utils import timezone

from foundations.logs import bind_log, log_scope
from foundations.metrics import step_scope

from ..models import Task
from ..services.admission import handing_off_one
from ..services.dispatch import schedule_advance
from ..store.leases import lease_release, lease_take
from .beats import beats
from .faults import step_fault
from .hops import CallerHop, Hop
from .memo import SliceMemo
from .results import Next
from .step import step

log = logging.getLogger(__name__)


def new_owner() -> str:
    return f"{settings.TETHER_HOST_NAME}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


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
    """`slice_of`, for a synchronous caller: it waits, and runs the phases."""
    hop = CallerHop()
    return hop.drive(slice_of(task_id, owner=owner, hand_off=hand_off, hop=hop))


async def slice_of(task_id: int, *, hop: Hop, owner: str | None = None,
                   hand_off: bool = False) -> SliceReport:
    """Advance `task_id` for a slice. With `hand_off` (the Celery worker), a task
    that admission starts because this one freed its slot is advanced next, in
    what is left of the slice, instead of through the broker (`HAND_ON_MAX`)."""
    owner = owner or new_owner()
    first: SliceReport | None = None
    handed_on = 0
    while True:
        may_hand_on = hand_off and handed_on < HAND_ON_MAX
        slot: AbstractContextManager[list[int]] = (
            handing_off_one() if may_hand_on else nullcontext([]))
        with slot as handed, log_scope():  # the context of each task's slice, cleared after
            report = await _advance(task_id, owner=owner, hop=hop)
        first = first or report
        if not handed:
            return replace(first, handed_on=handed_on)
        task_id = handed[0]
        if _used_up(hop):
            await hop(schedule_advance, task_id)  # no time left: its own slice, through the queue
            return replace(first, handed_on=handed_on)
        handed_on += 1


def _used_up(hop: Hop) -> bool:
    """Has the slice done `SLICE_S` of its own work? The CPU its phases used
    (`Hop.worked_s`), not its wall time: that includes the calls it awaits
    (waiting holds nothing) and, in a process driving hundreds of slices, the
    turns of all the others (which ended most slices after a step or two)."""
    return hop.worked_s >= settings.TETHER["SLICE_S"]


async def _advance(task_id: int, *, owner: str, hop: Hop) -> SliceReport:
    leased = await hop(lease_take, task_id=task_id, owner=owner)
    if leased is None:
        # Another executor holds it, or the task is not RUNNING: nothing to do.
        return SliceReport(False, 0, "no_lease")
    bind_log(task_id=task_id, trace_id=leased.trace_id, tenant=leased.tenant_id,
             agent=(leased.agent_snapshot or {}).get("name", ""))
    # The lease holds while this process runs the slice (`beats`), however long
    # its calls take; a slice's time counts its own work, not its awaited calls:
    # a task waiting on the network holds no worker, so it need not hand over.
    async with beats.holding(task_id, owner):
        return await _steps(task_id, owner=owner, leased=leased, hop=hop)


async def _steps(task_id: int, *, owner: str, leased: Task, hop: Hop) -> SliceReport:
    cfg = settings.TETHER
    steps = 0
    memo = SliceMemo(leased=leased)  # what each step leaves for the next one of this slice
    try:
        while True:
            # counted, timed, logged and traced once per step
            with step_scope(trace_id=leased.trace_id, task_id=task_id) as observed:
                result = await step(task_id=task_id, owner=owner, memo=memo, hop=hop)
                observed.outcome = result.next.value
            steps += 1
            if result.next is Next.STOP:
                await hop(lease_release, task_id=task_id, owner=owner)
                return SliceReport(True, steps, "stop")
            if result.next is Next.LATER:
                await hop(_release_until, task_id, owner, result.delay_s)
                return SliceReport(True, steps, "later")
            if _used_up(hop) or steps >= cfg["SLICE_MAX_STEPS"]:
                await hop(_release_until, task_id, owner, None)
                return SliceReport(True, steps, "slice")
    except Exception as exc:
        # A bug or an outage must neither wedge the task nor spin on it: the step
        # that failed was not committed; the error is counted and the task comes
        # back after a growing backoff, or stops when the errors go on (`faults`).
        delay = await hop(step_fault, task_id=task_id, owner=owner, exc=exc)
        await _hand_back(task_id, owner=owner, delay_s=delay, stopped=delay is None, hop=hop)
        return SliceReport(True, steps, "error")


HAND_BACK_WAIT_S = (0.25, 2.0)  # the first wait and the largest between tries


async def _hand_back(task_id: int, *, owner: str, delay_s: float | None, stopped: bool,
                     hop: Hop) -> None:
    """Release the lease after a failed step, through a database outage: when
    the database is what failed (a restart), the release fails too, and a
    slice that gave up would leave the task idle until its lease expired and
    the sweep came by. So it is tried again, with growing waits, for as long
    as the lease is ours (`LEASE_TTL_S`: the process's beats keep it meanwhile)."""
    give_up_at = time.monotonic() + settings.TETHER["LEASE_TTL_S"]
    wait, largest = HAND_BACK_WAIT_S
    while True:
        try:
            if stopped:
                await hop(lease_release, task_id=task_id, owner=owner)
            else:
                await hop(_release_until, task_id, owner, delay_s)
            return
        except DatabaseError:
            if time.monotonic() + wait >= give_up_at:
                raise
            log.warning("task %s: the database refused the hand-back; again in %.2fs",
                        task_id, wait)
            await asyncio.sleep(wait)
            wait = min(wait * 2, largest)


def _release_until(task_id: int, owner: str, delay_s: float | None) -> None:
    """Hand the task back and enqueue its next slice: now (`None`), or in `delay_s`."""
    if delay_s is None:
        lease_release(task_id=task_id, owner=owner)
        schedule_advance(task_id)
        return
    lease_release(task_id=task_id, owner=owner,
                  next_run_at=timezone.now() + timedelta(seconds=delay_s))
    schedule_advance(task_id, delay_s=delay_s)
