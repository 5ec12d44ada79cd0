"""The lease heartbeat of one slice, in a thread of its own.

The lease's statements (take, extend, release) are the store's
(`store.leases`); this keeps one slice's lease alive while a long blocking
call runs, extending it every third of the TTL.
"""
from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from django.db import close_old_connections, connection

from ..store.leases import lease_extend


@contextmanager
def heartbeat(*, task_id: int, owner: str) -> Iterator[None]:
    """Keep the lease alive while a long call runs (every third of the TTL)."""
    stop = threading.Event()
    interval = max(0.2, settings.TETHER["LEASE_TTL_S"] / 3)

    def beat() -> None:
        close_old_connections()
        try:
            while not stop.wait(interval):
                lease_extend(task_id=task_id, owner=owner)
        finally:
            connection.close()

    thread = threading.Thread(target=beat, name=f"tether-heartbeat-{task_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=interval + 1)
