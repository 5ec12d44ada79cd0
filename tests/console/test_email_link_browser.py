"""The e-mail link's confirmation page in a real browser: the reviewer follows
the Approve link of their e-mail, sees the card, approves with one click; the
same link again, or the link in someone else's browser, shows a refusal."""
from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.core import mail

from accounts_app.models import Role
from approvals_app.models import Approval
from foundations.actors import SYSTEM
from notify_app.models import Delivery
from notify_app.services.delivery import delivery_attempt
from notify_app.services.subscriptions import email_settings_update
from tasks_app.machine import TaskStatus
from tests.factories import submit
from tests.helpers import drive

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

REFUND = {"order_id": "A-1", "amount_cents": 500, "reason": "damaged"}


def test_a_reviewer_approves_from_the_email_link(world, page_as) -> None:
    reviewer = world.users[Role.REVIEWER]
    get_user_model().objects.filter(pk=reviewer.pk).update(email="rev@corp.example")
    email_settings_update(tenant_id=world.tenant.pk, email_reviewers=True, events=[],
                          actor=SYSTEM)
    task = submit(world.tenant, [
        {"tool": "issue_refund", "args": REFUND, "reason": "the parcel arrived broken",
         "cites": ["goal"]},
        {"final": {"ok": True}}], goal="Refund order A-1", requester=world.users[Role.REQUESTER])
    assert drive(task.pk).status == TaskStatus.WAITING_FOR_APPROVAL
    for delivery_id in Delivery.objects.values_list("id", flat=True):
        assert delivery_attempt(delivery_id) == "succeeded"
    [message] = [m for m in mail.outbox if m.to == ["rev@corp.example"]]
    link = re.search(r"^Approve: https?://[^/]+(\S+)$", message.body, re.M).group(1)

    page = page_as(reviewer)
    page.goto(link)
    p = page.page
    p.get_by_role("heading", name="Approve this call?").wait_for()
    card = p.locator("#link-card")
    assert "issue_refund" in card.inner_text() and "the parcel arrived broken" in card.inner_text()
    assert "Refund order A-1" in card.inner_text()
    assert Approval.objects.get(task=task).status == "pending"  # opening decided nothing
    page.shot("email-link-confirm")

    p.get_by_role("button", name="Approve issue_refund").click()
    p.locator("#link-done").get_by_role("heading", name="Approved").wait_for()
    approval = Approval.objects.get(task=task)
    assert (approval.status, approval.channel, approval.decided_by_id) == (
        "approved", "email", reviewer.pk)
    page.shot("email-link-done", phone=False)

    page.goto(link)  # the same link again
    refused = p.locator("#link-refused")
    refused.wait_for()
    assert "already approved" in refused.inner_text()

    forwarded = page_as(world.users[Role.ADMIN])
    forwarded.goto(link)
    forwarded.page.locator("#link-refused").wait_for()
    assert "sent to another reviewer" in forwarded.page.locator("#link-refused").inner_text()
    assert Approval.objects.get(task=task).decided_by_id == reviewer.pk
