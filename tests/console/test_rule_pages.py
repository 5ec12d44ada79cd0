"""The grouped inbox and the Approval rules page without a browser: the card
says which rule applied and whom the request is for, the filters (mine, my
groups, all) show what they say, a card is reassigned, and an admin's rule,
group and scope are saved (field errors on the form, audited) while a
reviewer only reads."""
from __future__ import annotations

import pytest
from django.test import Client

from accounts_app.models import Role
from approvals_app.models import Approval, ApprovalRule, RequesterScope, ReviewerGroup
from approvals_app.services.rules import group_save, rule_create
from audit_app.models import AuditEntry
from foundations.actors import SYSTEM
from tasks_app.machine import TaskStatus
from tasks_app.models import Task
from tests.factories import make_user, submit
from tests.helpers import drive

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


def refund(order: str, amount: int) -> list[dict]:
    return [{"tool": "issue_refund", "reason": "damaged",
             "args": {"order_id": order, "amount_cents": amount, "reason": "damaged"}},
            {"final": {"ok": True}}]


def client_for(user) -> Client:  # type: ignore[no-untyped-def]
    c = Client()
    c.force_login(user)
    return c


def _waiting(world, script) -> Approval:  # type: ignore[no-untyped-def]
    task = drive(submit(world.tenant, script).pk)
    assert task.status == TaskStatus.WAITING_FOR_APPROVAL
    return Approval.objects.get(task=task)


@pytest.fixture
def routed(world):  # type: ignore[no-untyped-def]
    """Three pending approvals: one for the group `leads` (ana), one assigned to ana,
    one for anyone."""
    ana = make_user(world.tenant, Role.REVIEWER, "ana")
    group_save(tenant_id=world.tenant.pk, name="leads", data={"members": ["ana"]},
               actor=SYSTEM, create=True)
    rule_create(tenant_id=world.tenant.pk, actor=SYSTEM, data={
        "name": "a1-to-leads", "action": "require_role", "group": "leads",
        "tools": ["issue_refund"], "condition": "args.order_id == 'A-1'"})
    for_group = _waiting(world, refund("A-1", 100))
    for_ana = _waiting(world, refund("A-2", 200))
    Approval.objects.filter(pk=for_ana.pk).update(assignee=ana)
    for_anyone = _waiting(world, refund("A-2", 300))
    return {"ana": ana, "group": for_group, "mine": for_ana, "anyone": for_anyone}


def _cards(html: str) -> set[str]:
    import re
    return set(re.findall(r'data-card-key="(approval-\d+)"', html))


def test_the_inbox_filters_mine_my_groups_and_all(world, routed):
    ana = client_for(routed["ana"])
    keys = {k: f"approval-{routed[k].pk}" for k in ("group", "mine", "anyone")}
    assert _cards(ana.get("/inbox/").content.decode()) == set(keys.values())
    assert _cards(ana.get("/inbox/?show=mine").content.decode()) == {keys["mine"]}
    assert _cards(ana.get("/inbox/?show=groups").content.decode()) == {keys["group"],
                                                                        keys["mine"]}
    # another reviewer is in no group and has nothing assigned
    other = client_for(world.users[Role.REVIEWER])
    assert _cards(other.get("/inbox/?show=groups").content.decode()) == set()
    assert _cards(other.get("/inbox/?show=bogus").content.decode()) == set(keys.values())


def test_the_card_says_which_rule_applied_and_for_whom(world, routed):
    html = client_for(routed["ana"]).get("/inbox/").content.decode()
    assert "a1-to-leads</a> (v1, require_role)" in html
    assert "the group leads (only its members decide)" in html
    assert "none: the tool itself asks for approval" in html


def test_a_card_is_reassigned_to_a_group_and_a_refusal_comes_back_on_it(world, routed):
    approval = routed["anyone"]
    version = Task.objects.get(pk=approval.task_id).version
    url = f"/inbox/approvals/{approval.pk}/reassign/"
    reviewer = client_for(world.users[Role.REVIEWER])
    bad = reviewer.post(url, {"to_group": "nobody", "expected_version": version}, **HTMX)
    assert bad.status_code == 400 and "no reviewer group named" in bad.content.decode()
    ok = reviewer.post(url, {"to_group": "leads", "expected_version": version}, **HTMX)
    assert ok.status_code == 200 and "Reassigned to the group leads." in ok.content.decode()
    assert Approval.objects.get(pk=approval.pk).group.name == "leads"


def test_an_admin_adds_a_rule_group_and_scope_and_a_reviewer_only_reads(world):
    admin = client_for(world.users[Role.ADMIN])
    bad = admin.post("/approval-rules/add/", {
        "name": "big", "action": "require_approval", "approvals": "2",
        "condition": "args.amount_cents >", "on_expiry": ""})
    assert bad.status_code == 400 and not ApprovalRule.objects.exists()
    assert "condition" in bad.content.decode()
    ok = admin.post("/approval-rules/add/", {
        "name": "big", "action": "require_approval", "approvals": "2", "tools": "issue_refund",
        "condition": "args.amount_cents > 50000", "on_expiry": ""})
    assert ok.status_code == 302
    rule = ApprovalRule.objects.get()
    assert (rule.approvals, rule.tools, rule.condition) == (2, ["issue_refund"],
                                                           "args.amount_cents > 50000")
    assert admin.post("/approval-rules/groups/", {
        "name": "leads", "members": world.users[Role.REVIEWER].username,
        "agents": "support"}).status_code == 302
    assert list(ReviewerGroup.objects.get().members.all()) == [world.users[Role.REVIEWER]]
    assert admin.post("/approval-rules/scopes/", {
        "user": world.users[Role.REQUESTER].username, "tools": "lookup_order"}
    ).status_code == 302
    assert RequesterScope.objects.get().tools == ["lookup_order"]
    assert set(AuditEntry.objects.values_list("kind", flat=True)) >= {
        "approval_rule", "reviewer_group", "requester_scope"}

    reviewer = client_for(world.users[Role.REVIEWER])
    page = reviewer.get("/approval-rules/").content.decode()
    assert "args.amount_cents &gt; 50000" in page and 'id="rule-form"' not in page
    assert reviewer.post("/approval-rules/big/delete/").status_code == 403
    assert ApprovalRule.objects.exists()
    assert admin.post("/approval-rules/big/delete/").status_code == 302
    assert not ApprovalRule.objects.exists()
