"""Webhook deliveries end to end, in-process: the real runner brings tasks to each
state a person must act on, the outbox row commits with the transition, and a real
HTTP receiver gets every event once per delivery id, signed, again after a 500."""
from __future__ import annotations

import time
from typing import Any

import pytest
from cloudevents.v1.http import from_http
from django.db import transaction
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from approvals_app.models import Approval, Question, Reconciliation
from foundations.actors import SYSTEM
from notify_app.models import Delivery, Notification, WebhookSubscription
from notify_app.services.delivery import delivery_attempt
from notify_app.signing import verify
from tasks_app.machine import TaskStatus
from tasks_app.store.tasks import task_transition
from tests.factories import submit
from tests.helpers import drive

from .conftest import ADM, Tenancy, WebhookReceiver, drain, failed_task, subscribe

pytestmark = pytest.mark.django_db


def test_each_event_reaches_the_receiver_once_signed(main: Tenancy,
                                                     webhook_receiver: WebhookReceiver) -> None:
    hook = subscribe(main, webhook_receiver.url())
    approval_task, approval = main.waiting_for_approval()
    question_task, question = main.waiting_for_input()
    rec_task, rec = main.in_reconciliation()
    escalated = main.escalated()
    failed = failed_task(main)
    assert failed.status == TaskStatus.FAILED
    drain()

    accepted = webhook_receiver.accepted()
    assert len(accepted) == 5 and all(len(copies) == 1 for copies in accepted.values())
    by_type = {r[0].json["type"]: r[0] for r in accepted.values()}
    assert set(by_type) == {"approval_requested", "question_asked", "reconciliation_opened",
                            "task_escalated", "task_failed"}
    for received in by_type.values():
        assert verify(hook["secret"], received.raw, received.headers["x-tether-signature"])
        assert not verify("whsec_wrong", received.raw, received.headers["x-tether-signature"])
        assert received.headers["x-tether-event"] == received.json["type"]
        body = received.json
        assert set(body) == {"id", "type", "created_at", "tenant", "task", "request"}
        assert body["tenant"] == main.tenant.name
        assert set(body["task"]) >= {"id", "status", "goal", "url"}
        assert body["task"]["url"].endswith(f"/tasks/{body['task']['id']}/")

    approval_body = by_type["approval_requested"].json
    assert approval_body["task"] == {**approval_body["task"], "id": approval_task.pk,
                                     "status": "WAITING_FOR_APPROVAL"}
    assert approval_body["request"]["id"] == approval.pk
    assert approval_body["request"]["tool"] == "issue_refund"
    assert approval_body["request"]["args"] == approval.args
    question_body = by_type["question_asked"].json
    assert (question_body["task"]["id"], question_body["request"]["id"],
            question_body["request"]["question"]) == (question_task.pk, question.pk,
                                                      question.question)
    rec_body = by_type["reconciliation_opened"].json
    assert (rec_body["task"]["id"], rec_body["request"]["id"]) == (rec_task.pk, rec.pk)
    assert by_type["task_escalated"].json["task"] == {
        **by_type["task_escalated"].json["task"], "id": escalated.pk,
        "status": "WAITING_FOR_HUMAN"}
    assert by_type["task_failed"].json["task"]["status"] == "FAILED"
    # the event ids are distinct, and the API lists each delivery with its one attempt
    assert len({r.json["id"] for r in by_type.values()}) == 5
    page = main.client(ADM).get(f"/api/v1/webhooks/{hook['id']}/deliveries").json()
    assert {d["id"] for d in page["results"]} == set(accepted)
    assert all(d["status"] == "succeeded" and len(d["attempt_log"]) == 1
               and d["attempt_log"][0]["status_code"] == 200 for d in page["results"])


def test_a_500_is_retried_with_the_same_delivery_id(main: Tenancy,
                                                     webhook_receiver: WebhookReceiver) -> None:
    hook = subscribe(main, webhook_receiver.url(), events=["question_asked"])
    webhook_receiver.answer(500, 200)
    main.waiting_for_input()
    drain()

    received = webhook_receiver.all()
    assert [r.status for r in received] == [500, 200]
    assert received[0].delivery_id == received[1].delivery_id
    assert received[0].raw == received[1].raw  # the same body, signed again
    assert all(verify(hook["secret"], r.raw, r.headers["x-tether-signature"]) for r in received)
    assert list(webhook_receiver.accepted()) == [received[0].delivery_id]

    [delivery] = main.client(ADM).get(f"/api/v1/webhooks/{hook['id']}/deliveries").json()[
        "results"]
    assert delivery["status"] == "succeeded" and delivery["attempts"] == 2
    assert [(a["outcome"], a["status_code"]) for a in delivery["attempt_log"]] == [
        ("retry", 500), ("succeeded", 200)]
    assert "HTTP 500" in delivery["attempt_log"][0]["error"]


