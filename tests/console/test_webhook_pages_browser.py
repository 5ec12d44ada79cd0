"""The Webhooks page in a real browser: an admin adds a webhook, copies the secret
shown once, and watches a delivery and its attempts on the webhook's page."""
from __future__ import annotations

import pytest

from accounts_app.models import Role
from notify_app.models import Delivery, WebhookSubscription
from notify_app.services.delivery import delivery_attempt
from notify_app.signing import verify
from tasks_app.machine import TaskStatus
from tests.factories import submit
from tests.helpers import drive, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _send_all() -> bool:
    for delivery_id in Delivery.objects.filter(status="pending").values_list("id", flat=True):
        delivery_attempt(delivery_id)
    return not Delivery.objects.filter(status="pending").exists()


def test_an_admin_adds_a_webhook_and_watches_its_deliveries(world, page_as, settings,
                                                           webhook_receiver) -> None:
    settings.TETHER_WEBHOOK_BACKOFF_BASE_S = 0.05
    admin = page_as(world.users[Role.ADMIN])
    page = admin.page
    admin.goto("/webhooks/")
    page.get_by_role("link", name="Webhooks").wait_for()
    form = page.locator("form", has=page.get_by_role("button", name="Add webhook"))
    form.get_by_label("URL").fill(webhook_receiver.url())
    form.get_by_label("Question asked").check()
    form.get_by_label("Approval requested").check()
    form.get_by_label("Format").select_option("json")
    form.get_by_role("button", name="Add webhook").click()

    secret = page.locator("#webhook-secret code.secret").inner_text()
    assert secret.startswith("whsec_")
    admin.shot("webhooks-created", phone=False)
    webhook = WebhookSubscription.objects.get()
    assert webhook.events == ["approval_requested", "question_asked"]

    webhook_receiver.answer(503, 200)
    task = submit(world.tenant, [{"ask": "Which order?"}, {"final": {}}], goal="Ask first")
    assert drive(task.pk).status == TaskStatus.WAITING_FOR_INPUT
    wait_for(_send_all, timeout=15, message="the delivery to settle")
    [failed, ok] = webhook_receiver.all()
    assert verify(secret, ok.raw, ok.headers["x-tether-signature"])

    admin.goto("/webhooks/")
    assert secret not in page.content()
    page.get_by_role("link", name=webhook.url).click()
    row = page.locator(f'tr[data-delivery="{ok.delivery_id}"]')
    assert "question_asked" in row.inner_text() and "succeeded" in row.inner_text()
    assert "HTTP 503" in row.inner_text() and "HTTP 200" in row.inner_text()
    admin.shot("webhook-deliveries")
    assert admin.js_errors == [] and admin.csp_violations() == []
