"""Production mode: a real Celery worker runs the task, the outbox row commits with
its transition, and the same worker delivers it after commit (and again after the
receiver answered 500), with nothing sent from this test process."""
from __future__ import annotations

import pytest

from notify_app.models import Delivery
from notify_app.services.subscriptions import webhook_create
from notify_app.signing import verify
from tasks_app.machine import TaskStatus
from tasks_app.models import Task
from tests.factories import actor_of, submit
from tests.helpers import wait_for

from .conftest import WebhookReceiver

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_a_worker_delivers_the_event_and_retries_a_500(
        world, celery_workers, webhook_receiver: WebhookReceiver) -> None:
    created = webhook_create(tenant_id=world.tenant.pk, url=webhook_receiver.url(),
                             events=["question_asked"], actor=actor_of(world.users["admin"]))
    webhook_receiver.answer(500, 200)
    celery_workers.start(env={"TETHER_WEBHOOK_BACKOFF_BASE_S": "0.2",
                              "TETHER_WEBHOOK_BACKOFF_MAX_S": "1"})
    task = submit(world.tenant, [{"ask": "Which order?"}, {"final": {"ok": True}}])

    wait_for(lambda: Task.objects.get(pk=task.pk).status == TaskStatus.WAITING_FOR_INPUT,
             timeout=60, message="the task to ask its question")
    wait_for(lambda: Delivery.objects.filter(status="succeeded").exists(), timeout=60,
             message="the worker to deliver the event")

    received = webhook_receiver.all()
    assert [r.status for r in received] == [500, 200], celery_workers.logs()
    assert received[0].delivery_id == received[1].delivery_id
    body = received[1].json
    assert (body["type"], body["task"]["id"], body["request"]["question"]) == (
        "question_asked", task.pk, "Which order?")
    assert verify(created.secret, received[1].raw, received[1].headers["x-tether-signature"])
    delivery = Delivery.objects.get()
    assert [a.status_code for a in delivery.attempt_log.all()] == [500, 200]


def test_a_delivery_whose_worker_died_mid_send_is_sent_again(
        world, celery_workers, webhook_receiver: WebhookReceiver) -> None:
    """The worker is killed while the receiver holds its request: the claim runs
    out, the recovery sweep (beat, on a second worker) dispatches the delivery
    again, and the receiver gets it under the same delivery id."""
    webhook_create(tenant_id=world.tenant.pk, url=webhook_receiver.url(),
                   events=["question_asked"], actor=actor_of(world.users["admin"]))
    release = webhook_receiver.hold_next()
    knobs = {"TETHER_WEBHOOK_TIMEOUT_S": "2"}
    first = celery_workers.start(env=knobs)
    task = submit(world.tenant, [{"ask": "Which order?"}, {"final": {"ok": True}}])
    assert webhook_receiver.arrived.wait(60), celery_workers.logs()
    first.kill()
    release.set()  # the answer goes nowhere: the sender is dead
    assert Delivery.objects.get().status == "pending"

    celery_workers.start(beat=True, env=knobs)
    wait_for(lambda: Delivery.objects.filter(status="succeeded").exists(), timeout=90,
             message="the sweep to send the delivery again")
    received = webhook_receiver.all()
    assert len(received) == 2 and received[0].delivery_id == received[1].delivery_id
    assert received[1].json["task"]["id"] == task.pk
    assert list(webhook_receiver.accepted()) == [received[1].delivery_id]
    assert Delivery.objects.get().attempt_log.count() == 1  # the dead worker recorded nothing