def test_a_receivers_retry_after_is_honoured(main: Tenancy,
                                             webhook_receiver: WebhookReceiver) -> None:
    subscribe(main, webhook_receiver.url(), events=["question_asked"])
    webhook_receiver.answer(429, 200)
    webhook_receiver.retry_after = "120"
    main.waiting_for_input()
    delivery = Delivery.objects.get()
    assert delivery_attempt(delivery.pk) == "retry"

    delivery.refresh_from_db()
    last = delivery.attempt_log.get()
    # our own backoff here is at most 0.2 s: the receiver's two minutes win
    assert (delivery.next_attempt_at - last.started_at).total_seconds() >= 119
    assert delivery.status == "pending" and delivery.last_status_code == 429
    assert delivery_attempt(delivery.pk) == "skipped"  # not due before then
    assert [r.status for r in webhook_receiver.all()] == [429]


def test_a_4xx_is_not_retried_and_retries_stop_at_the_max_age(
        main: Tenancy, webhook_receiver: WebhookReceiver, settings: Any) -> None:
    subscribe(main, webhook_receiver.url(), events=["question_asked"])
    webhook_receiver.answer(410)
    main.waiting_for_input()
    drain()
    assert [r.status for r in webhook_receiver.all()] == [410]
    assert Delivery.objects.get().status == "failed"

    settings.TETHER_WEBHOOK_MAX_AGE_S = 0.5
    webhook_receiver.answer(503)
    main.waiting_for_input()
    drain()
    last = Delivery.objects.order_by("-id").first()
    assert last is not None and last.status == "failed" and "gave up after" in last.last_error
    assert last.attempts >= 2 and last.attempts == last.attempt_log.count()


def test_the_outbox_row_rolls_back_with_its_transition(main: Tenancy,
                                                       webhook_receiver: WebhookReceiver) -> None:
    subscribe(main, webhook_receiver.url(), events=["task_failed"])
    task = main.created_task()

    class Abort(Exception):
        pass

    with pytest.raises(Abort), transaction.atomic():
        task_transition(task_id=task.pk, event="task_started", actor=SYSTEM)
        task_transition(task_id=task.pk, event="fatal_error", actor=SYSTEM)
        assert Notification.objects.filter(task=task).count() == 1  # written in the transaction
        raise Abort()
    assert not Notification.objects.filter(task=task).exists()
    assert not Delivery.objects.exists()


def test_a_url_the_policy_refuses_at_delivery_is_refused_not_retried(
        main: Tenancy, webhook_receiver: WebhookReceiver, settings: Any) -> None:
    hook = subscribe(main, webhook_receiver.url(), events=["question_asked"])
    settings.TETHER_EGRESS_ALLOW = []  # the operator no longer allows loopback
    main.waiting_for_input()
    drain()
    assert webhook_receiver.all() == []
    delivery = Delivery.objects.get(subscription_id=hook["id"])
    assert delivery.status == "refused" and delivery.attempts == 1
    assert "outbound-address policy" in delivery.last_error


def test_slack_format_sends_a_text(main: Tenancy, webhook_receiver: WebhookReceiver) -> None:
    hook = subscribe(main, webhook_receiver.url(), events=["approval_requested"], format="slack")
    task, approval = main.waiting_for_approval()
    drain()
    [received] = webhook_receiver.all()
    assert set(received.json) == {"text"}
    assert f"task {task.pk}" in received.json["text"] and "issue_refund" in received.json["text"]
    assert verify(hook["secret"], received.raw, received.headers["x-tether-signature"])


def test_inactive_or_uninterested_subscriptions_get_nothing(
        main: Tenancy, webhook_receiver: WebhookReceiver) -> None:
    subscribe(main, webhook_receiver.url("/paused"), active=False)
    subscribe(main, webhook_receiver.url("/failures"), events=["task_failed"])
    main.waiting_for_input()
    task = submit(main.tenant, [{"final": {"ok": True}}], requester=main.requester)
    assert drive(task.pk).status == TaskStatus.SUCCEEDED
    drain()
    assert webhook_receiver.all() == [] and not Notification.objects.exists()


