"""The console's Schedules page: everyone in the tenant sees the schedules with
their next and last runs; operators and admins pause and resume them."""
from __future__ import annotations

import pytest
from django.test import Client

from accounts_app.models import Role
from schedules_app.models import Schedule
from schedules_app.services.firing import schedules_fire
from tasks_app.models import Task
from tests.factories import TenantFactory, make_user

from .conftest import make_schedule, minute_now

pytestmark = pytest.mark.django_db


def client_for(user) -> Client:  # type: ignore[no-untyped-def]
    c = Client()
    c.force_login(user)
    return c


def test_the_page_lists_next_and_last_runs(world, admin):
    due = minute_now()
    make_schedule(world.tenant, admin, name="nightly", due_at=due)
    make_schedule(world.tenant, admin, name="weekly", cron="0 9 * * mon", timezone="Europe/Paris")
    schedules_fire(now=due)
    task = Task.objects.get()

    page = client_for(world.users[Role.REQUESTER]).get("/schedules/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'href="/schedules/" aria-current="page">Schedules</a>' in html
    assert "nightly" in html and "weekly" in html and "Europe/Paris" in html
    assert f'href="/tasks/{task.pk}/">task {task.pk}</a>' in html
    assert 'data-outcome="started"' in html and "never" in html  # weekly has not run
    assert "Pause nightly" not in html  # a requester only reads


@pytest.mark.parametrize("role", [Role.OPERATOR, Role.ADMIN])
def test_operators_and_admins_pause_and_resume(world, admin, role):
    make_schedule(world.tenant, admin, name="nightly")
    c = client_for(world.users[role])
    assert "Pause nightly" in c.get("/schedules/").content.decode()

    paused = c.post("/schedules/nightly/pause/")
    assert paused.status_code == 302 and paused["Location"] == "/schedules/"
    assert Schedule.objects.get().paused
    page = c.get("/schedules/").content.decode()
    assert "Schedule nightly paused" in page and "Resume nightly" in page

    assert c.post("/schedules/nightly/resume/").status_code == 302
    assert not Schedule.objects.get().paused


@pytest.mark.parametrize("role", [Role.REQUESTER, Role.REVIEWER])
def test_other_roles_may_not_pause(world, admin, role):
    make_schedule(world.tenant, admin, name="nightly")
    refused = client_for(world.users[role]).post("/schedules/nightly/pause/")
    assert refused.status_code == 403
    assert not Schedule.objects.get().paused


def test_another_tenants_schedule_is_out_of_reach(world, admin):
    make_schedule(world.tenant, admin, name="nightly")
    stranger = client_for(make_user(TenantFactory(name="t-elsewhere"), Role.ADMIN))
    assert "nightly" not in stranger.get("/schedules/").content.decode()
    assert stranger.post("/schedules/nightly/pause/").status_code == 404
    assert not Schedule.objects.get().paused
