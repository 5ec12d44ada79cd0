"""The events table, partitioned by month on PostgreSQL (tasks_app.store.partitions):
the migration made it a partitioned table with a DEFAULT partition and the
months ahead; the recovery sweep keeps the current month and the next two
there, idempotently, also when two sweepers race; a row of a month without its
partition lands in the DEFAULT one and moves into the month once it is created.
On SQLite the table stays a plain table and the sweep's step does nothing."""
from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, connections
from django.utils import timezone

from tasks_app.models import Event
from tasks_app.runner.recovery import recovery_sweep
from tasks_app.store.partitions import (
    DEFAULT_PARTITION,
    EVENTS,
    event_months,
    event_months_ensure,
    event_partitions,
    events_partitioned,
    month_of,
)
from tests.factories import submit

PG_ONLY = pytest.mark.postgres_only("declarative partitioning is PostgreSQL's")


def _home_of(event_id: int) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT tableoid::regclass::text FROM {EVENTS} WHERE id = %s", [event_id])
        return str(cursor.fetchone()[0])


def _drop(names: set[str]) -> None:
    with connection.cursor() as cursor:
        for name in names:
            cursor.execute(f"DROP TABLE IF EXISTS {name}")


@pytest.mark.django_db
def test_the_sweep_step_does_nothing_when_every_month_is_there():
    """Both databases: on PostgreSQL the migration made the months ahead, on
    SQLite there is nothing to make."""
    assert events_partitioned() == (connection.vendor == "postgresql")
    assert event_months_ensure() == []


@PG_ONLY
@pytest.mark.django_db
def test_the_events_table_is_partitioned_by_month_on_created_at():
    with connection.cursor() as cursor:
        cursor.execute("SELECT p.partstrat, a.attname FROM pg_partitioned_table p"
                       " JOIN pg_attribute a ON a.attrelid = p.partrelid"
                       " AND a.attnum = p.partattrs[0] WHERE p.partrelid = %s::regclass",
                       [EVENTS])
        assert cursor.fetchall() == [("r", "created_at")]
        cursor.execute("SELECT pg_get_constraintdef(oid) FROM pg_constraint"
                       " WHERE conrelid = %s::regclass AND contype = 'p'", [EVENTS])
        assert cursor.fetchone()[0] == "PRIMARY KEY (id, created_at)"
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE tablename = %s"
                       " AND indexname = 'event_task_id'", [EVENTS])
        assert "(task_id, id)" in cursor.fetchone()[0]
    now = timezone.now()
    ahead = {month_of(now, later=n).name for n in range(3)}
    assert ahead | {DEFAULT_PARTITION} <= event_partitions()
    assert ahead <= {month.name for month in event_months()}


@PG_ONLY
@pytest.mark.django_db
def test_the_recovery_sweep_creates_the_months_ahead_once():
    now = timezone.now()
    next_two = {month_of(now, later=1).name, month_of(now, later=2).name}
    _drop(next_two)  # as if the migration had run two months ago
    assert not next_two & event_partitions()

    recovery_sweep()

    assert next_two <= event_partitions()
    assert event_months_ensure() == []  # idempotent: nothing more to make


@PG_ONLY
@pytest.mark.django_db(transaction=True)
def test_two_sweepers_racing_create_each_month_once():
    later = timezone.now() + timedelta(days=3 * 366)  # months nobody made yet
    wanted = {month_of(later, later=n).name for n in range(3)}
    created: list[list[str]] = []
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def sweeper() -> None:
        try:
            start.wait()
            created.append(event_months_ensure(now=later))
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=sweeper) for _ in range(2)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert not errors
        assert sorted(name for names in created for name in names) == sorted(wanted)
        assert wanted <= event_partitions()
    finally:
        _drop(wanted)


@PG_ONLY
@pytest.mark.django_db
def test_a_far_past_event_lands_in_the_default_partition_then_in_its_month(world):
    task = submit(world.tenant, [{"final": {"ok": True}}])
    event = Event.objects.filter(task_id=task.pk).order_by("pk").first()
    assert event is not None
    assert _home_of(event.pk) == month_of(event.created_at).name

    far_past = datetime(2001, 3, 15, 12, 0, tzinfo=UTC)
    Event.objects.filter(pk=event.pk).update(created_at=far_past)  # the row moves
    assert _home_of(event.pk) == DEFAULT_PARTITION

    assert event_months_ensure(now=far_past, ahead=0) == [f"{EVENTS}_p2001_03"]
    assert _home_of(event.pk) == f"{EVENTS}_p2001_03"  # moved out of the DEFAULT one
    assert Event.objects.get(pk=event.pk).created_at == far_past
