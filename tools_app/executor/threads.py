"""Reusable threads for python tool calls.

A tool runs in a thread of its own so that its timeout holds even when it
blocks (a thread cannot be killed: a call that outlives its timeout keeps its
thread until it returns, and its result is ignored). Starting a thread per
call also opened a fresh database connection per call for tools that use the
ORM, which cost more than most tools; these threads are kept and keep their
connection (subject to CONN_MAX_AGE) between calls. With the connection pool
(`DB_POOL_MAX_SIZE`, CONN_MAX_AGE 0) a thread gives its connection back to the
pool as each call returns instead, so an idle thread holds none, and the next
call borrows a pooled one (checked by the pool, not opened anew). A thread idle for
`IDLE_S` closes its connection and ends. There is no upper bound on threads:
a hung tool occupies one, and the next call gets another rather than waiting
behind it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection

IDLE_S = 30.0
FRESH_S = 1.0  # a connection used this recently is not health-checked again
Job = tuple[Callable[[], Any], dict[str, Any], threading.Event]


class _Worker(threading.Thread):
    def __init__(self, pool: ToolThreads) -> None:
        super().__init__(name="tether-tool", daemon=True)
        self.pool = pool
        self.jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self.last_job_at = float("-inf")

    def run(self) -> None:
        try:
            while True:
                try:
                    job = self.jobs.get(timeout=IDLE_S)
                except queue.Empty:
                    if self.pool._retire(self):
                        return
                    continue  # taken just now: its job is on the way
                if job is None:
                    return
                fn, box, done = job
                self._tidy_connection()
                try:
                    box["value"] = fn()
                except BaseException as exc:  # noqa: BLE001 - reported to the caller
                    box["error"] = exc
                finally:
                    self._give_back_connection()
                    self.last_job_at = time.monotonic()
                    done.set()
                    self.pool._release(self)
                    notify = box.get("notify")
                    if notify is not None:
                        notify()
        finally:
            connection.close()  # this thread's own connection

    def _give_back_connection(self) -> None:
        """With the pool, the call's connection goes back to it as soon as the
        call returns: up to `TOOL_THREADS` threads share the pool's few
        connections with the runner's database threads, and a thread that
        kept its connection while idle left the others waiting for the pool's
        timeout (it did until the next call on the same thread)."""
        if connection.connection is not None and _pooled():
            connection.close()

    def _tidy_connection(self) -> None:
        """Between calls, as between requests: a connection past CONN_MAX_AGE, or
        broken, is closed. Django then also tests the connection (`SELECT 1`,
        CONN_HEALTH_CHECKS) before the next call's first query; a connection
        that served a call less than `FRESH_S` ago is trusted without it."""
        close_old_connections()
        fresh = time.monotonic() - self.last_job_at < FRESH_S
        if fresh and connection.connection is not None and not connection.errors_occurred:
            connection.health_check_done = True  # type: ignore[attr-defined]  # not in the stubs


def _pooled() -> bool:
    """Is this process's database behind Django's connection pool?"""
    return bool(connection.settings_dict.get("OPTIONS", {}).get("pool"))


class ToolThreads:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self._pid = os.getpid()
        self._closed = False
        self._slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary())

    def run(
        self, fn: Callable[[], Any], timeout_s: float
    ) -> tuple[bool, Any, BaseException | None]:
        """Run `fn` in a pooled thread; (finished in time?, value, exception)."""
        box: dict[str, Any] = {}
        done = threading.Event()
        # The tool runs in the caller's context: its log lines carry the step's.
        call = contextvars.copy_context().run
        self._take().jobs.put((lambda: call(fn), box, done))
        finished = done.wait(timeout_s)
        return finished, box.get("value"), box.get("error")

    async def arun(
        self, fn: Callable[[], Any], timeout_s: float
    ) -> tuple[bool, Any, BaseException | None]:
        """`run`, awaited: the loop is free while the tool runs."""
        loop = asyncio.get_running_loop()
        slots = self._slots.get(loop)
        if slots is None:
            slots = self._slots[loop] = asyncio.Semaphore(
                int(settings.TETHER.get("TOOL_THREADS", 64)))
        await slots.acquire()
        finished = loop.create_future()

        def wake() -> None:
            slots.release()
            if not finished.done():
                finished.set_result(None)

        def notify() -> None:  # in the tool's thread, when the call returns
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(wake)

        box: dict[str, Any] = {"notify": notify}
        call = contextvars.copy_context().run
        self._take().jobs.put((lambda: call(fn), box, threading.Event()))
        try:
            await asyncio.wait_for(asyncio.shield(finished), timeout_s)
        except TimeoutError:
            return False, None, None  # it runs on, holding its slot; its result is ignored
        return True, box.get("value"), box.get("error")

    def shutdown(self) -> None:
        """End the idle threads (closing their connections); busy ones end when done."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.jobs.put(None)

    def _take(self) -> _Worker:
        with self._lock:
            if self._pid != os.getpid():  # a forked child inherits no threads
                self._idle, self._pid = [], os.getpid()
            self._closed = False
            if self._idle:
                return self._idle.pop()
        worker = _Worker(self)
        worker.start()
        return worker

    def _release(self, worker: _Worker) -> None:
        with self._lock:
            if not self._closed:
                self._idle.append(worker)
                return
        worker.jobs.put(None)

    def _retire(self, worker: _Worker) -> bool:
        with self._lock:
            if worker in self._idle:
                self._idle.remove(worker)
                return True
            return False


tool_threads = ToolThreads()
