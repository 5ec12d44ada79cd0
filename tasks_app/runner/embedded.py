"""The embedded runner: slices run on the ASGI server's own event loop.

The server's loop is the process's I/O loop (`foundations.ioloop.bind`),
and each slice is the driver's (`driver.spawn`): the same coroutine as in a
Celery worker, its calls awaited on the loop and its database phases in the
database threads. Live events reach the loop through the publisher's outbox
(`live.publish`), so the in-memory layer delivers them at once. A periodic
sweep admits and recovers tasks, as the workers' sweepers do in production.

When the runner gets the server's loop (the choice, and why):
- uvicorn and hypercorn send the ASGI lifespan startup: `config.asgi` binds
  the loop then, before the first request;
- daphne sends no lifespan events, so `config.asgi` also registers
  `reactor.callWhenRunning` on daphne's Twisted reactor (an asyncio reactor
  running on the very loop that serves requests): the loop is bound when the
  server starts, not when the first request happens to arrive;
- every request binds it too (a no-op once bound), as a safety net.
A private loop in a daemon thread of its own is never the answer: in a server
process its pushes to the in-memory layer would reach the consumers late, and
in a management command it would die with the command mid-step. Outside the
server, `submit` does nothing; the server resumes such tasks when it starts
and its sweep finds them later.

When the loop is bound, the runner first resumes every RUNNING task that no
executor holds (the server is the embedded mode's only executor, so such a
task was admitted by a management command, or its process stopped); tasks
whose lease is still held wait for the regular sweep after the lease
expires. The lease makes a duplicate submission harmless.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections

from foundations.ioloop import bind as bind_io_loop

from ..live.publish import publisher
from ..machine import TaskStatus
from ..models import Task
from ..services.dispatch import Executor
from .compensation import compensate_logged
from .driver import spawn
from .sweeper import locked_sweep

log = logging.getLogger(__name__)


class EmbeddedRunner:
    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self._sweeper: Any = None

    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Called on the server's loop (lifespan startup, daphne's reactor start,
        or any request); starts the sweeper once per loop."""
        with self._lock:
            if self.loop is loop:
                return
            self.loop = loop
            bind_io_loop(loop)
            publisher.bind_server_loop(loop)
            self._sweeper = loop.create_task(self._sweep_forever(resume_first=True))

    def submit(self, task_id: int, *, delay_s: float = 0.0) -> None:
        loop = self.loop
        if loop is None or loop.is_closed():
            # Not in the server process (a management command, a shell): the
            # server's sweep picks the task up; running it here would die with
            # this process mid-step.
            return
        spawn(task_id, delay_s=delay_s, loop=loop)

    def submit_compensation(self, task_id: int) -> None:
        loop = self.loop
        if loop is None or loop.is_closed():
            return
        loop.call_soon_threadsafe(
            lambda: loop.create_task(sync_to_async(compensate_logged, thread_sensitive=False)(
                task_id))
        )

    def submit_job(self, fn: Callable[..., object], *args: object, delay_s: float = 0.0) -> bool:
        """Run `fn(*args)` in a worker thread, from the server's loop, after
        `delay_s`: other apps' background work (notify_app's deliveries). False
        outside the server process (the work's own sweep picks it up later)."""
        loop = self.loop
        if loop is None or loop.is_closed():
            return False
        loop.call_soon_threadsafe(lambda: loop.create_task(self._job(fn, args, delay_s)))
        return True

    async def _job(self, fn: Callable[..., object], args: tuple[object, ...],
                   delay_s: float) -> None:
        if delay_s > 0:
            await asyncio.sleep(delay_s)
        try:
            await sync_to_async(_call, thread_sensitive=False)(fn, args)
        except Exception:  # noqa: BLE001 - keep the loop alive; the job's sweep retries
            log.exception("embedded job %s failed", getattr(fn, "__qualname__", fn))

    async def _sweep_forever(self, *, resume_first: bool) -> None:
        interval = settings.TETHER.get("EMBEDDED_SWEEP_S", 2.0)
        if resume_first:
            try:
                for task_id in await sync_to_async(_unleased_running, thread_sensitive=False)():
                    spawn(task_id, loop=asyncio.get_running_loop())
            except Exception:  # noqa: BLE001 - the periodic sweep recovers them later
                log.exception("embedded runner could not resume running tasks")
        while True:
            try:
                await sync_to_async(_sweep, thread_sensitive=False)()
            except Exception:  # noqa: BLE001 - keep sweeping; the next pass may succeed
                log.exception("embedded recovery sweep failed")
            await asyncio.sleep(interval)


def _call(fn: Callable[..., object], args: tuple[object, ...]) -> None:
    close_old_connections()
    try:
        fn(*args)
    finally:
        close_old_connections()


def _sweep() -> None:
    close_old_connections()
    locked_sweep()  # one sweep at a time, with workers or other servers on PostgreSQL


def _unleased_running() -> list[int]:
    close_old_connections()
    return list(
        Task.objects.filter(status=TaskStatus.RUNNING, lease_owner="")
        .order_by("id")
        .values_list("id", flat=True)[:1000]
    )


embedded_runner = EmbeddedRunner()

# How `services.dispatch` hands work to this runner (registered by `TasksAppConfig.ready`).
EMBEDDED = Executor(
    advance=lambda task_id, delay_s: embedded_runner.submit(task_id, delay_s=delay_s),
    compensate=embedded_runner.submit_compensation,
)
