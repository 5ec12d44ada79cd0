"""`GET /api/v1/inbox`: everything waiting for the caller, each item with the
card's facts and the actions the caller may take (nothing from another tenant,
nothing the caller cannot act on); and the members API that sets reviewers'
e-mail addresses (admins only, one address per person, audited)."""
from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from accounts_app.models import Role
from audit_app.models import AuditEntry

from .conftest import Tenancy

pytestmark = pytest.mark.django_db

ADM, REV, REQ, OPS = Role.ADMIN, Role.REVIEWER, Role.REQUESTER, Role.OPERATOR


def _inbox(tenancy: Tenancy, role: str, **query: Any) -> dict[str, Any]:
    response = tenancy.client(role).get("/api/v1/inbox", query)
    assert response.status_code == 200, response.content
    return response.json()


def test_a_reviewer_sees_every_kind_with_its_facts_and_actions(main: Tenancy,
                                                               other: Tenancy) -> None:
    _, approval = main.waiting_for_approval()
    _, question = main.waiting_for_input()
    _, rec = main.in_reconciliation()
    other.waiting_for_approval()  # another tenant's: never shown

    body = _inbox(main, REV)
    assert body["counts"] == {"approvals": 1, "questions": 1, "reconciliations": 1}
    assert body["total"] == 3
    items = {item["key"]: item for item in body["items"]}
    assert set(items) == {f"approval-{approval.pk}", f"question-{question.pk}",
                          f"reconciliation-{rec.pk}"}

    a = items[f"approval-{approval.pk}"]
    assert a["facts"]["tool"] == "issue_refund" and a["facts"]["args"] == approval.args
    assert a["facts"]["reason"] == "damaged" and "risk" in a["facts"]
    assert a["task"]["id"] == approval.task_id and a["task"]["version"] == approval.task_version
    assert [x["name"] for x in a["actions"]] == ["approve", "reject", "respond"]
    assert a["actions"][0]["url"] == f"/api/v1/approvals/{approval.pk}/approve"
    assert "expected_version" in a["actions"][0]["body"]

    q = items[f"question-{question.pk}"]
    assert q["facts"]["question"] == "How much should be refunded?"
    assert q["actions"][0]["url"] == f"/api/v1/tasks/{question.task_id}/input"

    r = items[f"reconciliation-{rec.pk}"]
    assert r["facts"]["tool"] == "hang_write"
    assert [x["name"] for x in r["actions"]] == ["resolve", "requery"]

    # an action taken from the item: its url and body, at the version it shows
    decided = main.client(REV).post(a["actions"][0]["url"],
                                    {"expected_version": a["task"]["version"]}, format="json")
    assert decided.status_code == 200 and decided.json()["channel"] == "api"
    assert f"approval-{approval.pk}" not in {i["key"] for i in _inbox(main, REV)["items"]}


def test_a_requester_sees_only_the_questions_of_its_own_tasks(main: Tenancy) -> None:
    _, question = main.waiting_for_input()
    main.waiting_for_approval()  # they cannot decide it: not waiting for them
    body = _inbox(main, REQ)
    assert [(i["kind"], i["id"]) for i in body["items"]] == [("question", question.pk)]
    assert [a["name"] for a in body["items"][0]["actions"]] == ["answer"]
    # an operator decides none of these
    assert _inbox(main, OPS)["items"] == []


def test_the_requester_of_a_task_is_not_offered_its_approval(main: Tenancy) -> None:
    _, approval = main.waiting_for_approval(requester=main.users[REV])
    assert f"approval-{approval.pk}" not in {i["key"] for i in _inbox(main, REV)["items"]}
    assert f"approval-{approval.pk}" in {i["key"] for i in _inbox(main, ADM)["items"]}


def test_the_inbox_limit_is_checked(main: Tenancy) -> None:
    response = main.client(REV).get("/api/v1/inbox", {"limit": 0})
    assert response.status_code == 400
    assert "limit" in response.json()["error"]["details"]


def test_an_admin_sets_a_members_email(main: Tenancy, other: Tenancy) -> None:
    reviewer = main.users[REV]
    admin = main.client(ADM)
    listed = {m["username"]: m for m in admin.get("/api/v1/members").json()}
    assert set(listed) == {u.username for u in main.users.values()}

    response = admin.patch(f"/api/v1/members/{reviewer.pk}", {"email": "rev@corp.example"},
                           format="json")
    assert response.status_code == 200 and response.json()["email"] == "rev@corp.example"
    assert get_user_model().objects.get(pk=reviewer.pk).email == "rev@corp.example"
    entry = AuditEntry.objects.filter(tenant=main.tenant, kind="membership",
                                      name=reviewer.username).latest("id")
    assert "rev@corp.example" in str(entry.diff)

    bad = admin.patch(f"/api/v1/members/{reviewer.pk}", {"email": "not an address"},
                      format="json")
    assert bad.status_code == 400 and "email" in bad.json()["error"]["details"]
    taken = admin.patch(f"/api/v1/members/{main.users[ADM].pk}", {"email": "REV@corp.example"},
                        format="json")
    assert taken.status_code == 400  # one address, one person (how Slack users are mapped)
    # another tenant's member is a 404; a reviewer may not set addresses
    assert admin.patch(f"/api/v1/members/{other.users[REV].pk}", {"email": "x@y.example"},
                       format="json").status_code == 404
    assert main.client(REV).patch(f"/api/v1/members/{reviewer.pk}", {"email": "x@y.example"},
                                  format="json").status_code == 403
    assert get_user_model().objects.get(pk=reviewer.pk).email == "rev@corp.example"


def test_create_user_sets_the_email(main: Tenancy) -> None:
    out = StringIO()
    call_command("create_user", tenant=main.tenant.name, username="dana", role="reviewer",
                 password="pw-dana-123456", email="dana@corp.example", stdout=out)
    assert get_user_model().objects.get(username="dana").email == "dana@corp.example"
