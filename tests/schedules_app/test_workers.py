"""Schedules fired by real Celery workers' own sweepers (no beat): two worker
processes, an every-minute schedule with two due times passed, a worker
killed and another started, and each due time has run exactly once."""
from __future__ import annotations

from datetime import datetime

import pytest

from schedules_app.models import RunOutcome, Schedule, ScheduleRun
from tasks_app.machine import TaskStatus
from tasks_app.models import Task
from tests.helpers import wait_for

from .conftest import make_schedule, minute_now, minutes

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def _started(due_times: list[datetime]) -> bool:
    return ScheduleRun.objects.filter(due_at__in=due_times, outcome=RunOutcome.STARTED,
                                      task__status=TaskStatus.SUCCEEDED).count() == len(due_times)


def _each_due_time_once(schedule: Schedule, due_times: list[datetime]) -> None:
    """One run and one task per due time, and no task without its run (each a single
    statement: the workers may fire a later due time meanwhile)."""
    for due in due_times:
        assert ScheduleRun.objects.filter(schedule=schedule, due_at=due).count() == 1
        key = f"schedule:{schedule.pk}:{due.isoformat()}"
        assert Task.objects.filter(idempotency_key=key).count() == 1
    assert not Task.objects.exclude(pk__in=ScheduleRun.objects.values("task_id")).exists()


def test_two_workers_fire_each_due_time_once_across_a_restart(world, admin, celery_workers):
    now = minute_now()
    due_times = [now - minutes(1), now]
    schedule = make_schedule(world.tenant, admin, due_at=due_times[0], catch_up="all",
                             overlap="allow")
    first = celery_workers.start(concurrency=1)
    celery_workers.start(concurrency=1)
    wait_for(lambda: _started(due_times), timeout=45,
             message="both due times to run to the end on the workers")
    _each_due_time_once(schedule, due_times)

    # a worker dies, another starts, and the schedule is moved back over both due times
    first.kill()
    celery_workers.start(concurrency=1)
    Schedule.objects.filter(pk=schedule.pk).update(next_due_at=due_times[0])
    wait_for(lambda: Schedule.objects.get(pk=schedule.pk).next_due_at > due_times[1],
             timeout=30, message="a sweep to pass over the due times again")

    _each_due_time_once(schedule, due_times)
