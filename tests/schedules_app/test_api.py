"""The schedules API: operators and admins manage schedules, everyone in the
tenant reads them; bad input is a 400 naming the field and writes nothing;
another tenant's schedule is a 404."""
from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from accounts_app.models import Role
from audit_app.models import AuditEntry
from schedules_app import starters
from schedules_app.models import Schedule, ScheduleRun
from schedules_app.services.firing import schedules_fire
from schedules_app.starters import ScheduledStart
from tasks_app.models import Task
from tasks_app.services.demo import demo_agent_ensure
from tests.factories import actor_of

from .conftest import FINAL, make_schedule, minute_now

pytestmark = pytest.mark.django_db

URL = "/api/v1/schedules"
BODY = {"name": "hourly-check", "target": {"agent": "support"}, "input": {"order": "A-1"},
        "script": FINAL, "cron": "0 * * * *", "timezone": "Europe/Paris",
        "overlap": "skip", "catch_up": "one"}


def audit(action: str) -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(kind="schedule", action=action))


@pytest.mark.parametrize("role", [Role.ADMIN, Role.OPERATOR])
def test_admins_and_operators_create_schedules(main, role):
    response = main.client(role).post(URL, BODY, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["target"] == {"agent": "support"}
    assert body["goal"] == "Scheduled run of support"
    assert (body["cron"], body["timezone"], body["overlap"], body["catch_up"]) == (
        "0 * * * *", "Europe/Paris", "skip", "one")
    assert body["last_due_at"] is None
    assert body["created_by"] == main.users[role].username
    next_due = parse_datetime(body["next_due_at"])
    assert next_due > timezone.now()
    assert (next_due.minute, next_due.second) == (0, 0)
    [entry] = audit("created")
    assert (entry.name, entry.actor, entry.tenant_id) == (
        "hourly-check", main.users[role].username, main.tenant.pk)


@pytest.mark.parametrize("role", [Role.REQUESTER, Role.REVIEWER])
def test_requesters_and_reviewers_read_but_do_not_manage(main, role):
    make_schedule(main.tenant, main.users[Role.ADMIN], name="nightly")
    client = main.client(role)
    assert [s["name"] for s in client.get(URL).json()] == ["nightly"]
    assert client.get(f"{URL}/nightly").status_code == 200
    assert client.get(f"{URL}/nightly/runs").status_code == 200
    assert client.post(URL, BODY, format="json").status_code == 403
    assert client.patch(f"{URL}/nightly", {"cron": "5 * * * *"}, format="json").status_code == 403
    assert client.post(f"{URL}/nightly/pause").status_code == 403
    assert client.delete(f"{URL}/nightly").status_code == 403
    assert Schedule.objects.get().paused is False


@pytest.mark.parametrize("change, field", [
    ({"cron": "61 * * * *"}, "cron"),
    ({"cron": "* * * *"}, "cron"),
    ({"cron": "0 0 30 2 *"}, "cron"),
    ({"cron": "@daily"}, "cron"),
    ({"timezone": "Mars/Olympus_Mons"}, "timezone"),
    ({"target": {"agent": "nobody"}}, "target"),
    ({"target": {"agent": "theirs"}}, "target"),  # another tenant's agent
    ({"target": {"workflow": "etl"}}, "target"),  # no starter registered for workflows here
    ({"target": {"agent": "support", "workflow": "etl"}}, "target"),
    ({"target": "support"}, "target"),
    ({"input": {"blob": "x" * 70_000}}, "input"),
    ({"input": ["not", "an", "object"]}, "input"),
    ({"script": None}, "script"),  # `support` is scripted: its runs need one
    ({"overlap": "sometimes"}, "overlap"),
    ({"catch_up": "every"}, "catch_up"),
    ({"name": "no spaces"}, "name"),
])
def test_bad_input_is_a_400_naming_the_field_and_writes_nothing(main, other, change, field):
    demo_agent_ensure(other.tenant, name="theirs")
    response = main.client(Role.ADMIN).post(URL, {**BODY, **change}, format="json")
    assert response.status_code == 400, response.json()
    error = response.json()["error"]
    assert error["code"] == "invalid"
    assert field in error["details"], error
    assert not Schedule.objects.exists()
    assert not audit("created")


def test_a_second_schedule_of_the_same_name_is_a_conflict(main):
    client = main.client(Role.ADMIN)
    assert client.post(URL, BODY, format="json").status_code == 201
    response = client.post(URL, BODY, format="json")
    assert response.status_code == 409
    assert Schedule.objects.count() == 1


def test_change_a_schedule(main):
    client = main.client(Role.OPERATOR)
    before = client.post(URL, BODY, format="json").json()
    response = client.patch(f"{URL}/hourly-check", {"cron": "*/5 * * * *", "timezone": "UTC",
                                                     "input": {"order": "A-2"}}, format="json")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert (body["cron"], body["input"]) == ("*/5 * * * *", {"order": "A-2"})
    assert parse_datetime(body["next_due_at"]) <= parse_datetime(before["next_due_at"])
    assert parse_datetime(body["next_due_at"]).minute % 5 == 0
    [entry] = audit("updated")
    assert {d["path"] for d in entry.diff} >= {"cron", "timezone", "input.order"}

    refused = client.patch(f"{URL}/hourly-check", {"cron": "every minute"}, format="json")
    assert refused.status_code == 400 and "cron" in refused.json()["error"]["details"]
    renamed = client.patch(f"{URL}/hourly-check", {"name": "other"}, format="json")
    assert renamed.status_code == 400 and "name" in renamed.json()["error"]["details"]
    assert Schedule.objects.get().cron == "*/5 * * * *"


def test_a_new_target_gets_its_own_default_goal(main):
    demo_agent_ensure(main.tenant, name="triage")
    client = main.client(Role.ADMIN)
    client.post(URL, BODY, format="json")
    response = client.patch(f"{URL}/hourly-check", {"target": {"agent": "triage"}},
                            format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["goal"] == "Scheduled run of triage"
    kept = client.patch(f"{URL}/hourly-check", {"goal": "Check the queue"}, format="json")
    assert kept.json()["goal"] == "Check the queue"
    again = client.patch(f"{URL}/hourly-check", {"target": {"agent": "support"}}, format="json")
    assert again.json()["goal"] == "Check the queue"


def test_a_workflow_target_when_its_app_registered_the_kind(main, monkeypatch):
    def start(request: ScheduledStart) -> Any:
        raise AssertionError("not fired here")

    monkeypatch.setitem(starters._kinds, "workflow",
                        starters.TargetKind(start=start, exists=lambda t, n: n == "etl"))
    client = main.client(Role.OPERATOR)
    workflow = {"name": "etl-nightly", "target": {"workflow": "etl"}, "input": {"day": 1},
                "cron": "0 3 * * *"}
    created = client.post(URL, workflow, format="json")
    assert created.status_code == 201, created.json()
    assert (created.json()["goal"], created.json()["script"]) == ("", None)
    for change, field in (({"target": {"workflow": "missing"}}, "target"),
                          ({"goal": "a goal"}, "goal"), ({"script": FINAL}, "script")):
        refused = client.post(URL, {**workflow, "name": "other", **change}, format="json")
        assert refused.status_code == 400
        assert field in refused.json()["error"]["details"]
    assert Schedule.objects.count() == 1


def test_pause_and_resume(main):
    due = minute_now()
    schedule = make_schedule(main.tenant, main.users[Role.ADMIN], name="nightly", due_at=due)
    client = main.client(Role.OPERATOR)
    paused = client.post(f"{URL}/nightly/pause")
    assert paused.status_code == 200 and paused.json()["paused"] is True
    schedules_fire(now=due)
    assert not ScheduleRun.objects.exists()

    resumed = client.post(f"{URL}/nightly/resume")
    assert resumed.status_code == 200 and resumed.json()["paused"] is False
    # from the next due time after now: the one passed while paused does not run
    next_due = parse_datetime(resumed.json()["next_due_at"])
    assert next_due > timezone.now()
    assert schedules_fire(now=next_due - timedelta(seconds=1)) == {}
    assert [e.action for e in AuditEntry.objects.filter(kind="schedule").order_by("id")] == [
        "created", "paused", "resumed"]
    schedule.refresh_from_db()
    assert not schedule.paused


def test_runs_show_the_task_each_due_time_started(main):
    due = minute_now()
    make_schedule(main.tenant, main.users[Role.ADMIN], name="nightly", due_at=due)
    schedules_fire(now=due)
    response = main.client(Role.REQUESTER).get(f"{URL}/nightly/runs")
    assert response.status_code == 200
    [run] = response.json()["results"]
    task = Task.objects.get()
    assert (parse_datetime(run["due_at"]), run["outcome"], run["task_id"], run["task_status"]) == (
        due, "started", task.pk, "CREATED")
    detail = main.client(Role.REQUESTER).get(f"{URL}/nightly").json()
    assert parse_datetime(detail["last_due_at"]) == due


def test_delete_keeps_the_tasks_it_started(main):
    due = minute_now()
    make_schedule(main.tenant, main.users[Role.ADMIN], name="nightly", due_at=due)
    schedules_fire(now=due)
    assert main.client(Role.ADMIN).delete(f"{URL}/nightly").status_code == 204
    assert not Schedule.objects.exists() and not ScheduleRun.objects.exists()
    assert Task.objects.count() == 1
    assert audit("deleted")
    assert main.client(Role.ADMIN).get(f"{URL}/nightly").status_code == 404


def test_another_tenants_schedule_is_a_404(main, other):
    make_schedule(main.tenant, main.users[Role.ADMIN], name="nightly")
    theirs: Any = other.client(Role.ADMIN)
    assert theirs.get(URL).json() == []
    for response in (theirs.get(f"{URL}/nightly"), theirs.get(f"{URL}/nightly/runs"),
                     theirs.patch(f"{URL}/nightly", {"cron": "5 * * * *"}, format="json"),
                     theirs.post(f"{URL}/nightly/pause"), theirs.post(f"{URL}/nightly/resume"),
                     theirs.delete(f"{URL}/nightly")):
        assert response.status_code == 404, response.json()
    schedule = Schedule.objects.get()
    assert (schedule.cron, schedule.paused) == ("* * * * *", False)
    # the same name in their own tenant is theirs to take
    demo_agent_ensure(other.tenant)
    assert theirs.post(URL, {**BODY, "name": "nightly"}, format="json").status_code == 201


def test_the_creator_is_the_runs_requester(main):
    operator = main.users[Role.OPERATOR]
    schedule = make_schedule(main.tenant, operator, name="nightly", due_at=minute_now())
    schedules_fire(now=schedule.next_due_at)
    assert Task.objects.get().requester_id == operator.pk
    assert actor_of(operator).user_id == schedule.created_by_id
