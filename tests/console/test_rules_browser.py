"""The grouped inbox in Chromium: a reviewer filters it (mine, my groups,
all), gives the first of two approvals a rule asks for, and new requests
routed to their group arrive live within the filter they chose."""
from __future__ import annotations

import pytest

from accounts_app.models import Role
from approvals_app.models import Approval, Decision
from approvals_app.services.rules import group_save, rule_create
from foundations.actors import SYSTEM
from tasks_app.machine import TaskStatus
from tasks_app.services.demo import demo_agent_ensure
from tests.factories import make_user, submit
from tests.helpers import drive
from tools_app.models import DemoOrder

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def refund(order: str, amount: int) -> list[dict]:
    return [{"tool": "issue_refund", "reason": "the parcel was lost",
             "args": {"order_id": order, "amount_cents": amount, "reason": "lost"}},
            {"final": {"ok": True}}]


def waiting(world, script, agent: str = "support") -> Approval:  # type: ignore[no-untyped-def]
    task = drive(submit(world.tenant, script, agent=agent).pk)
    assert task.status == TaskStatus.WAITING_FOR_APPROVAL
    return Approval.objects.get(task=task)


def card_keys(page) -> set[str]:  # type: ignore[no-untyped-def]
    return set(page.eval_on_selector_all(
        "[data-card-key^='approval-'][data-open='1']",
        "cards => cards.map(c => c.dataset.cardKey)"))


def test_a_reviewer_filters_the_grouped_inbox_and_gives_the_first_of_two_approvals(
        world, page_as):
    DemoOrder.objects.update_or_create(order_id="B-1", defaults={
        "customer": "Ada", "email": "ada@example.com", "amount_cents": 200_000})
    ana = make_user(world.tenant, Role.REVIEWER, "ana")
    group_save(tenant_id=world.tenant.pk, name="leads", data={"members": ["ana"]},
               actor=SYSTEM, create=True)
    rule_create(tenant_id=world.tenant.pk, actor=SYSTEM, data={
        "name": "large-refunds", "action": "require_approval", "approvals": 2,
        "group": "leads", "tools": ["issue_refund"], "condition": "args.amount_cents > 50000"})
    large = waiting(world, refund("B-1", 60_000))  # to leads, two approvals
    small = waiting(world, refund("A-2", 300))  # to anyone
    assigned = waiting(world, refund("A-2", 200))
    Approval.objects.filter(pk=assigned.pk).update(assignee=ana)
    key = {a.pk: f"approval-{a.pk}" for a in (large, small, assigned)}

    reviewer = page_as(ana)
    page = reviewer.page
    reviewer.goto("/inbox/?show=groups")
    page.wait_for_selector('#live-status[data-state="open"]')
    assert card_keys(page) == {key[large.pk], key[assigned.pk]}
    page.get_by_role("link", name="Mine", exact=True).click()
    page.wait_for_selector("[data-show='mine'][aria-current='page']")
    assert card_keys(page) == {key[assigned.pk]}
    page.get_by_role("link", name="All", exact=True).click()
    page.wait_for_selector("[data-show='all'][aria-current='page']")
    assert card_keys(page) == set(key.values())

    card = page.locator(f"[data-card-key='{key[large.pk]}']")
    assert "large-refunds" in card.locator("[data-rule]").inner_text()
    assert "0 of 2" in card.locator("[data-approvals]").inner_text()
    assert "the group leads" in card.locator("[data-routed]").inner_text()
    card.get_by_role("button", name="Approve", exact=True).click()
    page.wait_for_selector(f"[data-card-key='{key[large.pk]}'] .flash")
    card = page.locator(f"[data-card-key='{key[large.pk]}']")
    assert "needs 1 more, from another reviewer" in card.inner_text()
    assert "1 of 2, from different reviewers: ana" in card.locator("[data-approvals]").inner_text()
    assert card.get_attribute("data-open") == "1"
    assert Approval.objects.get(pk=large.pk).status == Decision.PENDING
    reviewer.shot("inbox-two-approvals")

    # within "my groups", a request routed to leads arrives live; one for anyone does not
    page.get_by_role("link", name="My groups", exact=True).click()
    page.wait_for_selector("[data-show='groups'][aria-current='page']")
    page.wait_for_selector('#live-status[data-state="open"]')
    group_save(tenant_id=world.tenant.pk, name="leads", data={"agents": ["routed"]},
               actor=SYSTEM, create=False)
    demo_agent_ensure(world.tenant, name="routed", on_exhaustion="fail")
    for_anyone = waiting(world, refund("A-2", 100))
    for_leads = waiting(world, refund("A-2", 150), agent="routed")
    page.wait_for_selector(f"[data-card-key='approval-{for_leads.pk}']")
    assert f"approval-{for_anyone.pk}" not in card_keys(page)
    assert reviewer.js_errors == [] and reviewer.csp_violations() == []
