"""The driver: one process advances hundreds of tasks at once on its I/O loop.

Celery carries the work: a message `advance_task(task_id)` is handed to the
driver of the worker process that received it (`submit`), and the message is
done. The driver runs the task's slice as a coroutine on the process's I/O
loop (`foundations.ioloop`): model calls, tool calls, status queries
and backoffs are awaited there, so a task that waits holds no process and no
thread; its database phases run in the process's few database threads
(`hops.ThreadHop`). The embedded runner runs the very same slices on the ASGI
server's loop (`spawn`).

Backpressure: a process drives at most `TETHER_DRIVER_MAX_TASKS` slices at
once; `submit` blocks the Celery pool thread that calls it until one ends, so
the worker takes no more messages meanwhile and the broker keeps them for
the other workers.

A message is acknowledged once handed over. A slice lost with its process
(kill -9) holds the task's lease until it expires (its calls in flight kept it
alive until then: `beats`); the recovery sweep then re-enqueues the task, and
the ledger decides what happens to the call that was out (same key for tools
that honour keys, the status query for plain writes).

On a warm shutdown the worker stops taking messages and `drain` waits (up to
`TETHER_DRIVER_DRAIN_S`) for the slices in flight to end; those still running
are left to the lease and the sweep.
"""
from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import threading
import time
from concurrent.futures import Future

from django.conf import settings

from foundations import tracing
from foundations.ioloop import io_loop
from foundations.logs import log_scope

from .hops import ThreadHop, start
from .loop import SliceReport, slice_of

log = logging.getLogger(__name__)


def spawn(task_id: int, *, delay_s: float = 0.0, hand_off: bool = False,
          loop: asyncio.AbstractEventLoop | None = None) -> Future[SliceReport | None]:
    """Start a slice of `task_id` on `loop` (this process's I/O loop), from any
    thread; its phases run in the database threads."""
    ctx = contextvars.Context()  # the slice's own: nothing of the caller's logs
    # ... but the caller's trace context (a Celery message's span), which its steps link to
    ctx.run(tracing.adopt_context, tracing.carried_context())
    return start(_slice(task_id, delay_s=delay_s, hand_off=hand_off), ctx, loop)


async def _slice(task_id: int, *, delay_s: float, hand_off: bool) -> SliceReport | None:
    if delay_s > 0:
        await asyncio.sleep(delay_s)  # a timer on the loop: no thread waits
    try:
        with log_scope(task_id=task_id):  # the slice binds the rest
            return await slice_of(task_id, hop=ThreadHop(), hand_off=hand_off)
    except Exception:  # noqa: BLE001 - slice_of counts a step's errors; keep the loop alive
        log.exception("the slice of task %s failed", task_id)
        return None


class Driver:
    """This process's slices in flight, bounded."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = 0
        self._slots: threading.BoundedSemaphore | None = None
        self.in_flight = 0
        self.peak = 0

    def submit(self, task_id: int, *, hand_off: bool = True) -> None:
        """Hand a slice of `task_id` to the I/O loop; blocks while this process
        already drives its maximum (never call it from the loop itself)."""
        slots = self._slots_here()
        slots.acquire()
        with self._lock:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
        done = spawn(task_id, hand_off=hand_off, loop=io_loop())
        done.add_done_callback(lambda _: self._ended(slots))

    def drain(self, timeout_s: float | None = None) -> int:
        """Wait for the slices in flight to end; how many are still running."""
        timeout_s = settings.TETHER["DRIVER_DRAIN_S"] if timeout_s is None else timeout_s
        until = time.monotonic() + timeout_s
        while self.in_flight and time.monotonic() < until:
            time.sleep(0.05)
        return self.in_flight

    def _slots_here(self) -> threading.BoundedSemaphore:
        with self._lock:
            if self._slots is None or self._pid != os.getpid():  # a forked child: its own
                self._slots = threading.BoundedSemaphore(settings.TETHER["DRIVER_MAX_TASKS"])
                self._pid, self.in_flight, self.peak = os.getpid(), 0, 0
            return self._slots

    def _ended(self, slots: threading.BoundedSemaphore) -> None:
        with self._lock:
            self.in_flight -= 1
        slots.release()


driver = Driver()
