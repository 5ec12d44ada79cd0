"""API keys with scopes, over HTTP and through the runner: a key narrows its
user's scope and never widens it; the task records the key that submitted it;
an agent outside the key's scope is refused as the user's own scope refuses
it; a tool outside it waits for an authorization; MCP lists what the key may
run; only the key's owner or an admin sets a scope, audited."""
from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from accounts_app.models import ApiKey, Role
from accounts_app.services.accounts import api_key_create, api_key_in_use
from approvals_app.models import Approval, Decision
from approvals_app.services.decisions import approval_decide
from approvals_app.services.rules import scope_set
from audit_app.models import AuditEntry
from mcp_server_app.catalog import run_tools
from mcp_server_app.server import caller_of_key
from tasks_app.machine import TaskStatus
from tasks_app.models import AgentProfile, Task
from tasks_app.services.demo import demo_agent_ensure
from tests.api.conftest import Tenancy
from tests.factories import actor_of
from tests.helpers import drive
from tools_app.models import DemoRefund

pytestmark = pytest.mark.django_db(transaction=True)

FINAL = {"final": {"ok": True}}
REFUND = {"tool": "issue_refund", "reason": "lost",
          "args": {"order_id": "A-1", "amount_cents": 1000, "reason": "lost"}}


def keyed(user: Any) -> tuple[APIClient, ApiKey]:
    raw = api_key_create(user=user)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {raw}")
    key = ApiKey.objects.get(prefix=raw[:12])
    return client, key


def scoped(t: Tenancy, user: Any, **scope: list[str]) -> tuple[APIClient, ApiKey]:
    """A new key of `user`, given `scope` by its owner over the API."""
    client, key = keyed(user)
    owner, _ = keyed(user)
    response = owner.patch(f"/api/v1/api-keys/{key.pk}", scope, format="json")
    assert response.status_code == 200, response.content
    return client, key


def submit(client: APIClient, agent: str, script: list[Any]) -> Any:
    return client.post("/api/v1/tasks", {"agent": agent, "goal": "g", "script": script},
                       format="json")


def test_a_key_scoped_to_one_agent_cannot_submit_another_while_an_unscoped_key_can(
        main: Tenancy) -> None:
    demo_agent_ensure(main.tenant, name="triage")
    one_agent, key = scoped(main, main.requester, agents=["triage"])

    refused = submit(one_agent, "support", [FINAL])
    assert refused.status_code == 403, refused.content
    error = refused.json()["error"]
    assert error["code"] == "outside_scope" and "agent" in error["details"]
    assert not Task.objects.filter(agent__name="support").exists()

    allowed = submit(one_agent, "triage", [FINAL])
    assert allowed.status_code == 201, allowed.content
    assert Task.objects.get(pk=allowed.json()["id"]).api_key_id == key.pk

    unscoped, plain = keyed(main.requester)
    created = submit(unscoped, "support", [FINAL])
    assert created.status_code == 201, created.content
    detail = unscoped.get(f"/api/v1/tasks/{created.json()['id']}").json()
    assert detail["api_key"] == plain.prefix  # the task says which key submitted it
    console = Client()
    console.force_login(main.requester)
    page = console.get(f"/tasks/{created.json()['id']}/")
    assert page.status_code == 200 and f"{plain.prefix}…".encode() in page.content

    batch = one_agent.post("/api/v1/tasks/batch", {"tasks": [
        {"agent": "triage", "goal": "g", "script": [FINAL], "idempotency_key": "b-1"},
        {"agent": "support", "goal": "g", "script": [FINAL], "idempotency_key": "b-2"}]},
        format="json")
    assert batch.status_code == 400, batch.content  # all or none: the support task is refused
    assert [t["index"] for t in batch.json()["error"]["details"]["tasks"]] == [1]
    assert not Task.objects.filter(idempotency_key__in=["b-1", "b-2"]).exists()
    batch = one_agent.post("/api/v1/tasks/batch", {"tasks": [
        {"agent": "triage", "goal": "g", "script": [FINAL], "idempotency_key": "b-3"}]},
        format="json")
    assert batch.status_code == 201, batch.content
    assert Task.objects.get(idempotency_key="b-3").api_key_id == key.pk


def test_a_key_scoped_to_tools_makes_a_call_outside_them_wait_for_an_authorization(
        main: Tenancy) -> None:
    client, key = scoped(main, main.requester, tools=["lookup_order"])
    created = submit(client, "support", [REFUND, REFUND, FINAL])
    assert created.status_code == 201, created.content
    task = drive(created.json()["id"])
    assert task.status == TaskStatus.WAITING_FOR_APPROVAL
    authz = Approval.objects.get(task=task, status=Decision.PENDING)
    assert authz.kind == "authorization" and authz.tool == "issue_refund"
    assert not DemoRefund.objects.exists()

    approval_decide(approval_id=authz.pk, tenant_id=main.tenant.pk,
                    actor=actor_of(main.users[Role.ADMIN]), decision="approve",
                    expected_version=task.version)
    task = drive(task.pk)
    assert DemoRefund.objects.count() == 1  # the call ran once granted
    # granted for this task: its next refund waits for the tool's own approval only
    assert task.status == TaskStatus.WAITING_FOR_APPROVAL
    assert Approval.objects.get(task=task, status=Decision.PENDING).kind == "tool"

    # the same user's unscoped key: the refund waits for the tool's approval at once
    plain, _ = keyed(main.requester)
    other = drive(submit(plain, "support", [REFUND, FINAL]).json()["id"])
    assert Approval.objects.get(task=other, status=Decision.PENDING).kind == "tool"


