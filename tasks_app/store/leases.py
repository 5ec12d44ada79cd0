"""The task lease's writes: which executor may advance a task right now.

Taken with a conditional UPDATE (the task is RUNNING at the version read and
its lease is free, expired or ours), extended by heartbeats during long calls
(one slice's, `lease_extend`, or a process's many at once, `leases_extend`),
released at the end of a slice. The lease keeps executors from wasting work on
the same task; correctness does not rest on it, the version check at commit is
the fence.

Taking and releasing are one statement each, once per slice, written by the
backend (`backends`): on PostgreSQL prepared, like the step's own hot
statements, and taking returns the task's row, which the slice's first step
would otherwise read.
"""
from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from ..models import Task
from .backends import backend


def lease_ttl() -> timedelta:
    return timedelta(seconds=settings.TETHER["LEASE_TTL_S"])


def lease_take(*, task_id: int, owner: str) -> Task | None:
    """Take the lease of a RUNNING task whose lease is free, expired or already
    ours; the task's row as the lease left it (the slice's first step reads no
    other), or None."""
    now = timezone.now()
    return backend().lease_take(task_id=task_id, owner=owner, now=now, until=now + lease_ttl())


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
    backend().lease_release(task_id=task_id, owner=owner, next_run_at=next_run_at)
