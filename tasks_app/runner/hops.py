"""Where a slice's phases run: its coroutine on the I/O loop, its database
phases in threads.

A slice is a coroutine on the process's I/O loop (`foundations.ioloop`).
It awaits model calls, tool calls and status queries there, and hands each
database phase (take and release the lease: the store's `leases`; plan the
step, record a decision, commit an outcome: the synchronous functions of
`deciding`, `recording`, `executing`) to a `Hop`, which runs it where the ORM
may run and awaits the result:

- `ThreadHop` (the driver, `driver`): a bounded pool of database threads per
  process (`TETHER_DRIVER_DB_THREADS`), each keeping its connection while it
  is busy and giving it back to the pool when idle (as the tool threads do);
- `CallerHop` (a synchronous caller: `run_slice`, `advance_one_step`, the tests
  and the manual runner): the phases run on the calling thread, which waits,
  so they use its connection and its transaction.

Either way the same code runs; only where the database phases happen differs.
A phase runs in a copy of the slice's context, and what it sets there (the
task and the step bound for the logs) is set back in the slice's context when
it returns (as asgiref's `sync_to_async` does), so it stays bound for the rest
of the slice, as in one thread. (Sharing one `Context` object is not an option:
a thread may enter it before the loop has left it.)
"""
from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import os
import queue
import threading
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from django.conf import settings
from django.db import close_old_connections, connection

from foundations.ioloop import io_loop

T = TypeVar("T")
FRESH_S = 1.0  # a connection used this recently is kept and trusted (see `threads`)


class Hop(Protocol):
    # CPU seconds its phases used (the thread's, from start to return): the
    # slice's own work. Not its wall time, which in a process driving hundreds
    # of slices is mostly their turns (a thread to run in, the GIL) and
    # grows with the load, not with the work.
    worked_s: float

    async def __call__(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T: ...


_pool_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_pool_pid = 0
_last_used = threading.local()


def db_threads() -> ThreadPoolExecutor:
    """This process's database threads (a forked child starts its own)."""
    global _pool, _pool_pid
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid():
            _pool = ThreadPoolExecutor(max_workers=settings.TETHER["DRIVER_DB_THREADS"],
                                       thread_name_prefix="tether-db")
            _pool_pid = os.getpid()
        return _pool


def db_threads_shutdown(timeout_s: float = 10.0) -> None:
    """End this process's database threads, each closing its connection first."""
    global _pool
    with _pool_lock:
        pool, _pool = _pool, None
    if pool is None or _pool_pid != os.getpid():
        return
    threads = len(pool._threads)  # started lazily: as many as were needed
    if threads:
        barrier = threading.Barrier(threads)  # one closing job per thread

        def close() -> None:
            connection.close()
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.wait(timeout_s)

        for _ in range(threads):
            pool.submit(close)
    pool.shutdown(wait=True)


def in_db_thread(job: Callable[[], T]) -> T:
    """Run `job` in a database thread: a connection idle for over `FRESH_S`, or
    broken, is given back (to the pool) or closed first, as between requests."""
    last = getattr(_last_used, "at", float("-inf"))
    if time.monotonic() - last > FRESH_S or connection.errors_occurred:
        close_old_connections()
    elif connection.connection is not None:
        connection.health_check_done = True  # type: ignore[attr-defined]  # not in the stubs
    try:
        return job()
    finally:
        _last_used.at = time.monotonic()


def _carry_back(ctx: contextvars.Context) -> None:
    """Set in the current context what a phase set in its copy `ctx`."""
    for var, value in ctx.items():
        if var.get(_UNSET) is not value:
            var.set(value)


_UNSET = object()


class ThreadHop:
    def __init__(self) -> None:
        self.worked_s = 0.0
        self._lock = threading.Lock()  # a wave's calls (`waves`) commit from several threads

    async def __call__(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        ctx = contextvars.copy_context()
        job = functools.partial(fn, *args, **kwargs)
        try:
            return await asyncio.get_running_loop().run_in_executor(
                db_threads(), ctx.run, self._timed, job)
        finally:
            _carry_back(ctx)

    def _timed(self, job: Callable[[], T]) -> T:
        started = time.thread_time()
        try:
            return in_db_thread(job)
        finally:
            with self._lock:
                self.worked_s += time.thread_time() - started


class CallerHop:
    """Phases run on the thread that called `drive`, which waits for the slice."""

    def __init__(self) -> None:
        self.worked_s = 0.0
        self._jobs: queue.SimpleQueue[
            tuple[Callable[[], Any], contextvars.Context, asyncio.Future[Any]] | None
        ] = queue.SimpleQueue()

    async def __call__(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        ctx = contextvars.copy_context()
        self._jobs.put((functools.partial(fn, *args, **kwargs), ctx, future))
        try:
            return await future
        finally:
            _carry_back(ctx)

    def drive(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the I/O loop, doing its phases here; its result. The
        slice starts in a copy of the caller's context."""
        done = start(coro, contextvars.copy_context())
        done.add_done_callback(lambda _: self._jobs.put(None))
        while (item := self._jobs.get()) is not None:
            job, ctx, future = item
            loop = future.get_loop()
            started = time.thread_time()
            value, error = None, None
            try:
                value = ctx.run(job)
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
                error = exc
            self.worked_s += time.thread_time() - started  # before the slice reads it
            loop.call_soon_threadsafe(_settle, future, value, error)
        return done.result()


def _settle(future: asyncio.Future[Any], value: Any, exc: BaseException | None) -> None:
    if future.cancelled():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(value)


def start(coro: Coroutine[Any, Any, T], ctx: contextvars.Context,
          loop: asyncio.AbstractEventLoop | None = None) -> Future[T]:
    """Start `coro` as a task of `loop` (the I/O loop) running in `ctx`, from any thread."""
    loop = loop or io_loop()
    result: Future[T] = Future()

    def create() -> None:
        task = loop.create_task(coro, context=ctx)

        def copy(t: asyncio.Task[T]) -> None:
            if t.cancelled():
                result.cancel()
            elif t.exception() is not None:
                result.set_exception(t.exception())  # type: ignore[arg-type]
            else:
                result.set_result(t.result())

        task.add_done_callback(copy)

    loop.call_soon_threadsafe(create)
    return result
