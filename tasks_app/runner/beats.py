"""The lease heartbeat of a process: one UPDATE for every task with a call out.

While a slice awaits a model call, a tool call or a status query, its lease
must not expire (another executor would take the task over and redo the
work); when the process dies, it must expire (kill -9: another worker takes
the task over after `LEASE_TTL_S`). A slice registers its (task, owner) while
it runs (`holding`, from the lease taken to the lease released); every third
of the TTL, one task on the I/O loop extends the leases of all registered
pairs in one statement (the store's `leases_extend`), in a database thread.
A process with a thousand calls in flight writes one statement per ten
seconds, not a thousand (nor holds a thread per call).
"""
from __future__ import annotations

import asyncio
import functools
import logging
import os
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from django.conf import settings

from ..store.leases import leases_extend
from .hops import db_threads, in_db_thread

log = logging.getLogger(__name__)


class Beats:
    def __init__(self) -> None:
        self.held: Counter[tuple[int, str]] = Counter()
        self._task: asyncio.Task[None] | None = None
        self._pid = os.getpid()

    @asynccontextmanager
    async def holding(self, task_id: int, owner: str) -> AsyncIterator[None]:
        """Keep (task_id, owner)'s lease alive while the block runs."""
        if self._pid != os.getpid():  # a forked child beats for its own slices only
            self.held, self._task, self._pid = Counter(), None, os.getpid()
        key = (task_id, owner)
        self.held[key] += 1
        self._ensure_running()
        try:
            yield
        finally:
            self.held[key] -= 1
            if self.held[key] <= 0:
                del self.held[key]

    def _ensure_running(self) -> None:
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self._task = loop.create_task(self._beat_forever())

    async def _beat_forever(self) -> None:
        interval = max(0.2, settings.TETHER["LEASE_TTL_S"] / 3)
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval)
            pairs = list(self.held)
            if not pairs:
                continue
            try:
                await loop.run_in_executor(db_threads(), in_db_thread,
                                           functools.partial(leases_extend, pairs))
            except Exception:  # noqa: BLE001 - the next beat tries again
                log.exception("lease heartbeat of %s tasks failed", len(pairs))


beats = Beats()
