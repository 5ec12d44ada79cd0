"""On PostgreSQL the archive sweep drops a month of the events table as a
partition (retention_app.services.archived_months): a month past the
operator's maximum retention whose rows all belong to archived tasks goes
whole, a month holding a row of a task still online stays, and a restored
task's events of a dropped month come back into the DEFAULT partition."""
from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from retention_app.models import ArchivedTask
from retention_app.services.archive import archive_sweep
from retention_app.services.restore import task_restore
from tasks_app.machine import TaskStatus
from tasks_app.models import Event, Task
from tasks_app.store.partitions import (
    DEFAULT_PARTITION,
    event_months_ensure,
    event_partitions,
    month_of,
)
from tests.factories import submit
from tests.helpers import drive

pytestmark = [pytest.mark.django_db,
              pytest.mark.postgres_only("declarative partitioning is PostgreSQL's")]

SCRIPT = [{"tool": "lookup_order", "args": {"order_id": "A-1"}}, {"final": {"ok": True}}]


@pytest.fixture(autouse=True)
def periods(settings: Any) -> None:
    """A tenant keeps 30 days; nobody more than 60 (the operator's maximum)."""
    settings.TETHER = {**settings.TETHER, "RETENTION_DAYS": 30, "RETENTION_MAX_DAYS": 60}


def _events_in(partition: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {partition}")
        return int(cursor.fetchone()[0])


def _history_moved_to(task_id: int, days_ago: int) -> str:
    """The task's events moved `days_ago` back, into that month's own partition."""
    when = timezone.now() - timedelta(days=days_ago)
    event_months_ensure(now=when, ahead=0)
    Event.objects.filter(task_id=task_id).update(created_at=when)
    return month_of(when).name


def test_an_archived_month_is_dropped_whole_and_a_month_with_a_live_task_is_kept(
        world, archive_dir):
    archived = drive(submit(world.tenant, SCRIPT, goal="old").pk)
    assert archived.status == TaskStatus.SUCCEEDED
    Task.objects.filter(pk=archived.pk).update(finished_at=timezone.now() - timedelta(days=100))
    old_month = _history_moved_to(archived.pk, days_ago=100)
    live = submit(world.tenant, SCRIPT, goal="still running").pk  # never archived
    live_month = _history_moved_to(live, days_ago=160)  # another month
    events = Event.objects.filter(task_id=archived.pk).count()
    assert old_month != live_month and _events_in(old_month) == events > 0

    report = archive_sweep()

    assert report.tasks == 1 and report.deleted == 1
    assert report.partitions_dropped == [old_month]
    assert old_month not in event_partitions()
    assert live_month in event_partitions() and _events_in(live_month) > 0
    assert Event.objects.filter(task_id=live).exists()
    assert not Task.objects.filter(pk=archived.pk).exists()
    assert archive_sweep().partitions_dropped == []  # the live task's month stays

    # Its file kept the events: a restore puts them back, in the DEFAULT partition
    # (their month is gone); the month's own rows were never deleted one by one.
    assert task_restore(archived.pk) > events
    assert Event.objects.filter(task_id=archived.pk).count() == events
    assert _events_in(DEFAULT_PARTITION) == events
    assert ArchivedTask.objects.get(pk=archived.pk).restored_at is not None


def test_a_month_within_the_maximum_retention_is_not_dropped(world, archive_dir):
    task = drive(submit(world.tenant, SCRIPT, goal="archived, recent month").pk)
    Task.objects.filter(pk=task.pk).update(finished_at=timezone.now() - timedelta(days=40))
    month = _history_moved_to(task.pk, days_ago=40)  # past the tenant's 30, not the 60 days

    report = archive_sweep()

    assert report.tasks == 1 and report.partitions_dropped == []
    assert month in event_partitions() and _events_in(month) == 0  # deleted row by row
