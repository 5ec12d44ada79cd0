"""The process's I/O event loop: where every outbound call of the runner waits.

One asyncio loop per process carries all model calls, HTTP tool calls and
status queries of the tasks this process drives (`tasks_app.runner.driver`),
so a task waiting on the network holds no thread. Which loop:

- in the ASGI server (the embedded mode), the server's own loop, bound by
  `bind` when the embedded runner gets it;
- elsewhere (a Celery worker process, a management command, a test), a loop
  in a daemon thread of its own, started on first use in this process (a
  forked prefork child starts its own: threads do not survive a fork).

Outside the ASGI server the loop is uvloop's (libuv): the loop's own share of
a worker's CPU in the I/O benchmark fell from 11 % to 6 % (py-spy), and this
loop turns over hundreds of calls at once.

`run_io` lets synchronous code (a summary in a database phase, the console's
model check) await a coroutine on that loop; it must never be called from the
loop's own thread.
"""
from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import uvloop

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_pid = 0


def bind(loop: asyncio.AbstractEventLoop) -> None:
    """Use `loop` (the ASGI server's) as this process's I/O loop."""
    global _loop, _pid
    with _lock:
        _loop, _pid = loop, os.getpid()


def io_loop() -> asyncio.AbstractEventLoop:
    """This process's I/O loop, started on first use."""
    global _loop, _pid
    with _lock:
        if _loop is not None and _pid == os.getpid() and not _loop.is_closed():
            return _loop
        loop = uvloop.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            loop.run_forever()

        threading.Thread(target=run, name="tether-io", daemon=True).start()
        ready.wait()
        _loop, _pid = loop, os.getpid()
        return loop


def on_io_loop() -> bool:
    """Is the caller running on this process's I/O loop?"""
    try:
        return asyncio.get_running_loop() is _loop
    except RuntimeError:
        return False


def run_io(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` on the I/O loop and wait for its result (from a plain thread)."""
    if on_io_loop():
        coro.close()
        raise RuntimeError("run_io called on the I/O loop itself: await the coroutine instead")
    return asyncio.run_coroutine_threadsafe(coro, io_loop()).result()
