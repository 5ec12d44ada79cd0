"""Child tasks through the API: a task shows its parent and children, the list
filters by parent, and a profile that would call itself back is a 400."""
from __future__ import annotations

from typing import Any

import pytest

from tasks_app.models import AgentProfile, Task
from tasks_app.runner.loop import run_slice
from tasks_app.services.admission import admit_created_tasks
from tests.fakes.runtime import add_agent

pytestmark = pytest.mark.django_db(transaction=True)


def _started(main: Any) -> tuple[Task, Task]:
    """A parent task waiting on the child it started (the real runner)."""
    add_agent(main.tenant, "helper", [], model={"backend": "scripted",
                                                "script": [{"ask": "Which one?"}]})
    add_agent(main.tenant, "boss", ["agent:helper"])
    response = main.client("requester").post(
        "/api/v1/tasks", {"agent": "boss", "goal": "delegate", "script": [
            {"tool": "agent:helper", "args": {"goal": "pick one", "input": {"n": 2}}}]},
        format="json")
    assert response.status_code == 201, response.json()
    parent = Task.objects.get(pk=response.json()["id"])
    admit_created_tasks()
    assert run_slice(parent.pk).ended == "later"
    return parent, Task.objects.get(parent=parent)


def test_a_task_shows_its_parent_and_its_children(main):
    parent, child = _started(main)
    reader = main.client("requester")
    shown = reader.get(f"/api/v1/tasks/{parent.pk}").json()
    assert (shown["parent"], shown["children"]) == (None, [child.pk])
    shown = reader.get(f"/api/v1/tasks/{child.pk}").json()
    assert (shown["parent"], shown["children"], shown["agent"]) == (parent.pk, [], "helper")
    listed = reader.get(f"/api/v1/tasks?parent={parent.pk}").json()
    assert [t["id"] for t in listed["results"]] == [child.pk]
    assert listed["results"][0]["parent"] == parent.pk
    assert reader.get("/api/v1/tasks?parent=abc").status_code == 400


def test_another_tenant_sees_no_children(main, other):
    parent, _child = _started(main)
    listed = other.client("requester").get(f"/api/v1/tasks?parent={parent.pk}").json()
    assert listed["results"] == []


def test_a_profile_whose_agents_call_it_back_is_a_400_on_tools(main):
    admin = main.client("admin")
    created = admin.post("/api/v1/agents", {"name": "first", "tools": ["lookup_order"]},
                         format="json")
    assert created.status_code == 201, created.json()
    created = admin.post("/api/v1/agents", {"name": "second", "tools": ["agent:first"]},
                         format="json")
    assert created.status_code == 201, created.json()
    refused = admin.patch("/api/v1/agents/first", {"tools": ["agent:second"]}, format="json")
    assert refused.status_code == 400, refused.json()
    assert refused.json()["error"]["details"]["tools"] == [
        "agent:second: first -> second -> first calls 'first' back (a cycle)"]
    assert AgentProfile.objects.get(tenant=main.tenant, name="first").tools == ["lookup_order"]