def test_nothing_is_written_for_a_tenant_without_subscriptions(main: Tenancy) -> None:
    main.waiting_for_approval()
    assert not Notification.objects.exists() and not Delivery.objects.exists()
    assert Approval.objects.count() == 1 and not Question.objects.exists()
    assert not Reconciliation.objects.exists() and not WebhookSubscription.objects.exists()


def test_the_documented_snippet_verifies_a_delivery(main: Tenancy,
                                                 webhook_receiver: WebhookReceiver) -> None:
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs/how-to/notifications.md").read_text()
    snippet = page.split("```python\nimport hashlib", 1)[1].split("```", 1)[0]
    namespace: dict[str, Any] = {}
    exec("import hashlib" + snippet, namespace)  # noqa: S102 - our own documentation's code
    hook = subscribe(main, webhook_receiver.url(), events=["question_asked"])
    main.waiting_for_input()
    drain()
    [received] = webhook_receiver.all()
    header = received.headers["x-tether-signature"]
    assert namespace["verified"](hook["secret"], received.raw, header)
    assert not namespace["verified"](hook["secret"], received.raw + b" ", header)


def test_a_paused_webhook_sends_nothing_more(main: Tenancy,
                                             webhook_receiver: WebhookReceiver) -> None:
    hook = subscribe(main, webhook_receiver.url(), events=["question_asked"])
    main.waiting_for_input()  # its delivery is in the outbox, not sent yet
    paused = main.client(ADM).patch(f"/api/v1/webhooks/{hook['id']}", {"active": False},
                                    format="json")
    assert paused.status_code == 200
    drain()
    assert webhook_receiver.all() == []
    delivery = Delivery.objects.get()
    assert delivery.status == "failed" and "paused" in delivery.last_error


def test_every_delivery_verifies_as_a_standard_webhook(
        main: Tenancy, webhook_receiver: WebhookReceiver) -> None:
    """The receiver verifies with the `standardwebhooks` package alone; the id
    is the delivery's, the same on a retry; a changed body or an old timestamp
    is refused."""
    hook = subscribe(main, webhook_receiver.url(), events=["question_asked"])
    assert Webhook(hook["secret"])  # a secret the specification's libraries accept
    webhook_receiver.answer(500, 200)
    main.waiting_for_input()
    drain()
    first, second = webhook_receiver.all()
    for received in (first, second):
        assert Webhook(hook["secret"]).verify(received.raw, received.headers)["type"] == (
            "question_asked")
        assert received.headers["webhook-id"] == received.delivery_id
    assert first.headers["webhook-id"] == second.headers["webhook-id"]
    with pytest.raises(WebhookVerificationError):
        Webhook(hook["secret"]).verify(first.raw + b" ", first.headers)
    stale = {**first.headers, "webhook-timestamp": str(int(time.time()) - 3600)}
    with pytest.raises(WebhookVerificationError):
        Webhook(hook["secret"]).verify(first.raw, stale)


def test_cloudevents_format_sends_a_structured_event(
        main: Tenancy, webhook_receiver: WebhookReceiver) -> None:
    hook = subscribe(main, webhook_receiver.url(), events=["approval_requested"],
                     format="cloudevents")
    task, _approval = main.waiting_for_approval()
    drain()
    [received] = webhook_receiver.all()
    assert received.headers["content-type"] == "application/cloudevents+json"
    event = from_http(received.headers, received.raw)  # the CloudEvents SDK parses it
    assert event["specversion"] == "1.0"
    assert event["type"] == "dev.tether.approval_requested"
    assert event["source"] == f"urn:tether:tenant:{main.tenant.name}"
    assert event["subject"] == f"tasks/{task.pk}"
    notification = Notification.objects.get()
    assert event["id"] == str(notification.uid)
    assert event.data["task"]["id"] == task.pk and event.data["request"]["tool"]
    assert Webhook(hook["secret"]).verify(received.raw, received.headers)
    assert verify(hook["secret"], received.raw, received.headers["x-tether-signature"])


def test_an_unknown_format_is_a_field_error(main: Tenancy,
                                            webhook_receiver: WebhookReceiver) -> None:
    answer = main.client(ADM).post("/api/v1/webhooks", {
        "url": webhook_receiver.url(), "events": ["question_asked"], "format": "cloudevent"},
        format="json")
    assert answer.status_code == 400 and "format" in answer.json()["error"]["details"]
    assert not WebhookSubscription.objects.exists()
