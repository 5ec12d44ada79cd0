"""Tenant isolation: another tenant's objects are 404 on every path (even for
an admin), never appear in a list whatever the filter, and another tenant's
agent profile or tool cannot be used."""

from __future__ import annotations

from typing import Any

import pytest

from accounts_app.models import Role
from tasks_app.machine import TaskStatus
from tasks_app.models import ContextSummary, Event, Task
from tests.factories import AgentFactory, ToolFactory

from .conftest import Tenancy

ADM = Role.ADMIN


@pytest.fixture
def foreign(other: Tenancy) -> dict[str, Any]:
    """One object of every type in the other tenant, each in a state where the
    action would succeed if it were the caller's own."""
    waiting_task, question = other.waiting_for_input()
    approval_task, approval = other.waiting_for_approval()
    rec_task, rec = other.in_reconciliation()
    escalated = other.escalated()
    summarized = other.summarized()
    ToolFactory(tenant=other.tenant, name="other_only_tool")
    AgentFactory(tenant=other.tenant, name="other-only-agent", tools=["lookup_order"])
    return {
        "waiting": waiting_task,
        "question": question,
        "approval_task": approval_task,
        "approval": approval,
        "rec_task": rec_task,
        "rec": rec,
        "escalated": escalated,
        "summarized": summarized,
    }


def test_every_path_of_another_tenants_objects_is_a_404(
    main: Tenancy, other: Tenancy, foreign: dict[str, Any]
) -> None:
    waiting, escalated, approval, rec, summarized = (
        foreign["waiting"].pk,
        foreign["escalated"].pk,
        foreign["approval"].pk,
        foreign["rec"].pk,
        foreign["summarized"].pk,
    )
    attempts = [
        ("get", f"/api/v1/tasks/{waiting}", None),
        ("get", f"/api/v1/tasks/{waiting}/steps", None),
        ("get", f"/api/v1/tasks/{waiting}/events", None),
        ("post", f"/api/v1/tasks/{waiting}/cancel", {}),
        ("post", f"/api/v1/tasks/{waiting}/input", {"answer": "42"}),
        ("post", f"/api/v1/tasks/{escalated}/resume", {}),
        ("post", f"/api/v1/tasks/{escalated}/fail", {"reason": "x"}),
        ("get", f"/api/v1/tasks/{summarized}/summaries", None),
        ("post", f"/api/v1/tasks/{summarized}/summaries/1/rollback", {}),
        ("post", f"/api/v1/tasks/{summarized}/summaries/0/rollback", {}),
        ("get", f"/api/v1/approvals/{approval}", None),
        ("post", f"/api/v1/approvals/{approval}/approve", {}),
        ("post", f"/api/v1/approvals/{approval}/reject", {"comment": "no"}),
        ("post", f"/api/v1/approvals/{approval}/respond", {"output": {"refund_id": "x"}}),
        ("get", f"/api/v1/reconciliations/{rec}", None),
        (
            "post",
            f"/api/v1/reconciliations/{rec}/resolve",
            {"outcome": "retry", "comment": "again"},
        ),
        ("post", f"/api/v1/reconciliations/{rec}/requery", None),
        ("get", "/api/v1/tools/other_only_tool", None),
        ("patch", "/api/v1/tools/other_only_tool", {"enabled": False}),
        ("get", "/api/v1/agents/other-only-agent", None),
        ("patch", "/api/v1/agents/other-only-agent", {"enabled": False}),
    ]
    client = main.client(ADM)
    for method, url, body in attempts:
        response = getattr(client, method)(url, body, format="json")
        assert response.status_code == 404, f"{method} {url}: {response.status_code}"
        assert response.json()["error"]["code"] == "not_found"
    # ...and nothing of the other tenant moved.
    for key in ("waiting", "approval_task", "rec_task", "escalated", "summarized"):
        task = foreign[key]
        assert Task.objects.get(pk=task.pk).version == task.version
    assert list(
        ContextSummary.objects.filter(task=foreign["summarized"]).values_list("version", "active")
    ) == [(1, True), (2, True)]
    assert not Event.objects.filter(type="summary_rolled_back").exists()
    assert other.tenant.tools.get(name="other_only_tool").enabled
    assert other.tenant.agents.get(name="other-only-agent").enabled


