"""The approval rules, reviewer groups and scopes over HTTP: bad input is a 400
with field errors and writes nothing; changes raise the rule's version and are
audited; another tenant's rule, group or user is a 404; the approvals list
filters what is routed to the caller."""
from __future__ import annotations

from typing import Any

import pytest

from accounts_app.models import Role
from approvals_app.models import ApprovalRule, ReviewerGroup
from audit_app.models import AuditEntry

from .conftest import Tenancy

pytestmark = pytest.mark.django_db

ADM, REV = Role.ADMIN, Role.REVIEWER


def _post(t: Tenancy, url: str, body: Any) -> Any:
    return t.client(ADM).post(url, body, format="json")


def test_a_bad_rule_is_a_400_with_every_field_error_and_nothing_written(main: Tenancy) -> None:
    response = _post(main, "/api/v1/approval-rules", {
        "name": "Bad Name", "action": "require_role", "approvals": 2,
        "condition": "args.amount_cents >", "group": "nobody"})
    assert response.status_code == 400, response.content
    fields = response.json()["error"]["details"]
    assert {"name", "condition", "group"} <= set(fields), fields
    assert not ApprovalRule.objects.exists()
    assert not AuditEntry.objects.filter(kind="approval_rule").exists()


def test_a_rule_is_created_changed_versioned_and_audited(main: Tenancy) -> None:
    created = _post(main, "/api/v1/approval-rules", {
        "name": "large-refunds", "action": "require_approval", "approvals": 2,
        "tools": ["issue_refund"], "condition": "args.amount_cents > 50000"})
    assert created.status_code == 201, created.content
    assert created.json()["version"] == 1 and created.json()["position"] == 10
    changed = main.client(ADM).patch("/api/v1/approval-rules/large-refunds",
                                     {"condition": "args.amount_cents > 40000",
                                      "expected_version": 1}, format="json")
    assert changed.status_code == 200 and changed.json()["version"] == 2
    stale = main.client(ADM).patch("/api/v1/approval-rules/large-refunds",
                                   {"enabled": False, "expected_version": 1}, format="json")
    assert stale.status_code == 409
    assert ApprovalRule.objects.get().enabled
    entries = list(AuditEntry.objects.filter(kind="approval_rule").order_by("id"))
    assert [e.action for e in entries] == ["created", "updated"]
    listed = main.client(REV).get("/api/v1/approval-rules").json()
    assert [r["condition"] for r in listed] == ["args.amount_cents > 40000"]


def test_another_tenants_rules_groups_and_users_are_404(main: Tenancy, other: Tenancy) -> None:
    assert _post(other, "/api/v1/approval-rules", {"name": "theirs", "action": "deny"}
                 ).status_code == 201
    assert _post(other, "/api/v1/reviewer-groups", {"name": "theirs"}).status_code == 201
    client = main.client(ADM)
    assert client.get("/api/v1/approval-rules/theirs").status_code == 404
    assert client.delete("/api/v1/approval-rules/theirs").status_code == 404
    assert client.get("/api/v1/reviewer-groups/theirs").status_code == 404
    assert client.get("/api/v1/approval-rules").json() == []
    other_user = other.users[Role.REQUESTER].username
    assert client.put(f"/api/v1/scopes/{other_user}", {"tools": []},
                      format="json").status_code == 404
    # a rule may not route to another tenant's group
    routed = _post(main, "/api/v1/approval-rules", {
        "name": "mine", "action": "require_role", "group": "theirs"})
    assert routed.status_code == 400 and "group" in routed.json()["error"]["details"]
    assert ApprovalRule.objects.filter(name="theirs").exists()
    assert ReviewerGroup.objects.filter(name="theirs").count() == 1


def test_the_approvals_list_filters_what_is_routed_to_the_caller(main: Tenancy) -> None:
    reviewer = main.users[REV]
    assert _post(main, "/api/v1/reviewer-groups", {
        "name": "leads", "members": [reviewer.username], "agents": ["support"]}
    ).status_code == 201
    _task, approval = main.waiting_for_approval()
    client = main.client(REV)
    ids = lambda which: [a["id"] for a in client.get(  # noqa: E731
        f"/api/v1/approvals?status=pending&assigned={which}").json()["results"]]
    assert ids("groups") == [approval.pk] and ids("mine") == []
    body = client.get(f"/api/v1/approvals/{approval.pk}").json()
    assert (body["group"], body["kind"], body["rule"], body["approvals_required"]) == (
        "leads", "tool", None, 1)
    moved = client.post(f"/api/v1/approvals/{approval.pk}/reassign",
                        {"to_user": reviewer.username}, format="json")
    assert moved.status_code == 200 and moved.json()["assignee"] == reviewer.username
    assert ids("mine") == [approval.pk]
    assert client.post(f"/api/v1/approvals/{approval.pk}/reassign", {},
                       format="json").status_code == 400
