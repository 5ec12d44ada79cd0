"""Every endpoint with every role: allowed roles get the endpoint's success
status; refused roles get a 403 in the error shape and nothing changes.

The expected role sets are written out here, independently of
`foundations.api_access.POLICY`, and a last test checks that every operation of
the live OpenAPI schema has a row, so a new endpoint cannot skip this matrix.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from accounts_app.models import Role, TenantSecret
from accounts_app.services.secrets import secret_create
from approvals_app.models import (
    Approval,
    ApprovalRule,
    Question,
    Reconciliation,
    RequesterScope,
    ReviewerGroup,
)
from approvals_app.services.rules import group_save, rule_create
from evals_app.services.starting import Selection, evaluation_start
from foundations.actors import SYSTEM
from memory_app.models import MemoryItem, MemoryProposal
from memory_app.services import item_create
from notify_app.models import NotificationSettings, WebhookSubscription
from notify_app.services.subscriptions import webhook_create
from retention_app.models import Export
from retention_app.services.export import export_run, export_start
from schedules_app.models import Schedule
from schedules_app.services.schedules import schedule_create
from tasks_app.models import AgentProfile, ContextSummary, Event, Task
from tasks_app.services.agents import agent_update
from tasks_app.services.releases import release_set
from tasks_app.services.tasks import task_cancel
from tests.factories import make_user, submit
from tests.helpers import drive
from tools_app.mcp.services import mcp_server_create
from tools_app.models import McpServer, Tool
from workflows_app.services.workflows import workflow_create

from .conftest import Tenancy, client_for

REQ, OP, REV, ADM = Role.REQUESTER, Role.OPERATOR, Role.REVIEWER, Role.ADMIN
ALL = {REQ, OP, REV, ADM}

Setup = Callable[[Tenancy, str], tuple[str, str, Any]]


def _submit(t: Tenancy, role: str) -> tuple[str, str, Any]:
    return (
        "post",
        "/api/v1/tasks",
        {"goal": "g", "agent": "support", "script": [{"final": {"ok": 1}}]},
    )


def _task(suffix: str = "", method: str = "get", body: Any = None) -> Setup:
    return lambda t, role: (method, f"/api/v1/tasks/{t.created_task().pk}{suffix}", body)


def _input(t: Tenancy, role: str) -> tuple[str, str, Any]:
    task, _ = t.waiting_for_input()
    return "post", f"/api/v1/tasks/{task.pk}/input", {"answer": "500 cents"}


def _escalated(action: str, body: Any) -> Setup:
    return lambda t, role: ("post", f"/api/v1/tasks/{t.escalated().pk}/{action}", body)


def _summary_rollback(t: Tenancy, role: str) -> tuple[str, str, Any]:
    task = t.summarized()
    return "post", f"/api/v1/tasks/{task.pk}/summaries/1/rollback", {"comment": "v2 lost a fact"}


def _approval(suffix: str = "", method: str = "get", body: Any = None) -> Setup:
    return lambda t, role: (
        method,
        f"/api/v1/approvals/{t.waiting_for_approval()[1].pk}{suffix}",
        body,
    )


def _reconciliation(suffix: str = "", method: str = "get", body: Any = None) -> Setup:
    return lambda t, role: (
        method,
        f"/api/v1/reconciliations/{t.in_reconciliation()[1].pk}{suffix}",
        body,
    )


def _secret(method: str = "get", body: Any = None) -> Setup:
    def setup(t: Tenancy, role: str) -> tuple[str, str, Any]:
        secret_create(tenant_id=t.tenant.pk, name="stored", value="v-1", actor=SYSTEM)
        return method, "/api/v1/secrets/stored", body

    return setup


def _webhook(suffix: str = "", method: str = "get", body: Any = None) -> Setup:
    def setup(t: Tenancy, role: str) -> tuple[str, str, Any]:
        created = webhook_create(tenant_id=t.tenant.pk, url="http://127.0.0.1:9/hook",
                                 events=["task_failed"], actor=SYSTEM)
        return method, f"/api/v1/webhooks/{created.subscription.pk}{suffix}", body

    return setup


def _second_version(released: bool) -> Setup:
    """`support` with a version 2 (saved, not current), released to half of new tasks or not."""

    def setup(t: Tenancy, role: str) -> tuple[str, str, Any]:
        agent_update(tenant_id=t.tenant.pk, name="support", changes={"max_steps": 7})
        if released:
            release_set(tenant_id=t.tenant.pk, name="support", candidate=2, percent=50)
            return "post", "/api/v1/agents/support/rollback", {}
        return "post", "/api/v1/agents/support/promote", {"version": 2}

    return setup


def _retry(t: Tenancy, role: str) -> tuple[str, str, Any]:
    task = t.created_task()
    task_cancel(task_id=task.pk, actor=SYSTEM, reason="to retry")
    return "post", f"/api/v1/tasks/{task.pk}/retry", {"comment": "again"}
# The live MCP test server of the current test (set by the test for mcp operations).
MCP_URL: dict[str, str] = {}


def _mcp_create(t: Tenancy, role: str) -> tuple[str, str, Any]:
    return "post", "/api/v1/mcp-servers", {"name": "shop", "url": MCP_URL["url"]}


def _mcp(suffix: str = "", method: str = "get", body: Any = None) -> Setup:
    def setup(t: Tenancy, role: str) -> tuple[str, str, Any]:
        mcp_server_create(tenant_id=t.tenant.pk, name="shop", url=MCP_URL["url"])
        return method, f"/api/v1/mcp-servers/shop{suffix}", body

    return setup


SCHEDULE = {"name": "nightly", "target": {"agent": "support"}, "cron": "0 2 * * *",
            "script": [{"final": {"ok": True}}]}


def _schedule(suffix: str = "", method: str = "get", body: Any = None) -> Setup:
    def setup(t: Tenancy, role: str) -> tuple[str, str, Any]:
        schedule_create(tenant_id=t.tenant.pk, actor=SYSTEM,
                        **{**SCHEDULE, "name": "hourly", "cron": "0 * * * *"})
        return method, f"/api/v1/schedules/hourly{suffix}", body

    return setup


def _const(method: str, url: str, body: Any = None) -> Setup:
    return lambda t, role: (method, url, body)


def _member_email(t: Tenancy, role: str) -> tuple[str, str, Any]:
    return "patch", f"/api/v1/members/{t.users[REV].pk}", {"email": "rev@corp.example"}


def _own_key_scope(t: Tenancy, role: str) -> tuple[str, str, Any]:
    """Any member narrows their own key (an admin, any of the tenant's)."""
    from accounts_app.models import ApiKey
    from accounts_app.services.accounts import api_key_create

    key = ApiKey.objects.get(prefix=api_key_create(user=t.users[role])[:12])
    return "patch", f"/api/v1/api-keys/{key.pk}", {"agents": ["support"]}


def _workflow(suffix: str = "", method: str = "get", body: Any = None) -> Setup:
    def setup(t: Tenancy, role: str) -> tuple[str, str, Any]:
        workflow_create(tenant_id=t.tenant.pk, name="flow", actor=SYSTEM,
                        definition={"nodes": [{"id": "a", "tool": "lookup_order"}]})
        return method, f"/api/v1/workflows/flow{suffix}", body

    return setup


def _memory(suffix: str = "", method: str = "get", body: Any = None) -> Setup:
    def setup(t: Tenancy, role: str) -> tuple[str, str, Any]:
        item = item_create(tenant_id=t.tenant.pk, actor=SYSTEM, fields={
            "scope": "subject", "subject": "cust-1", "kind": "fact", "text": "Lives in Porto"})
        return method, f"/api/v1/memory/{item.pk}{suffix}", body

    return setup


def _recorded(t: Tenancy) -> int:
    """A succeeded task of `support`, for an evaluation to replay; its version."""
    drive(submit(t.tenant, [{"final": {"ok": 1}}]).pk)
    return AgentProfile.objects.get(tenant=t.tenant, name="support").current_version


def _evaluation_start(t: Tenancy, role: str) -> tuple[str, str, Any]:
    return "post", "/api/v1/evaluations", {
        "agent": "support", "candidate_version": _recorded(t), "scorer": "exact",
        "tasks": {"filter": {}}}


def _export(suffix: str = "") -> Setup:
    def setup(t: Tenancy, role: str) -> tuple[str, str, Any]:
        export = export_start(tenant_id=t.tenant.pk, scope="tenant", subject="", actor=SYSTEM)
        if suffix:  # the download: the job has run
            export_run(export.pk)
        return "get", f"/api/v1/exports/{export.pk}{suffix}", None

    return setup


def _evaluation(suffix: str = "") -> Setup:
    def setup(t: Tenancy, role: str) -> tuple[str, str, Any]:
        evaluation = evaluation_start(tenant_id=t.tenant.pk, agent="support",
                                      candidate_version=_recorded(t), selection=Selection(),
                                      scorer="exact", actor=SYSTEM)
        task = evaluation.tasks.get().recorded_task_id  # its one replay's recorded task
        return "get", f"/api/v1/evaluations/{evaluation.pk}{suffix.format(task=task)}", None

    return setup


def _proposal(action: str, body: Any) -> Setup:
    def setup(t: Tenancy, role: str) -> tuple[str, str, Any]:
        proposal = MemoryProposal.objects.create(
            tenant=t.tenant, task=t.created_task(), step_no=1, scope="tenant", kind="fact",
            text="Refunds need a receipt")
        return "post", f"/api/v1/memory/proposals/{proposal.pk}/{action}", body

    return setup


def _leads(t: Tenancy) -> None:
    group_save(tenant_id=t.tenant.pk, name="leads", data={}, actor=SYSTEM, create=True)


def _rule(method: str = "get", body: Any = None) -> Setup:
    def setup(t: Tenancy, role: str) -> tuple[str, str, Any]:
        rule_create(tenant_id=t.tenant.pk, actor=SYSTEM,
                    data={"name": "big", "action": "deny", "tools": ["issue_refund"]})
        return method, "/api/v1/approval-rules/big", body

    return setup


def _group(method: str = "get", body: Any = None) -> Setup:
    def setup(t: Tenancy, role: str) -> tuple[str, str, Any]:
        _leads(t)
        return method, "/api/v1/reviewer-groups/leads", body

    return setup


def _reassign(t: Tenancy, role: str) -> tuple[str, str, Any]:
    _leads(t)
    approval = t.waiting_for_approval()[1]
    return "post", f"/api/v1/approvals/{approval.pk}/reassign", {"to_group": "leads"}


def _scope(method: str = "get", body: Any = None) -> Setup:
    def setup(t: Tenancy, role: str) -> tuple[str, str, Any]:
        RequesterScope.objects.get_or_create(tenant=t.tenant, user=t.requester)
        return method, f"/api/v1/scopes/{t.requester.username}", body

    return setup


# operation id -> (roles allowed, setup, success status)
MATRIX: dict[str, tuple[set[str], Setup, int]] = {
    "tasks_list": (ALL, _const("get", "/api/v1/tasks"), 200),
    "tasks_submit": ({REQ, ADM}, _submit, 201),
    "tasks_submit_batch": ({REQ, ADM}, _const("post", "/api/v1/tasks/batch", {"tasks": [
        {"agent": "support", "goal": "g", "script": [{"final": {}}],
         "idempotency_key": "matrix-batch"}]}), 201),
    "tasks_retrieve": (ALL, _task(), 200),
    "tasks_steps": (ALL, _task("/steps"), 200),
    "tasks_events": (ALL, _task("/events"), 200),
    # a finished task's stream: its events, then the end (one that runs would not end)
    "tasks_stream": (ALL, lambda t, role: ("get", f"/api/v1/tasks/{t.finished_task().pk}/stream",
                                           None), 200),
    "tasks_summaries": (ALL, _task("/summaries"), 200),
    "tasks_summary_rollback": ({OP, ADM}, _summary_rollback, 200),
    "tasks_cancel": ({REQ, OP, ADM}, _task("/cancel", "post", {"reason": "no longer needed"}), 200),
    "tasks_input": ({REQ, REV, ADM}, _input, 200),
    "tasks_resume": ({OP, ADM}, _escalated("resume", {"extend": {"max_steps": 3}}), 200),
    "tasks_fail": ({OP, ADM}, _escalated("fail", {"reason": "giving up"}), 200),
    "tasks_bulk_cancel": (
        {OP, ADM},
        _const("post", "/api/v1/tasks/bulk-cancel", {"status": ["CREATED"]}),
        200,
    ),
    "tasks_retry": ({OP, ADM}, _retry, 201),
    "tasks_bulk_retry": (
        {OP, ADM}, _const("post", "/api/v1/tasks/bulk-retry", {"agent": "support"}), 200),
    "leases_list": ({OP, ADM}, _const("get", "/api/v1/leases"), 200),
    "questions_list": (ALL, _const("get", "/api/v1/questions?status=open"), 200),
    "approvals_list": ({OP, REV, ADM}, _const("get", "/api/v1/approvals?status=pending"), 200),
    "approvals_retrieve": ({OP, REV, ADM}, _approval(), 200),
    "approvals_approve": ({REV, ADM}, _approval("/approve", "post", {"comment": "ok"}), 200),
    "approvals_reject": ({REV, ADM}, _approval("/reject", "post", {"comment": "no evidence"}), 200),
    "tasks_approvals_decide_all": ({REV, ADM}, lambda t, role: (
        "post", f"/api/v1/tasks/{t.waiting_for_approval()[0].pk}/approvals/decide-all",
        {"decision": "approve"}), 200),
    "approvals_respond": (
        {REV, ADM},
        _approval("/respond", "post", {"output": {"refund_id": "manual"}}),
        200,
    ),
    "reconciliations_list": ({OP, REV, ADM}, _const("get", "/api/v1/reconciliations"), 200),
    "reconciliations_retrieve": ({OP, REV, ADM}, _reconciliation(), 200),
    "reconciliations_resolve": (
        {REV, ADM},
        _reconciliation("/resolve", "post", {"outcome": "failed", "comment": "not sent"}),
        200,
    ),
    "reconciliations_requery": ({REV, ADM}, _reconciliation("/requery", "post"), 200),
    "tools_list": ({ADM}, _const("get", "/api/v1/tools"), 200),
    "breakers_list": ({OP, ADM}, _const("get", "/api/v1/breakers"), 200),
    "tools_create": (
        {ADM},
        _const(
            "post",
            "/api/v1/tools",
            {"name": "ship_parcel", "kind": "http", "url": "http://127.0.0.1:9/ship"},
        ),
        201,
    ),
    "tools_retrieve": ({ADM}, _const("get", "/api/v1/tools/lookup_order"), 200),
    "tools_update": (
        {ADM},
        _const("patch", "/api/v1/tools/lookup_order", {"description": "Find an order."}),
        200,
    ),
    "workflows_list": (ALL, _const("get", "/api/v1/workflows"), 200),
    "workflows_create": ({ADM}, _const("post", "/api/v1/workflows", {
        "name": "flow", "definition": "nodes: [{id: a, tool: lookup_order}]"}), 201),
    "workflows_retrieve": (ALL, _workflow(), 200),
    "workflows_versions": (ALL, _workflow("/versions"), 200),
    "workflows_update": ({ADM}, _workflow("", "patch", {"description": "Refunds."}), 200),
    "agents_list": ({ADM}, _const("get", "/api/v1/agents"), 200),
    "agents_create": (
        {ADM},
        _const("post", "/api/v1/agents", {"name": "triage", "tools": ["lookup_order"]}),
        201,
    ),
    "agents_retrieve": ({ADM}, _const("get", "/api/v1/agents/support"), 200),
    "agents_update": (
        {ADM},
        _const("patch", "/api/v1/agents/support", {"description": "Support desk."}),
        200,
    ),
    "secrets_list": ({ADM}, _const("get", "/api/v1/secrets"), 200),
    "secrets_create": (
        {ADM},
        _const("post", "/api/v1/secrets", {"name": "payments", "value": "sk-1"}),
        201,
    ),
    "secrets_retrieve": ({ADM}, _secret(), 200),
    "secrets_rotate": ({ADM}, _secret("put", {"value": "v-2"}), 200),
    "secrets_destroy": ({ADM}, _secret("delete"), 204),
    "agents_versions": ({OP, ADM}, _const("get", "/api/v1/agents/support/versions"), 200),
    "agents_version": ({OP, ADM}, _const("get", "/api/v1/agents/support/versions/1"), 200),
    "agents_release_log": ({OP, ADM}, _const("get", "/api/v1/agents/support/releases"), 200),
    "agents_promote": ({ADM}, _second_version(released=False), 200),
    "agents_rollback": ({ADM}, _second_version(released=True), 200),
    "webhooks_list": ({ADM}, _const("get", "/api/v1/webhooks"), 200),
    "webhooks_create": (
        {ADM},
        _const("post", "/api/v1/webhooks",
               {"url": "http://127.0.0.1:9/hook", "events": ["task_failed"]}),
        201,
    ),
    "webhooks_retrieve": ({ADM}, _webhook(), 200),
    "webhooks_update": ({ADM}, _webhook("", "patch", {"active": False}), 200),
    "webhooks_destroy": ({ADM}, _webhook("", "delete"), 204),
    "webhooks_deliveries": ({ADM}, _webhook("/deliveries"), 200),
    "notifications_email_retrieve": ({ADM}, _const("get", "/api/v1/notifications/email"), 200),
    "notifications_email_update": (
        {ADM},
        _const("put", "/api/v1/notifications/email", {"email_reviewers": True}),
        200,
    ),
    "notifications_slack_retrieve": ({ADM}, _const("get", "/api/v1/notifications/slack"), 200),
    "notifications_slack_update": (
        {ADM}, _const("put", "/api/v1/notifications/slack", {"channel": "C0123"}), 200),
    "inbox_list": (ALL, _const("get", "/api/v1/inbox"), 200),
    "members_list": ({ADM}, _const("get", "/api/v1/members"), 200),
    "members_update": ({ADM}, _member_email, 200),
    "api_keys_list": (ALL, _const("get", "/api/v1/api-keys"), 200),
    "api_keys_update": (ALL, _own_key_scope, 200),
    "audit_list": ({ADM}, _const("get", "/api/v1/audit"), 200),
    "mcp_servers_list": ({ADM}, _const("get", "/api/v1/mcp-servers"), 200),
    "mcp_servers_create": ({ADM}, _mcp_create, 201),
    "mcp_servers_retrieve": ({ADM}, _mcp(), 200),
    "mcp_servers_update": ({ADM}, _mcp("", "patch", {"enabled": False}), 200),
    "mcp_servers_delete": ({ADM}, _mcp("", "delete"), 204),
    "mcp_servers_refresh": ({ADM}, _mcp("/refresh", "post"), 200),
    "schedules_list": (ALL, _const("get", "/api/v1/schedules"), 200),
    "schedules_create": ({OP, ADM}, _const("post", "/api/v1/schedules", SCHEDULE), 201),
    "schedules_retrieve": (ALL, _schedule(), 200),
    "schedules_update": ({OP, ADM}, _schedule("", "patch", {"cron": "5 * * * *"}), 200),
    "schedules_destroy": ({OP, ADM}, _schedule("", "delete"), 204),
    "schedules_pause": ({OP, ADM}, _schedule("/pause", "post"), 200),
    "schedules_resume": ({OP, ADM}, _schedule("/resume", "post"), 200),
    "schedules_runs": (ALL, _schedule("/runs"), 200),
    "memory_list": ({OP, REV, ADM}, _const("get", "/api/v1/memory"), 200),
    "memory_create": ({OP, ADM}, _const("post", "/api/v1/memory", {
        "scope": "tenant", "kind": "fact", "text": "Refunds need a receipt"}), 201),
    "memory_erase_subject": ({ADM}, _const("delete", "/api/v1/memory?subject=cust-1"), 200),
    "retention_retrieve": ({OP, ADM}, _const("get", "/api/v1/retention"), 200),
    "retention_update": ({ADM}, _const("put", "/api/v1/retention", {"days": 30}), 200),
    "archives_list": ({OP, ADM}, _const("get", "/api/v1/archives"), 200),
    "erasures_create": ({ADM}, _const("post", "/api/v1/erasures", {"subject": "cust-9"}), 200),
    "exports_list": ({ADM}, _const("get", "/api/v1/exports"), 200),
    "exports_create": ({ADM}, _const("post", "/api/v1/exports", {"scope": "tenant"}), 202),
    "exports_retrieve": ({ADM}, _export(), 200),
    "exports_download": ({ADM}, _export("/download"), 200),
    "memory_retrieve": ({OP, REV, ADM}, _memory(), 200),
    "memory_update": ({OP, ADM}, _memory("", "patch", {"text": "Lives in Lisbon"}), 200),
    "memory_delete": ({OP, ADM}, _memory("", "delete"), 204),
    "memory_versions": ({OP, REV, ADM}, _memory("/versions"), 200),
    "memory_version": ({OP, REV, ADM}, _memory("/versions/1"), 200),
    "memory_proposals": ({OP, REV, ADM}, _const("get", "/api/v1/memory/proposals"), 200),
    "memory_proposal_accept": ({REV, ADM}, _proposal("accept", {}), 201),
    "memory_proposal_reject": ({REV, ADM}, _proposal("reject", {"note": "no"}), 200),
    "evaluations_list": ({OP, ADM}, _const("get", "/api/v1/evaluations"), 200),
    "evaluations_create": ({OP, ADM}, _evaluation_start, 201),
    "evaluations_retrieve": ({OP, ADM}, _evaluation(), 200),
    "evaluations_tasks": ({OP, ADM}, _evaluation("/tasks"), 200),
    "evaluations_task_compare": ({OP, ADM}, _evaluation("/tasks/{task}/compare"), 200),
    "approvals_reassign": ({REV, ADM}, _reassign, 200),
    "approval_rules_list": ({OP, REV, ADM}, _const("get", "/api/v1/approval-rules"), 200),
    "approval_rules_create": ({ADM}, _const("post", "/api/v1/approval-rules", {
        "name": "big", "action": "deny", "tools": ["issue_refund"]}), 201),
    "approval_rules_retrieve": ({OP, REV, ADM}, _rule(), 200),
    "approval_rules_update": ({ADM}, _rule("patch", {"enabled": False}), 200),
    "approval_rules_destroy": ({ADM}, _rule("delete"), 204),
    "reviewer_groups_list": ({OP, REV, ADM}, _const("get", "/api/v1/reviewer-groups"), 200),
    "reviewer_groups_create": ({ADM}, _const("post", "/api/v1/reviewer-groups", {
        "name": "leads"}), 201),
    "reviewer_groups_retrieve": ({OP, REV, ADM}, _group(), 200),
    "reviewer_groups_update": ({ADM}, _group("patch", {"agents": ["support"]}), 200),
    "reviewer_groups_destroy": ({ADM}, _group("delete"), 204),
    "scopes_retrieve": ({OP, REV, ADM}, _scope(), 200),
    "scopes_set": ({ADM}, _scope("put", {"tools": ["lookup_order"]}), 200),
}


def fingerprint() -> tuple[Any, ...]:
    """What any write would change."""
    return (
        Event.objects.count(),
        sorted(Task.objects.values_list("id", "status", "version")),
        sorted(Approval.objects.values_list("id", "status")),
        sorted(Question.objects.values_list("id", "status")),
        sorted(Reconciliation.objects.values_list("id", "status")),
        sorted(Tool.objects.values_list("id", "description", "enabled")),
        sorted(AgentProfile.objects.values_list("id", "description", "enabled")),
        sorted(AgentProfile.objects.values_list("id", "current_version", "release_candidate")),
        sorted(ContextSummary.objects.values_list("id", "active")),
        sorted(TenantSecret.objects.values_list("id", "ciphertext")),
        sorted(WebhookSubscription.objects.values_list("id", "active", "events")),
        sorted(NotificationSettings.objects.values_list("id", "email_reviewers")),
        sorted(McpServer.objects.values_list("id", "url", "enabled", "refreshed_at")),
        sorted(Schedule.objects.values_list("id", "cron", "paused", "next_due_at")),
        sorted(MemoryItem.objects.values_list("id", "version")),
        sorted(MemoryProposal.objects.values_list("id", "status")),
        sorted(ApprovalRule.objects.values_list("id", "version", "enabled")),
        sorted(ReviewerGroup.objects.values_list("id", "agents")),
        sorted(RequesterScope.objects.values_list("id", "tools")),
        sorted(Approval.objects.values_list("id", "group_id", "assignee_id")),
        sorted(Export.objects.values_list("id", "status")),
    )


@pytest.mark.parametrize("role", sorted(ALL))
@pytest.mark.parametrize("operation", [
    # The MCP server operations need the MCP test server, a process.
    pytest.param(op, marks=pytest.mark.system) if op.startswith("mcp_servers") else op
    for op in sorted(MATRIX)
])
def test_every_endpoint_with_every_role(main: Tenancy, operation: str, role: str,
                                        request: pytest.FixtureRequest) -> None:
    if operation.startswith("mcp_servers"):
        MCP_URL["url"] = request.getfixturevalue("mcp_server").url
    allowed, setup, success = MATRIX[operation]
    method, url, body = setup(main, role)
    before = fingerprint()
    response = getattr(main.client(role), method)(url, body, format="json")
    if role in allowed:
        assert response.status_code == success, response.content
    else:
        assert response.status_code == 403, response.content
        assert response.json()["error"]["code"] == "role_required"
        assert fingerprint() == before, "a refused request changed something"


def test_the_matrix_covers_every_operation_of_the_schema(main: Tenancy) -> None:
    schema = main.client(ADM).get("/api/v1/schema", HTTP_ACCEPT="application/json").json()
    operations = {
        op["operationId"]
        for item in schema["paths"].values()
        for op in item.values()
        if isinstance(op, dict) and "operationId" in op
    }
    assert operations == set(MATRIX)


@pytest.mark.parametrize("action", ["cancel", "input"])
def test_a_requester_acts_only_on_its_own_tasks(main: Tenancy, action: str) -> None:
    stranger = client_for(make_user(main.tenant, REQ, username="another-requester"))
    task = main.waiting_for_input()[0]
    body = {"answer": "x"} if action == "input" else {}
    response = stranger.post(f"/api/v1/tasks/{task.pk}/{action}", body, format="json")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "not_your_task"
    assert Task.objects.get(pk=task.pk).version == task.version
    # ...while it may still read it: tasks are visible tenant-wide.
    assert stranger.get(f"/api/v1/tasks/{task.pk}").status_code == 200


def test_no_credentials_is_a_401_in_the_error_shape(main: Tenancy) -> None:
    from rest_framework.test import APIClient

    response = APIClient().get("/api/v1/tasks")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"
    assert response["WWW-Authenticate"] == "Token"


@pytest.mark.parametrize("header", ["Token nope", "Token", "Token a b", "Token \xff\xfe"])
def test_a_bad_token_is_a_401(main: Tenancy, header: str) -> None:
    from rest_framework.test import APIClient

    response = APIClient().get("/api/v1/tasks", HTTP_AUTHORIZATION=header)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "authentication_failed"


def test_a_revoked_key_is_a_401(main: Tenancy) -> None:
    from accounts_app.models import ApiKey

    client = main.client(ADM)
    assert client.get("/api/v1/tasks").status_code == 200
    ApiKey.objects.filter(user=main.users[ADM]).update(revoked=True)
    assert client.get("/api/v1/tasks").status_code == 401


def test_session_auth_works_for_the_console(main: Tenancy) -> None:
    from rest_framework.test import APIClient

    client = APIClient(enforce_csrf_checks=True)
    client.force_login(main.users[OP])
    assert client.get("/api/v1/tasks").status_code == 200
    # unsafe methods need the CSRF token, as for any session call
    response = client.post("/api/v1/tasks/bulk-cancel", {"status": ["CREATED"]}, format="json")
    assert response.status_code == 403


def test_a_user_without_a_tenant_is_refused(db: Any) -> None:
    from django.contrib.auth import get_user_model

    loner = get_user_model().objects.create(username="loner")
    response = client_for(loner).get("/api/v1/tasks")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "no_tenant"
