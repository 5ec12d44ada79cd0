"""Playwright on its own thread.

Playwright's sync API runs an asyncio loop in the thread that uses it. Django
refuses database calls from a thread with a running loop, and the event
publisher would hand its Redis push to that loop instead of sending it. So
Playwright lives on one dedicated thread, and the tests talk to it through
`Remote` proxies: every attribute read and method call hops to that thread and
back, and Playwright objects that come back are wrapped again. The test's own
thread stays free of any loop, exactly like a worker or a request.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any


class PlaywrightThread:
    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="playwright")

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return self._executor.submit(fn, *args, **kwargs).result()

    def shutdown(self) -> None:
        self._executor.shutdown(wait=True)


def _is_playwright(value: Any) -> bool:
    return type(value).__module__.startswith("playwright.")


def wrap(value: Any, thread: PlaywrightThread) -> Any:
    if _is_playwright(value):
        return Remote(value, thread)
    if isinstance(value, list):
        return [wrap(v, thread) for v in value]
    return value


def _unwrap(value: Any) -> Any:
    return object.__getattribute__(value, "_obj") if isinstance(value, Remote) else value


class Remote:
    """A Playwright object used from another thread."""

    __slots__ = ("_obj", "_thread")

    def __init__(self, obj: Any, thread: PlaywrightThread) -> None:
        object.__setattr__(self, "_obj", obj)
        object.__setattr__(self, "_thread", thread)

    def __getattr__(self, name: str) -> Any:
        thread: PlaywrightThread = object.__getattribute__(self, "_thread")
        obj = object.__getattribute__(self, "_obj")
        value = thread.call(getattr, obj, name)
        if callable(value) and not _is_playwright(value):

            def method(*args: Any, **kwargs: Any) -> Any:
                args = tuple(_unwrap(a) for a in args)
                kwargs = {k: _unwrap(v) for k, v in kwargs.items()}
                return wrap(thread.call(value, *args, **kwargs), thread)

            return method
        return wrap(value, thread)

    def __repr__(self) -> str:
        return f"Remote({object.__getattribute__(self, '_obj')!r})"
