"""The periodic part (run by the recovery sweep through its hook): the approval SLA
warning at 80 % fires once per approval, a stuck outbox is dispatched again; and
the same events by e-mail to an opted-in tenant's reviewers (Django's locmem
backend, which pytest-django installs)."""
from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.utils import timezone

from accounts_app.models import Role
from approvals_app.models import Approval
from notify_app.dispatch import MANUAL_DELIVERIES
from notify_app.models import Delivery, Notification, SlaWarning
from notify_app.services.delivery import delivery_attempt
from notify_app.services.sweep import stuck_deliveries_dispatch
from notify_app.signing import verify
from tasks_app.runner.recovery import recovery_sweep

from .conftest import ADM, Tenancy, WebhookReceiver, drain, subscribe

pytestmark = pytest.mark.django_db


def _sla(approval: Approval, *, elapsed_s: float, left_s: float) -> None:
    """Place the approval `elapsed_s` into an SLA with `left_s` to go."""
    now = timezone.now()
    Approval.objects.filter(pk=approval.pk).update(
        created_at=now - timedelta(seconds=elapsed_s), expires_at=now + timedelta(seconds=left_s))


def test_the_sla_warning_fires_once_at_80_percent(main: Tenancy,
                                                  webhook_receiver: WebhookReceiver) -> None:
    hook = subscribe(main, webhook_receiver.url(), events=["approval_sla_warning"])
    _, late = main.waiting_for_approval()
    _, early = main.waiting_for_approval()
    _, no_sla = main.waiting_for_approval()
    _sla(late, elapsed_s=85, left_s=15)  # 85 % of its SLA gone
    _sla(early, elapsed_s=50, left_s=50)  # 50 %
    Approval.objects.filter(pk=no_sla.pk).update(
        created_at=timezone.now() - timedelta(days=30), expires_at=None)  # no SLA at all

    for _ in range(3):
        recovery_sweep()
    drain()
    [received] = webhook_receiver.all()
    body = received.json
    assert body["type"] == "approval_sla_warning"
    assert (body["request"]["id"], body["request"]["kind"]) == (late.pk, "approval")
    assert body["request"]["expires_at"] is not None
    assert verify(hook["secret"], received.raw, received.headers["x-tether-signature"])
    assert list(SlaWarning.objects.values_list("approval_id", flat=True)) == [late.pk]

    _sla(early, elapsed_s=90, left_s=10)  # now the second one crosses 80 %
    recovery_sweep()
    recovery_sweep()
    drain()
    assert [r.json["request"]["id"] for r in webhook_receiver.all()] == [late.pk, early.pk]


def test_an_expired_or_decided_approval_gets_no_warning(main: Tenancy,
                                                        webhook_receiver: WebhookReceiver) -> None:
    subscribe(main, webhook_receiver.url(), events=["approval_sla_warning"])
    _, approval = main.waiting_for_approval()
    _sla(approval, elapsed_s=95, left_s=5)
    Approval.objects.filter(pk=approval.pk).update(status="approved")
    recovery_sweep()
    assert not Notification.objects.exists() and not SlaWarning.objects.exists()


def test_a_stuck_delivery_is_dispatched_again(main: Tenancy,
                                              webhook_receiver: WebhookReceiver) -> None:
    subscribe(main, webhook_receiver.url(), events=["question_asked"])
    main.waiting_for_input()
    delivery = Delivery.objects.get()
    long_ago = timezone.now() - timedelta(minutes=5)
    # a worker claimed it and died: its claim is still held, nobody may send it
    Delivery.objects.filter(pk=delivery.pk).update(
        next_attempt_at=long_ago, claimed_until=timezone.now() + timedelta(minutes=1))
    MANUAL_DELIVERIES.clear()
    assert stuck_deliveries_dispatch() == 0 and delivery_attempt(delivery.pk) == "skipped"
    # the claim ran out: the sweep hands it out again and it is sent once
    Delivery.objects.filter(pk=delivery.pk).update(claimed_until=long_ago)
    recovery_sweep()
    assert [d for d, _ in MANUAL_DELIVERIES] == [delivery.pk]
    assert delivery_attempt(delivery.pk) == "succeeded"
    assert delivery_attempt(delivery.pk) == "skipped"
    assert len(webhook_receiver.all()) == 1


def _with_emails(tenancy: Tenancy) -> dict[str, str]:
    emails = {role: f"{role}@{tenancy.tenant.name}.example" for role in Role.values}
    for role, user in tenancy.users.items():
        get_user_model().objects.filter(pk=user.pk).update(email=emails[role])
    return emails


def test_email_goes_to_the_reviewers_of_an_opted_in_tenant_only(main: Tenancy,
                                                                other: Tenancy) -> None:
    emails = _with_emails(main)
    _with_emails(other)
    response = main.client(ADM).put("/api/v1/notifications/email", {"email_reviewers": True},
                                    format="json")
    assert response.status_code == 200
    task, approval = main.waiting_for_approval()
    other.waiting_for_approval()  # its tenant did not opt in
    drain()

    # one message per reviewer: each carries that reviewer's own signed links
    assert sorted(m.to[0] for m in mail.outbox) == sorted([emails[Role.REVIEWER],
                                                           emails[Role.ADMIN]])
    for message in mail.outbox:
        assert len(message.to) == 1
        assert message.subject == f"[Tether] Approval requested: task {task.pk}"
        assert "issue_refund" in message.body and f"/tasks/{task.pk}/" in message.body
    delivery = Delivery.objects.get(channel="email")
    assert delivery.status == "succeeded" and delivery.attempt_log.count() == 1


def test_email_only_for_the_chosen_events(main: Tenancy, settings: Any) -> None:
    _with_emails(main)
    main.client(ADM).put("/api/v1/notifications/email",
                         {"email_reviewers": True, "email_events": ["task_escalated"]},
                         format="json")
    main.waiting_for_input()
    escalated = main.escalated()
    drain()
    # one message to each of the reviewer and the admin
    assert [m.subject for m in mail.outbox] == [
        f"[Tether] Task escalated to an operator: task {escalated.pk}"] * 2


def test_old_finished_notifications_are_forgotten(main: Tenancy,
                                                  webhook_receiver: WebhookReceiver) -> None:
    subscribe(main, webhook_receiver.url(), events=["question_asked"])
    main.waiting_for_input()
    drain()
    main.waiting_for_input()  # pending: kept whatever its age
    old = timezone.now() - timedelta(days=31)
    Notification.objects.update(created_at=old)
    recovery_sweep()
    [kept] = Notification.objects.all()
    assert kept.deliveries.get().status == "pending"
    assert Delivery.objects.count() == 1
