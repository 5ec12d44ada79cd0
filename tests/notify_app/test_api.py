"""The webhook endpoints: admins only, one tenant's webhooks invisible to another,
URLs checked with the outbound-address policy, the secret shown once and sealed."""
from __future__ import annotations

import pytest

from accounts_app.models import Role
from accounts_app.vault.keyring import unseal
from notify_app.models import WebhookSubscription

from .conftest import ADM, ALL_EVENTS, Tenancy, WebhookReceiver, subscribe

pytestmark = pytest.mark.django_db


def test_create_shows_the_secret_once_and_stores_it_sealed(
        main: Tenancy, webhook_receiver: WebhookReceiver) -> None:
    created = subscribe(main, webhook_receiver.url(), events=["task_failed", "question_asked"],
                        description="on-call")
    secret = created.pop("secret")
    assert secret.startswith("whsec_") and len(secret) > 30
    assert created["events"] == ["question_asked", "task_failed"]  # canonical order
    assert (created["format"], created["active"], created["description"]) == (
        "json", True, "on-call")
    client = main.client(ADM)
    listed = client.get("/api/v1/webhooks")
    detail = client.get(f"/api/v1/webhooks/{created['id']}")
    assert listed.json() == [created] and detail.json() == created
    for response in (listed, detail):
        assert secret not in response.content.decode()
    row = WebhookSubscription.objects.get(pk=created["id"])
    assert secret not in row.secret_sealed and unseal(row.secret_sealed) == secret


@pytest.mark.parametrize("url", [
    "http://127.0.0.2:8080/hook",  # loopback the operator did not allow
    "http://10.1.2.3/hook",
    "http://169.254.169.254/latest/meta-data",
    "http://[::ffff:10.0.0.1]/hook",
    "ftp://example.com/hook",
    "not a url",
])
def test_a_url_the_policy_refuses_is_a_400_and_nothing_is_stored(main: Tenancy,
                                                                 url: str) -> None:
    response = main.client(ADM).post("/api/v1/webhooks", {"url": url, "events": ALL_EVENTS},
                                     format="json")
    assert response.status_code == 400, response.content
    assert "url" in response.json()["error"]["details"]
    assert not WebhookSubscription.objects.exists()


@pytest.mark.parametrize("body, field", [
    ({"events": ["approval_requested"]}, "url"),
    ({"url": "http://127.0.0.1:9/h", "events": []}, "events"),
    ({"url": "http://127.0.0.1:9/h", "events": ["nope"]}, "events"),
    ({"url": "http://127.0.0.1:9/h", "events": "approval_requested"}, "events"),
    ({"url": "http://127.0.0.1:9/h", "events": ["task_failed"], "format": "xml"}, "format"),
    ({"url": "http://127.0.0.1:9/" + "a" * 2100, "events": ["task_failed"]}, "url"),
])
def test_bad_input_is_a_400_with_field_errors(main: Tenancy, body: dict, field: str) -> None:
    response = main.client(ADM).post("/api/v1/webhooks", body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["details"]
    assert not WebhookSubscription.objects.exists()


def test_patch_and_delete(main: Tenancy, webhook_receiver: WebhookReceiver) -> None:
    created = subscribe(main, webhook_receiver.url())
    client = main.client(ADM)
    url = f"/api/v1/webhooks/{created['id']}"
    changed = client.patch(url, {"events": ["task_failed"], "active": False}, format="json")
    assert changed.status_code == 200, changed.content
    assert (changed.json()["events"], changed.json()["active"], changed.json()["url"]) == (
        ["task_failed"], False, created["url"])
    refused = client.patch(url, {"url": "http://10.0.0.1/x"}, format="json")
    assert refused.status_code == 400 and "url" in refused.json()["error"]["details"]
    assert client.get(url).json()["url"] == created["url"]
    assert client.delete(url).status_code == 204
    assert client.get(url).status_code == 404
    assert client.get("/api/v1/webhooks").json() == []


@pytest.mark.parametrize("role", [Role.REQUESTER, Role.OPERATOR, Role.REVIEWER])
def test_only_admins_manage_webhooks(main: Tenancy, webhook_receiver: WebhookReceiver,
                                     role: str) -> None:
    created = subscribe(main, webhook_receiver.url())
    client = main.client(role)
    assert client.get("/api/v1/webhooks").status_code == 403
    assert client.post("/api/v1/webhooks", {"url": webhook_receiver.url(),
                                            "events": ALL_EVENTS}, format="json").status_code == 403
    for method in ("get", "patch", "delete"):
        assert getattr(client, method)(f"/api/v1/webhooks/{created['id']}").status_code == 403
    assert client.get(f"/api/v1/webhooks/{created['id']}/deliveries").status_code == 403
    assert client.put("/api/v1/notifications/email", {"email_reviewers": True},
                      format="json").status_code == 403
    assert WebhookSubscription.objects.get().events == ALL_EVENTS


def test_another_tenant_can_neither_see_nor_change_a_webhook(
        main: Tenancy, other: Tenancy, webhook_receiver: WebhookReceiver) -> None:
    created = subscribe(main, webhook_receiver.url())
    outsider = other.client(ADM)
    base = f"/api/v1/webhooks/{created['id']}"
    assert outsider.get("/api/v1/webhooks").json() == []
    assert outsider.get(base).status_code == 404
    assert outsider.get(f"{base}/deliveries").status_code == 404
    assert outsider.patch(base, {"events": ["task_failed"]}, format="json").status_code == 404
    assert outsider.delete(base).status_code == 404
    assert WebhookSubscription.objects.get().events == ALL_EVENTS


def test_email_settings_default_off_and_round_trip(main: Tenancy) -> None:
    client = main.client(ADM)
    assert client.get("/api/v1/notifications/email").json() == {
        "email_reviewers": False, "email_events": []}
    put = client.put("/api/v1/notifications/email",
                     {"email_reviewers": True, "email_events": ["task_failed"]}, format="json")
    assert put.status_code == 200 and put.json() == {"email_reviewers": True,
                                                     "email_events": ["task_failed"]}
    bad = client.put("/api/v1/notifications/email",
                     {"email_reviewers": True, "email_events": ["x"]}, format="json")
    assert bad.status_code == 400 and "email_events" in bad.json()["error"]["details"]
    assert client.get("/api/v1/notifications/email").json()["email_events"] == ["task_failed"]


def test_rotate_secrets_re_encrypts_webhook_secrets_too(
        main: Tenancy, webhook_receiver: WebhookReceiver, settings) -> None:
    from cryptography.fernet import Fernet
    from django.core.management import call_command

    created = subscribe(main, webhook_receiver.url())
    old_key, new_key = settings.TETHER_SECRETS_KEY, Fernet.generate_key().decode()
    settings.TETHER_SECRETS_KEY = f"{new_key},{old_key}"
    call_command("rotate_secrets")
    settings.TETHER_SECRETS_KEY = new_key  # the old key removed: still readable
    row = WebhookSubscription.objects.get(pk=created["id"])
    assert unseal(row.secret_sealed) == created["secret"]
