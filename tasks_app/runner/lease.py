"""The task lease: which executor may advance a task right now.

Taken with a conditional UPDATE (the task is RUNNING at the version read and
its lease is free, expired or ours), extended by a heartbeat thread during long
tool calls, released at the end of a slice. The lease keeps executors from
wasting work on the same task; correctness does not rest on it, the version
check at commit is the fence.

Taking and releasing are one statement each, once per slice; on PostgreSQL
they are prepared (`prepared`), like the step's own hot statements, and taking
returns the task's row, which the slice's first step would otherwise read.
"""
from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from functools import cache
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection
from django.db.models import Q
from django.utils import timezone

from ..machine import TaskStatus
from ..models import Task
from ..prepared import fetch_one_prepared

TAKE_SQL = f"""
UPDATE {Task._meta.db_table}
   SET lease_owner = %(owner)s, lease_expires_at = %(until)s, heartbeat_at = %(now)s,
       next_run_at = NULL
 WHERE id = %(task_id)s AND status = %(running)s
   AND (lease_owner = '' OR lease_expires_at < %(now)s OR lease_owner = %(owner)s)
RETURNING {", ".join(f'"{f.column}"' for f in Task._meta.concrete_fields)}
"""
RELEASE_SQL = f"""
UPDATE {Task._meta.db_table}
   SET lease_owner = '', lease_expires_at = NULL, next_run_at = %(next_run_at)s
 WHERE id = %(task_id)s AND lease_owner = %(owner)s
RETURNING id
"""


def lease_ttl() -> timedelta:
    return timedelta(seconds=settings.TETHER["LEASE_TTL_S"])


def lease_take(*, task_id: int, owner: str) -> Task | None:
    """Take the lease of a RUNNING task whose lease is free, expired or already
    ours; the task's row as the lease left it (the slice's first step reads no
    other), or None."""
    now = timezone.now()
    if connection.vendor == "postgresql":
        row = fetch_one_prepared(TAKE_SQL, {
            "owner": owner, "until": now + lease_ttl(), "now": now, "task_id": task_id,
            "running": TaskStatus.RUNNING.value})
        return _task_of(row) if row is not None else None
    taken = (
        Task.objects.filter(pk=task_id, status=TaskStatus.RUNNING)
        .filter(Q(lease_owner="") | Q(lease_expires_at__lt=now) | Q(lease_owner=owner))
        .update(lease_owner=owner, lease_expires_at=now + lease_ttl(), heartbeat_at=now,
                next_run_at=None)
    )
    return Task.objects.filter(pk=task_id).first() if taken == 1 else None


def _task_of(row: tuple[Any, ...]) -> Task:
    """A Task from the raw row `TAKE_SQL` returns, converted as the ORM would."""
    attnames, converters = _row_converters(connection.alias)
    values = []
    for value, (column, converts) in zip(row, converters, strict=True):
        for convert in converts:
            value = convert(value, column, connection)
        values.append(value)
    return Task.from_db(connection.alias, attnames, values)


@cache
def _row_converters(alias: str) -> tuple[list[str], list[tuple[Any, list[Any]]]]:
    """The task's attribute names and, per column, the converters the ORM applies
    to what the database returns (JSON text to Python, for one)."""
    fields = Task._meta.concrete_fields
    converters = []
    for field in fields:
        column = field.get_col(Task._meta.db_table)
        converters.append((column, connection.ops.get_db_converters(column)
                           + column.get_db_converters(connection)))
    return [f.attname for f in fields], converters


def lease_extend(*, task_id: int, owner: str) -> bool:
    now = timezone.now()
    return (
        Task.objects.filter(pk=task_id, lease_owner=owner)
        .update(lease_expires_at=now + lease_ttl(), heartbeat_at=now)
        == 1
    )


def lease_release(*, task_id: int, owner: str, next_run_at=None) -> None:  # type: ignore[no-untyped-def]
    """Hand the task back (if the lease is still ours); `next_run_at`: when it is due again."""
    if connection.vendor == "postgresql":
        fetch_one_prepared(RELEASE_SQL, {"next_run_at": next_run_at, "task_id": task_id,
                                         "owner": owner})
        return
    Task.objects.filter(pk=task_id, lease_owner=owner).update(
        lease_owner="", lease_expires_at=None, next_run_at=next_run_at
    )


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
