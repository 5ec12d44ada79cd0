"""Firing due schedules from the recovery sweep: once per due time, whoever
sweeps and however often; overlap and catch-up as the schedule says; a target
that cannot start is recorded and the schedule goes on."""
from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection

from schedules_app import starters
from schedules_app.models import RunOutcome, Schedule, ScheduleRun
from schedules_app.services.firing import CATCH_UP_MAX, ON_TIME_S, run_key, schedules_fire
from schedules_app.starters import ScheduledStart
from tasks_app.machine import TaskStatus
from tasks_app.models import AgentProfile, Task
from tasks_app.runner.recovery import recovery_sweep
from tasks_app.services.tasks import Submitted, task_submit
from tests.helpers import drive

from .conftest import make_schedule, minute_now, minutes

pytestmark = pytest.mark.django_db


def outcomes(schedule: Schedule) -> list[tuple[Any, str]]:
    return list(ScheduleRun.objects.filter(schedule=schedule).order_by("due_at")
                .values_list("due_at", "outcome"))


def test_a_due_schedule_fires_once_however_often_the_sweep_runs(world, admin):
    due = minute_now().replace(minute=0)  # this hour's due time, not reached late: catch-up one
    schedule = make_schedule(world.tenant, admin, due_at=due, cron="0 * * * *", catch_up="one")

    recovery_sweep()  # the registered sweep step, at the real now
    recovery_sweep()
    schedules_fire(now=due + timedelta(seconds=5))

    [run] = ScheduleRun.objects.filter(schedule=schedule)
    assert (run.due_at, run.outcome) == (due, RunOutcome.STARTED)
    assert Task.objects.filter(tenant=world.tenant).count() == 1
    task = run.task
    assert task.idempotency_key == run_key(schedule, due)
    assert task.idempotency_key == f"schedule:{schedule.pk}:{due.isoformat()}"
    assert task.requester_id == admin.pk
    assert task.goal == "Scheduled run of support"
    assert task.script == [{"final": {"ok": True}}]
    schedule.refresh_from_db()
    assert schedule.last_due_at == due
    assert schedule.next_due_at == due + minutes(60)
    assert task.events.first().actor == "schedule:nightly"


def test_a_due_time_moved_back_by_hand_does_not_fire_again(world, admin):
    due = minute_now()
    schedule = make_schedule(world.tenant, admin, due_at=due)
    schedules_fire(now=due)
    Schedule.objects.filter(pk=schedule.pk).update(next_due_at=due)
    assert schedules_fire(now=due) == {"already_fired": 1}
    assert ScheduleRun.objects.filter(schedule=schedule).count() == 1
    assert Task.objects.count() == 1


def test_paused_schedules_do_not_fire(world, admin):
    due = minute_now()
    make_schedule(world.tenant, admin, due_at=due)
    Schedule.objects.update(paused=True)
    assert schedules_fire(now=due) == {}
    assert not ScheduleRun.objects.exists()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_concurrent_sweeps_fire_each_due_time_once(world, admin):
    due = minute_now()
    names = [f"every-{i}" for i in range(6)]
    for name in names:
        make_schedule(world.tenant, admin, name=name, due_at=due - minutes(1),
                      catch_up="all", overlap="allow")
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def sweep() -> None:
        try:
            barrier.wait(timeout=10)
            schedules_fire(now=due)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=sweep) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    # two due times each (a minute ago, now), each fired once
    assert ScheduleRun.objects.count() == 2 * len(names)
    assert ScheduleRun.objects.filter(outcome=RunOutcome.STARTED).count() == 2 * len(names)
    assert Task.objects.count() == 2 * len(names)
    assert Task.objects.values("idempotency_key").distinct().count() == 2 * len(names)


def test_overlap_skip_records_the_due_time_while_the_previous_run_goes_on(world, admin):
    due = minute_now()
    schedule = make_schedule(world.tenant, admin, due_at=due, overlap="skip")
    schedules_fire(now=due)
    schedules_fire(now=due + minutes(1))
    assert outcomes(schedule) == [(due, RunOutcome.STARTED),
                                  (due + minutes(1), RunOutcome.SKIPPED_OVERLAP)]
    assert Task.objects.count() == 1

    drive(ScheduleRun.objects.get(due_at=due).task_id)  # the first run ends
    schedules_fire(now=due + minutes(2))
    assert outcomes(schedule)[-1] == (due + minutes(2), RunOutcome.STARTED)
    assert Task.objects.count() == 2


def test_overlap_queue_waits_for_the_previous_run(world, admin):
    due = minute_now()
    schedule = make_schedule(world.tenant, admin, due_at=due, overlap="queue", catch_up="one")
    schedules_fire(now=due)
    schedules_fire(now=due + minutes(1))
    schedule.refresh_from_db()
    assert schedule.next_due_at == due + minutes(1)  # still due
    assert len(outcomes(schedule)) == 1

    drive(ScheduleRun.objects.get(due_at=due).task_id)
    schedules_fire(now=due + minutes(1) + timedelta(seconds=10))
    assert outcomes(schedule) == [(due, RunOutcome.STARTED),
                                  (due + minutes(1), RunOutcome.STARTED)]


