"""The embedded runner: slices run on the ASGI server's own event loop.

Each slice runs in a worker thread through `sync_to_async`, and the channel
layer's pushes are made from the loop, so the in-memory layer delivers live
events at once (a push from a foreign thread would wait until the loop woke
up). Without a server loop (a management command, a shell) a private loop in
a daemon thread serves instead. A periodic sweep admits and recovers tasks,
as Celery beat does in production.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections

log = logging.getLogger(__name__)


class EmbeddedRunner:
    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self._sweeper: Any = None
        self._running: set[int] = set()

    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Called by the ASGI app with the server's loop; starts the sweeper once."""
        with self._lock:
            if self.loop is loop:
                return
            self.loop = loop
        self._sweeper = loop.create_task(self._sweep_forever())

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self.loop is None or self.loop.is_closed():
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="tether-embedded", daemon=True).start()
                self.loop = loop
                loop.call_soon_threadsafe(lambda: loop.create_task(self._sweep_forever()))
            return self.loop

    def submit(self, task_id: int, *, delay_s: float = 0.0) -> None:
        loop = self._ensure_loop()
        loop.call_soon_threadsafe(lambda: loop.create_task(self._run(task_id, delay_s)))

    async def _run(self, task_id: int, delay_s: float) -> None:
        if delay_s > 0:
            await asyncio.sleep(delay_s)
        await sync_to_async(_slice, thread_sensitive=False)(task_id)

    async def _sweep_forever(self) -> None:
        interval = settings.TETHER.get("EMBEDDED_SWEEP_S", 2.0)
        while True:
            try:
                await sync_to_async(_sweep, thread_sensitive=False)()
            except Exception:  # noqa: BLE001 - keep sweeping; the next pass may succeed
                log.exception("embedded recovery sweep failed")
            await asyncio.sleep(interval)


def _slice(task_id: int) -> None:
    from .loop import run_slice

    close_old_connections()
    try:
        run_slice(task_id)
    finally:
        close_old_connections()


def _sweep() -> None:
    from .recovery import recovery_sweep

    close_old_connections()
    recovery_sweep()


embedded_runner = EmbeddedRunner()
