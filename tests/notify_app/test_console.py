"""The console's Webhooks page: admins add a webhook (its secret shown once, on the
answer to the create), edit its events, see its deliveries with every attempt,
delete it, and turn reviewer e-mail on; other roles are refused, other tenants'
webhooks are out of reach."""
from __future__ import annotations

import pytest
from django.test import Client

from accounts_app.models import Role
from notify_app.models import NotificationSettings, WebhookSubscription
from notify_app.signing import verify

from .conftest import Tenancy, WebhookReceiver, drain

pytestmark = pytest.mark.django_db


def client_for(user) -> Client:  # type: ignore[no-untyped-def]
    c = Client()
    c.force_login(user)
    return c


def test_an_admin_adds_edits_watches_and_deletes_a_webhook(
        main: Tenancy, webhook_receiver: WebhookReceiver) -> None:
    c = client_for(main.users[Role.ADMIN])
    assert c.get("/webhooks/").status_code == 200

    refused = c.post("/webhooks/", {"url": "http://10.0.0.1/hook", "events": ["task_failed"],
                                    "format": "json"})
    assert refused.status_code == 400 and "outbound-address policy" in refused.content.decode()
    assert not WebhookSubscription.objects.exists()

    created = c.post("/webhooks/", {"url": webhook_receiver.url(), "format": "json",
                                    "events": ["question_asked", "task_failed"],
                                    "active": "on"})
    assert created.status_code == 201
    webhook = WebhookSubscription.objects.get()
    page = created.content.decode()
    secret = page.split('<code class="secret">', 1)[1].split("</code>", 1)[0]
    assert secret.startswith("whsec_")
    assert secret not in c.get("/webhooks/").content.decode()
    assert secret not in c.get(f"/webhooks/{webhook.pk}/").content.decode()

    edited = c.post(f"/webhooks/{webhook.pk}/", {"url": webhook.url, "format": "json",
                                                  "events": ["question_asked"], "active": "on"})
    assert edited.status_code == 302
    webhook.refresh_from_db()
    assert webhook.events == ["question_asked"]

    webhook_receiver.answer(502, 200)
    main.waiting_for_input()
    drain()
    [first, second] = webhook_receiver.all()
    assert verify(secret, second.raw, second.headers["x-tether-signature"])
    detail = c.get(f"/webhooks/{webhook.pk}/").content.decode()
    assert second.delivery_id in detail
    assert "HTTP 502" in detail and "succeeded" in detail and "question_asked" in detail

    assert c.post(f"/webhooks/{webhook.pk}/delete/").status_code == 302
    assert not WebhookSubscription.objects.exists()


def test_an_admin_turns_reviewer_email_on(main: Tenancy) -> None:
    c = client_for(main.users[Role.ADMIN])
    assert c.post("/webhooks/email/", {"email_reviewers": "on",
                                       "email_events": ["task_failed"]}).status_code == 302
    prefs = NotificationSettings.objects.get(tenant=main.tenant)
    assert prefs.email_reviewers and prefs.email_events == ["task_failed"]


@pytest.mark.parametrize("role", [Role.REQUESTER, Role.OPERATOR, Role.REVIEWER])
def test_other_roles_are_refused(main: Tenancy, role: str) -> None:
    c = client_for(main.users[role])
    assert c.get("/webhooks/").status_code == 403
    assert c.post("/webhooks/", {"url": "http://127.0.0.1:9/h", "events": ["task_failed"],
                                 "format": "json"}).status_code == 403
    assert not WebhookSubscription.objects.exists()
    assert "/webhooks/" not in c.get("/").content.decode()  # no menu entry either


def test_another_tenants_webhook_is_out_of_reach(main: Tenancy, other: Tenancy,
                                                 webhook_receiver: WebhookReceiver) -> None:
    c = client_for(main.users[Role.ADMIN])
    c.post("/webhooks/", {"url": webhook_receiver.url(), "events": ["task_failed"],
                          "format": "json", "active": "on"})
    webhook = WebhookSubscription.objects.get()
    outsider = client_for(other.users[Role.ADMIN])
    assert webhook_receiver.url() not in outsider.get("/webhooks/").content.decode()
    assert outsider.get(f"/webhooks/{webhook.pk}/").status_code == 404
    assert outsider.post(f"/webhooks/{webhook.pk}/", {
        "url": webhook.url, "events": ["question_asked"], "format": "json"}).status_code == 404
    assert outsider.post(f"/webhooks/{webhook.pk}/delete/").status_code == 404
    webhook.refresh_from_db()
    assert webhook.events == ["task_failed"]