def test_overlap_allow_starts_while_the_previous_run_goes_on(world, admin):
    due = minute_now()
    schedule = make_schedule(world.tenant, admin, due_at=due, overlap="allow")
    schedules_fire(now=due)
    schedules_fire(now=due + minutes(1))
    assert [o for _, o in outcomes(schedule)] == [RunOutcome.STARTED, RunOutcome.STARTED]
    assert Task.objects.filter(status=TaskStatus.CREATED).count() == 2


@pytest.mark.parametrize("catch_up, expected", [
    ("none", ["skipped_catch_up"] * 4 + ["started"]),
    ("one", ["skipped_catch_up"] * 4 + ["started"]),
    ("all", ["started"] * 5),
])
def test_catch_up_after_missed_due_times(world, admin, catch_up, expected):
    now = minute_now()
    schedule = make_schedule(world.tenant, admin, due_at=now - minutes(4), catch_up=catch_up,
                             overlap="allow")
    schedules_fire(now=now + timedelta(seconds=2))
    assert outcomes(schedule) == [(now - minutes(4 - i), o) for i, o in enumerate(expected)]
    assert Task.objects.count() == expected.count("started")
    schedule.refresh_from_db()
    assert (schedule.last_due_at, schedule.next_due_at) == (now, now + minutes(1))


@pytest.mark.parametrize("catch_up, started", [("none", 0), ("one", 1)])
def test_a_due_time_reached_late_runs_only_with_catch_up(world, admin, catch_up, started):
    now = minute_now()
    due = now.replace(minute=now.minute - now.minute % 5)  # a due time of */5: no other within
    schedule = make_schedule(world.tenant, admin, due_at=due, catch_up=catch_up,
                             cron="*/5 * * * *")
    schedules_fire(now=due + timedelta(seconds=ON_TIME_S + 30))
    [(_, outcome)] = outcomes(schedule)
    assert outcome == ("started" if started else "skipped_catch_up")
    assert Task.objects.count() == started


def test_catch_up_all_is_bounded(world, admin):
    now = minute_now()
    schedule = make_schedule(world.tenant, admin, due_at=now - minutes(30), catch_up="all",
                             overlap="allow")
    schedules_fire(now=now)
    runs = outcomes(schedule)
    assert len(runs) == CATCH_UP_MAX == Task.objects.count()
    assert [d for d, _ in runs] == [now - minutes(CATCH_UP_MAX - 1 - i)
                                    for i in range(CATCH_UP_MAX)]
    schedule.refresh_from_db()
    assert schedule.next_due_at == now + minutes(1)


def test_a_target_that_cannot_start_is_recorded_and_the_schedule_goes_on(world, admin):
    due = minute_now()
    schedule = make_schedule(world.tenant, admin, due_at=due)
    AgentProfile.objects.filter(tenant=world.tenant, name="support").update(enabled=False)
    schedules_fire(now=due)
    [run] = ScheduleRun.objects.filter(schedule=schedule)
    assert (run.outcome, run.task) == (RunOutcome.FAILED, None)
    assert "disabled" in run.error
    schedule.refresh_from_db()
    assert schedule.next_due_at == due + minutes(1)

    # a workflow deleted since: failed with the reason, nothing raised
    Schedule.objects.filter(pk=schedule.pk).update(target={"workflow": "gone"})
    schedules_fire(now=due + minutes(1))
    run = ScheduleRun.objects.get(schedule=schedule, due_at=due + minutes(1))
    assert run.outcome == RunOutcome.FAILED
    assert "no workflow named 'gone'" in run.error

    # a kind nobody registered (its app removed since): failed too, nothing raised
    Schedule.objects.filter(pk=schedule.pk).update(target={"pipeline": "gone"})
    schedules_fire(now=due + minutes(2))
    run = ScheduleRun.objects.get(schedule=schedule, due_at=due + minutes(2))
    assert run.outcome == RunOutcome.FAILED
    assert "no starter for 'pipeline'" in run.error
    assert not Task.objects.exists()


def test_a_registered_kind_starts_through_its_starter(world, admin, monkeypatch):
    """What the workflows app registers: a starter that returns a `Submitted`."""
    seen: list[ScheduledStart] = []

    def start(request: ScheduledStart) -> Submitted:
        seen.append(request)
        return task_submit(tenant_id=request.tenant_id, requester_id=request.requester_id,
                           agent="support", goal=f"workflow {request.name}",
                           input=request.input, script=[{"final": {}}],
                           idempotency_key=request.idempotency_key, actor=request.actor)

    monkeypatch.setitem(starters._kinds, "workflow",
                        starters.TargetKind(start=start, exists=lambda t, n: n == "etl"))
    due = minute_now()
    schedule = make_schedule(world.tenant, admin, due_at=due, target={"workflow": "etl"},
                             script=None, input={"day": 1})
    schedules_fire(now=due)
    [run] = ScheduleRun.objects.filter(schedule=schedule)
    assert run.outcome == RunOutcome.STARTED
    assert [(s.name, s.input, s.goal, s.idempotency_key) for s in seen] == [
        ("etl", {"day": 1}, "", run_key(schedule, due))]
    assert run.task.goal == "workflow etl"