def test_lists_never_show_another_tenants_objects(
    main: Tenancy, other: Tenancy, foreign: dict[str, Any]
) -> None:
    mine = main.created_task()
    client = main.client(ADM)
    trace = foreign["waiting"].trace_id
    queries = {
        "/api/v1/tasks": None,
        f"/api/v1/tasks?trace_id={trace}": [],
        "/api/v1/tasks?status=WAITING_FOR_INPUT&status=WAITING_FOR_APPROVAL": [],
        "/api/v1/tasks?agent=support": None,
        "/api/v1/approvals": [],
        f"/api/v1/approvals?task={foreign['approval_task'].pk}": [],
        "/api/v1/reconciliations": [],
        f"/api/v1/reconciliations?task={foreign['rec_task'].pk}": [],
        "/api/v1/questions": [],
        f"/api/v1/questions?task={foreign['waiting'].pk}": [],
    }
    foreign_task_ids = set(Task.objects.filter(tenant=other.tenant).values_list("id", flat=True))
    for url, expected in queries.items():
        results = client.get(url).json()["results"]
        task_ids = {r["id"] if "/tasks" in url else r["task"] for r in results}
        assert not task_ids & foreign_task_ids, url
        if expected is not None:
            assert results == expected, url
    assert [t["id"] for t in client.get("/api/v1/tasks").json()["results"]] == [mine.pk]
    assert "other_only_tool" not in {t["name"] for t in client.get("/api/v1/tools").json()}
    assert "other-only-agent" not in {a["name"] for a in client.get("/api/v1/agents").json()}


def test_bulk_cancel_never_reaches_another_tenant(
    main: Tenancy, other: Tenancy, foreign: dict[str, Any]
) -> None:
    response = main.client(ADM).post(
        "/api/v1/tasks/bulk-cancel", {"trace_id": foreign["waiting"].trace_id}, format="json"
    )
    assert response.status_code == 200
    assert response.json()["matched"] == 0
    response = main.client(ADM).post(
        "/api/v1/tasks/bulk-cancel",
        {"status": ["WAITING_FOR_INPUT", "WAITING_FOR_HUMAN"]},
        format="json",
    )
    assert response.json()["canceled"] == []
    assert Task.objects.get(pk=foreign["waiting"].pk).status == TaskStatus.WAITING_FOR_INPUT


def test_another_tenants_agent_cannot_be_used(main: Tenancy, other: Tenancy) -> None:
    AgentFactory(tenant=other.tenant, name="other-only-agent")
    response = main.client(Role.REQUESTER).post(
        "/api/v1/tasks",
        {"goal": "g", "agent": "other-only-agent", "script": [{"final": {}}]},
        format="json",
    )
    assert response.status_code == 400
    assert "agent" in response.json()["error"]["details"]
    assert not Task.objects.filter(tenant=main.tenant).exists()


def test_another_tenants_tool_cannot_be_used(main: Tenancy, other: Tenancy) -> None:
    ToolFactory(tenant=other.tenant, name="other_only_tool")
    client = main.client(ADM)
    response = client.post(
        "/api/v1/agents", {"name": "borrower", "tools": ["other_only_tool"]}, format="json"
    )
    assert response.status_code == 400
    assert "no tool named 'other_only_tool'" in str(response.json()["error"]["details"]["tools"])
    response = client.patch(
        "/api/v1/agents/support", {"tools": ["lookup_order", "other_only_tool"]}, format="json"
    )
    assert response.status_code == 400
    assert "other_only_tool" not in main.tenant.agents.get(name="support").tools
    response = client.post(
        "/api/v1/tools",
        {
            "name": "undo",
            "kind": "http",
            "url": "http://127.0.0.1:9/x",
            "compensation_tool": "other_only_tool",
        },
        format="json",
    )
    assert response.status_code == 400
    assert "compensation_tool" in response.json()["error"]["details"]


def test_the_same_name_in_two_tenants_resolves_to_the_callers_own(
    main: Tenancy, other: Tenancy
) -> None:
    other.tenant.tools.filter(name="lookup_order").update(description="the other one")
    body = main.client(ADM).get("/api/v1/tools/lookup_order").json()
    assert body["description"] != "the other one"
