"""The agents page's versions: two versions side by side on their tasks (in a
fixed number of grouped queries), the release buttons (release, promote, roll
back) through the real services, refusals re-rendered with their reason, the
roles and the tenant boundary; the task list filters by agent version."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from accounts_app.models import Role
from tasks_app.console.version_stats import versions_compared
from tasks_app.machine import TaskStatus
from tasks_app.models import AgentProfile, AgentReleaseEntry, Task
from tasks_app.services.agents import agent_create, agent_update
from tasks_app.services.releases import release_set
from tasks_app.services.tasks import task_cancel
from tests.factories import TenantFactory, actor_of, make_user, submit
from tests.helpers import drive

pytestmark = pytest.mark.django_db


def client_for(user) -> Client:  # type: ignore[no-untyped-def]
    c = Client()
    c.force_login(user)
    return c


def _triage(world) -> AgentProfile:  # type: ignore[no-untyped-def]
    """`triage` with versions 1-3, version 1 current; two tasks on version 1
    (one succeeded, one canceled) and two on version 3 (one succeeded, one
    waiting on a question)."""
    admin = actor_of(world.users[Role.ADMIN])
    t = world.tenant.pk
    agent_create(tenant_id=t, name="triage", actor=admin, tools=["lookup_order"],
                 model={"backend": "scripted", "name": "scripted", "system_prompt": "Brief."})
    agent_update(tenant_id=t, name="triage", changes={"max_steps": 20}, actor=admin)
    agent_update(tenant_id=t, name="triage", changes={"max_steps": 30}, actor=admin)
    drive(submit(world.tenant, [{"final": {"ok": 1}}], agent="triage").pk)
    task_cancel(task_id=submit(world.tenant, [{"final": {}}], agent="triage").pk, actor=admin)
    release_set(tenant_id=t, name="triage", candidate=3, percent=100, actor=admin)
    drive(submit(world.tenant, [{"final": {}}], agent="triage").pk)
    asked = drive(submit(world.tenant, [{"ask": "Which order?"}], agent="triage").pk)
    assert asked.status == TaskStatus.WAITING_FOR_INPUT and asked.agent_version == 3
    release_set(tenant_id=t, name="triage", candidate=3, percent=20, actor=admin)
    return AgentProfile.objects.get(tenant=world.tenant, name="triage")


def test_the_page_compares_two_versions_in_grouped_queries(world):
    agent = _triage(world)
    with CaptureQueriesContext(connection) as queries:
        one, three = versions_compared(agent, [1, 3])
    assert len(queries.captured_queries) == 2  # one per metric family, not one per task
    assert (one.tasks, one.finished, one.succeeded, one.success_rate) == (2, 2, 1, 0.5)
    assert (three.tasks, three.finished, three.succeeded, three.success_rate) == (2, 1, 1, 1.0)
    assert (three.human["questions"], three.interventions, one.interventions) == (1, 1, 0)
    assert three.avg_steps == 1.0 and three.avg_model_calls == 1.0

    html = client_for(world.users[Role.OPERATOR]).get("/agents/triage/").content.decode()
    assert "Version 1" in html and "Version 3" in html
    assert "50 %" in html and "100 %" in html  # success rates side by side
    assert "candidate · 20 %" in html
    assert "Promote version 3" not in html  # operators read; admins act

    chosen = client_for(world.users[Role.OPERATOR]).get("/agents/triage/?compare=2&compare=3")
    assert [s.number for s in chosen.context["comparison"]] == [2, 3]
    junk = client_for(world.users[Role.OPERATOR]).get("/agents/triage/?compare=x&compare=99")
    assert [s.number for s in junk.context["comparison"]] == [1, 3]  # the default pair


def test_the_release_buttons_work_and_say_what_they_do(world):
    _triage(world)
    c = client_for(world.users[Role.ADMIN])
    page = c.get("/agents/triage/").content.decode()
    assert "Promote version 3" in page and "Roll back" in page

    changed = c.post("/agents/triage/release/", {"candidate": "3", "percent": "40"})
    assert changed.status_code == 302
    agent = AgentProfile.objects.get(tenant=world.tenant, name="triage")
    assert (agent.release_candidate, agent.release_percent) == (3, 40)

    running = Task.objects.filter(agent=agent, status=TaskStatus.WAITING_FOR_INPUT).get()
    promoted = c.post("/agents/triage/promote/", follow=True)
    assert "Version 3 promoted" in promoted.content.decode()
    agent.refresh_from_db()
    assert (agent.current_version, agent.release_candidate) == (3, None)
    assert submit(world.tenant, [{"final": {}}], agent="triage").agent_version == 3

    back = c.post("/agents/triage/rollback/", {"version": "1"}, follow=True)
    assert "every new task gets version 4" in back.content.decode()
    agent.refresh_from_db()
    assert (agent.current_version, agent.latest_version, agent.max_steps) == (4, 4, 50)  # v1's
    assert submit(world.tenant, [{"final": {}}], agent="triage").agent_snapshot["budget"][
        "max_steps"] == 50
    # The task that was waiting all along kept its version and snapshot.
    kept = Task.objects.get(pk=running.pk)
    assert (kept.agent_version, kept.agent_snapshot) == (3, running.agent_snapshot)
    actions = list(AgentReleaseEntry.objects.filter(agent=agent).order_by("id")
                   .values_list("action", "actor"))
    assert [a for a, _ in actions] == ["started", "changed", "changed", "promoted", "rolled_back"]
    assert actions[-1][1] == world.users[Role.ADMIN].username

    # Refused: the reason on the page, its status, nothing changed.
    same = c.post("/agents/triage/release/", {"candidate": "4", "percent": "10"})
    assert same.status_code == 400
    assert "already the current version" in same.content.decode()
    over = c.post("/agents/triage/release/", {"candidate": "3", "percent": "101"})
    assert over.status_code == 400 and "Not applied" in over.content.decode()
    agent.refresh_from_db()
    assert (agent.current_version, agent.release_candidate) == (4, None)


def test_only_admins_release_and_other_tenants_see_nothing(world):
    _triage(world)
    for role in (Role.OPERATOR, Role.REQUESTER):
        c = client_for(world.users[role])
        assert c.post("/agents/triage/promote/", {"version": "3"}).status_code == 403
        assert c.post("/agents/triage/rollback/", {}).status_code == 403
    agent = AgentProfile.objects.get(tenant=world.tenant, name="triage")
    assert (agent.current_version, agent.release_candidate) == (1, 3)

    stranger = client_for(make_user(TenantFactory(name="t-else"), Role.ADMIN))
    assert stranger.get("/agents/triage/").status_code == 404
    assert stranger.post("/agents/triage/promote/", {"version": "3"}).status_code == 404


def test_the_task_list_filters_by_agent_version(world):
    _triage(world)
    c = client_for(world.users[Role.OPERATOR])
    listed = c.get("/tasks/?agent=triage&agent_version=3")
    assert {t.agent_version for t in listed.context["tasks"]} == {3}
    assert len(listed.context["tasks"]) == 2
    assert "agent version 3" in listed.context["filter_text"]


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_an_admin_promotes_the_candidate_from_the_page_in_a_browser(world, page_as):
    _triage(world)
    admin = page_as(world.users[Role.ADMIN])
    admin.goto("/agents/triage/")
    table = admin.page.locator("table.version-compare")
    assert "Version 1" in table.text_content() and "Version 3" in table.text_content()
    admin.shot("agent-versions")
    admin.page.get_by_role("button", name="Promote version 3").click()
    admin.page.wait_for_selector(".flash-success")
    assert "Version 3 promoted" in admin.page.locator(".flash-success").inner_text()
    agent = AgentProfile.objects.get(tenant=world.tenant, name="triage")
    assert (agent.current_version, agent.release_candidate) == (3, None)
