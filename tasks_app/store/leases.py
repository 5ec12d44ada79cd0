"""The task lease's writes: which executor may advance a task right now.

Taken with a conditional UPDATE (the task is RUNNING at the version read and
its lease is free, expired or ours), extended by heartbeats during long calls
(one slice's, `lease_extend`, or a process's many at once, `leases_extend`),
released at the end of a slice. The lease keeps executors from wasting work on
the same task; correctness does not rest on it, the version check at commit is
the fence.

Taking and releasing are one statement each, once per slice; on PostgreSQL
they are prepared, like the step's own hot statements, and taking returns the
task's row, which the slice's first step would otherwise read. Table and
column names come from the model's `_meta`, the status from the enum.
"""
from __future__ import annotations

from datetime import timedelta
from functools import cache
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Q
from django.utils import timezone

from ..machine import TaskStatus
from ..models import Task
from ..prepared import fetch_one_prepared
from .sql import column, table


def _col(name: str) -> str:
    return column(Task, name)


TAKE_SQL = f"""
UPDATE {table(Task)}
   SET {_col("lease_owner")} = %(owner)s, {_col("lease_expires_at")} = %(until)s,
       {_col("heartbeat_at")} = %(now)s, {_col("next_run_at")} = NULL
 WHERE {_col("id")} = %(task_id)s AND {_col("status")} = %(running)s
   AND ({_col("lease_owner")} = '' OR {_col("lease_expires_at")} < %(now)s
        OR {_col("lease_owner")} = %(owner)s)
RETURNING {", ".join(f'"{f.column}"' for f in Task._meta.concrete_fields)}
"""
RELEASE_SQL = f"""
UPDATE {table(Task)}
   SET {_col("lease_owner")} = '', {_col("lease_expires_at")} = NULL,
       {_col("next_run_at")} = %(next_run_at)s
 WHERE {_col("id")} = %(task_id)s AND {_col("lease_owner")} = %(owner)s
RETURNING {_col("id")}
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
    for value, (col, converts) in zip(row, converters, strict=True):
        for convert in converts:
            value = convert(value, col, connection)
        values.append(value)
    return Task.from_db(connection.alias, attnames, values)


@cache
def _row_converters(alias: str) -> tuple[list[str], list[tuple[Any, list[Any]]]]:
    """The task's attribute names and, per column, the converters the ORM applies
    to what the database returns (JSON text to Python, for one)."""
    fields = Task._meta.concrete_fields
    converters = []
    for field in fields:
        col = field.get_col(Task._meta.db_table)
        converters.append((col, connection.ops.get_db_converters(col)
                           + col.get_db_converters(connection)))
    return [f.attname for f in fields], converters


def lease_extend(*, task_id: int, owner: str) -> bool:
    now = timezone.now()
    return (
        Task.objects.filter(pk=task_id, lease_owner=owner)
        .update(lease_expires_at=now + lease_ttl(), heartbeat_at=now)
        == 1
    )


def leases_extend(pairs: list[tuple[int, str]]) -> int:
    """Extend the leases of `pairs` (task id, owner) still held by those owners."""
    if not pairs:
        return 0
    now = timezone.now()
    # An owner is one slice's (unique), so (id in ids, owner in owners) extends
    # only leases that one of these slices holds.
    return Task.objects.filter(pk__in={t for t, _ in pairs},
                               lease_owner__in={o for _, o in pairs}).update(
        lease_expires_at=now + lease_ttl(), heartbeat_at=now)


def lease_release(*, task_id: int, owner: str, next_run_at=None) -> None:  # type: ignore[no-untyped-def]
    """Hand the task back (if the lease is still ours); `next_run_at`: when it is due again."""
    if connection.vendor == "postgresql":
        fetch_one_prepared(RELEASE_SQL, {"next_run_at": next_run_at, "task_id": task_id,
                                         "owner": owner})
        return
    Task.objects.filter(pk=task_id, lease_owner=owner).update(
        lease_owner="", lease_expires_at=None, next_run_at=next_run_at
    )
