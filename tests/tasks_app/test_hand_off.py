"""A Celery worker whose task ends goes on with the task admission starts in
the slot it freed (`run_slice(hand_off=True)`), in what is left of its slice,
instead of sending it through the broker."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from foundations.actors import SYSTEM
from tasks_app.machine import TaskStatus
from tasks_app.models import Task
from tasks_app.runner.loop import run_slice
from tasks_app.runner.recovery import STALE_UNLEASED_S, recovery_sweep
from tasks_app.services.admission import handing_off_one
from tasks_app.services.dispatch import MANUAL_QUEUE
from tasks_app.services.tasks import task_cancel
from tests.factories import submit

pytestmark = pytest.mark.django_db(transaction=True)

SCRIPT = [{"tool": "lookup_order", "args": {"order_id": "A-1"}}, {"final": {"ok": True}}]


@pytest.fixture
def one_at_a_time(settings):  # type: ignore[no-untyped-def]
    settings.TETHER = {**settings.TETHER, "MAX_RUNNING_PER_TENANT": 1}


def _queued() -> list[int]:
    return [task_id for task_id, _ in MANUAL_QUEUE]


def _state(task: Task) -> tuple[str, int]:
    row = Task.objects.get(pk=task.pk)
    return row.status, row.steps_count


def test_the_task_started_in_the_freed_slot_runs_next_without_a_message(world, one_at_a_time):
    """One hand-off per message: the task after it goes through the queue, behind
    the RUNNING tasks already there."""
    first, second, third = (submit(world.tenant, SCRIPT) for _ in range(3))
    MANUAL_QUEUE.clear()

    report = run_slice(first.pk, hand_off=True)

    assert (report.ended, report.steps, report.handed_on) == ("stop", 2, 1)
    assert [_state(t) for t in (first, second)] == [(TaskStatus.SUCCEEDED, 2)] * 2
    assert _state(third) == (TaskStatus.RUNNING, 0)
    assert _queued() == [third.pk]


def test_without_hand_off_the_started_task_goes_through_the_queue(world, one_at_a_time):
    first, second = submit(world.tenant, SCRIPT), submit(world.tenant, SCRIPT)
    MANUAL_QUEUE.clear()

    report = run_slice(first.pk)

    assert report.handed_on == 0
    assert _state(second) == (TaskStatus.RUNNING, 0)
    assert _queued() == [second.pk]


def test_with_no_time_left_the_started_task_is_queued_not_dropped(world, one_at_a_time, settings):
    settings.TETHER = {**settings.TETHER, "SLICE_S": 0}
    first = submit(world.tenant, [{"final": {"ok": True}}])
    second = submit(world.tenant, SCRIPT)
    MANUAL_QUEUE.clear()

    report = run_slice(first.pk, hand_off=True)

    assert (report.ended, report.handed_on) == ("stop", 0)
    assert _state(first) == (TaskStatus.SUCCEEDED, 1)
    assert _state(second) == (TaskStatus.RUNNING, 0)
    assert _queued() == [second.pk]


def test_a_handed_task_its_worker_never_took_is_requeued_by_the_sweep(world, one_at_a_time):
    """The worker died between admission's commit and taking the lease: the task
    is RUNNING, unleased and in no queue; the sweep sends it once it is stale."""
    blocker = submit(world.tenant, [{"ask": "wait here"}])
    handed_task = submit(world.tenant, SCRIPT)
    with handing_off_one() as handed:
        task_cancel(task_id=blocker.pk, actor=SYSTEM, reason="free the slot")
    assert handed == [handed_task.pk]
    MANUAL_QUEUE.clear()

    assert recovery_sweep().requeued == 0  # not yet: its worker may be on its way
    Task.objects.filter(pk=handed_task.pk).update(
        updated_at=timezone.now() - timedelta(seconds=STALE_UNLEASED_S + 1))

    assert recovery_sweep().requeued == 1
    assert _queued() == [handed_task.pk]