def test_a_key_cannot_widen_its_users_scope(main: Tenancy) -> None:
    admin = actor_of(main.users[Role.ADMIN])
    scope_set(tenant_id=main.tenant.pk, username=main.requester.username,
              data={"agents": ["support"], "tools": ["lookup_order"]}, actor=admin)
    owner, key = keyed(main.requester)
    wider = owner.patch(f"/api/v1/api-keys/{key.pk}",
                        {"agents": ["support", "triage"], "tools": ["issue_refund"]},
                        format="json")
    assert wider.status_code == 400, wider.content
    details = wider.json()["error"]["details"]
    assert "triage" in details["agents"][0] and "issue_refund" in details["tools"][0]
    key.refresh_from_db()
    assert key.agents == [] and key.tools == []
    assert not AuditEntry.objects.filter(kind="api_key", action="updated").exists()

    bad = owner.patch(f"/api/v1/api-keys/{key.pk}", {"agents": "support"}, format="json")
    assert bad.status_code == 400 and "agents" in bad.json()["error"]["details"]

    narrower = owner.patch(f"/api/v1/api-keys/{key.pk}", {"agents": ["support"]}, format="json")
    assert narrower.status_code == 200 and narrower.json()["agents"] == ["support"]
    (entry,) = AuditEntry.objects.filter(kind="api_key", action="updated")
    assert entry.actor == main.requester.username
    assert [d["path"] for d in entry.diff] == ["agents.0"] and entry.object_id == str(key.pk)


def test_only_the_owner_or_an_admin_scopes_a_key_and_a_scoped_key_scopes_none(
        main: Tenancy, other: Tenancy) -> None:
    _, key = keyed(main.requester)
    body = {"agents": ["support"]}
    operator = main.client(Role.OPERATOR)
    assert operator.patch(f"/api/v1/api-keys/{key.pk}", body, format="json").status_code == 404
    assert [k["id"] for k in operator.get("/api/v1/api-keys").json()] == \
        [k.pk for k in ApiKey.objects.filter(user=main.users[Role.OPERATOR])]
    theirs = other.client(Role.ADMIN)
    assert theirs.patch(f"/api/v1/api-keys/{key.pk}", body, format="json").status_code == 404
    assert key.pk not in [k["id"] for k in theirs.get("/api/v1/api-keys").json()]
    key.refresh_from_db()
    assert key.agents == []

    admin = main.client(Role.ADMIN)
    assert admin.patch(f"/api/v1/api-keys/{key.pk}", body, format="json").status_code == 200
    assert key.pk in [k["id"] for k in admin.get("/api/v1/api-keys").json()]

    # a scoped key may not lift its own scope (nor set another's)
    narrow, narrow_key = scoped(main, main.requester, tools=["lookup_order"])
    lifted = narrow.patch(f"/api/v1/api-keys/{narrow_key.pk}", {}, format="json")
    assert lifted.status_code == 403, lifted.content
    narrow_key.refresh_from_db()
    assert narrow_key.tools == ["lookup_order"]


def test_mcp_lists_only_the_agents_in_the_keys_scope(main: Tenancy) -> None:
    demo_agent_ensure(main.tenant, name="triage")
    AgentProfile.objects.filter(tenant=main.tenant).update(published=True)
    plain_raw = api_key_create(user=main.requester)
    _, key = scoped(main, main.requester, agents=["triage"])

    def listed(raw_or_key: Any) -> list[str]:
        found = api_key_in_use(plain_raw) if raw_or_key is None else raw_or_key
        caller = caller_of_key(found)
        assert caller is not None
        return [t.name for t in run_tools(caller)]

    assert listed(None) == ["run_support", "run_triage"]
    assert listed(ApiKey.objects.select_related("user__membership").get(pk=key.pk)) == \
        ["run_triage"]


def test_a_workflow_run_records_its_key_and_its_tool_nodes_keep_to_the_keys_scope(
        main: Tenancy) -> None:
    from workflows_app.services.workflows import workflow_create

    workflow_create(tenant_id=main.tenant.pk, name="refund-flow", actor=actor_of(
        main.users[Role.ADMIN]), definition={"nodes": [
            {"id": "refund", "tool": "issue_refund",
             "args": {"order_id": "A-1", "amount_cents": 1000, "reason": "lost"}}]})
    client, key = scoped(main, main.requester, tools=["lookup_order"])
    created = client.post("/api/v1/tasks", {"workflow": "refund-flow", "goal": "refund"},
                          format="json")
    assert created.status_code == 201, created.content
    task = drive(created.json()["id"])
    assert task.api_key_id == key.pk
    assert task.status == TaskStatus.WAITING_FOR_APPROVAL
    authz = Approval.objects.get(task=task, status=Decision.PENDING)
    assert authz.kind == "authorization" and authz.tool == "issue_refund"
    assert not DemoRefund.objects.exists()
