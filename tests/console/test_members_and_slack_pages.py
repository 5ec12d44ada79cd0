"""The Members page: an admin sets a member's e-mail address, a bad address is
refused with the reason, other roles may not see the page. The Slack card of
the Webhooks page: an admin sets the channel and sees the Request URL."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from accounts_app.models import Role

pytestmark = pytest.mark.django_db


def _as(user) -> Client:  # type: ignore[no-untyped-def]
    client = Client()
    client.force_login(user)
    return client


def test_an_admin_sets_an_address_on_the_members_page(world) -> None:
    admin = _as(world.users[Role.ADMIN])
    reviewer = world.users[Role.REVIEWER]
    page = admin.get("/members/")
    assert page.status_code == 200 and reviewer.username.encode() in page.content

    done = admin.post(f"/members/{reviewer.pk}/email/", {"email": "rev@corp.example"},
                      follow=True)
    assert done.status_code == 200 and b"rev@corp.example" in done.content
    assert get_user_model().objects.get(pk=reviewer.pk).email == "rev@corp.example"

    bad = admin.post(f"/members/{reviewer.pk}/email/", {"email": "nope"})
    assert bad.status_code == 400 and b"a valid e-mail address" in bad.content
    assert get_user_model().objects.get(pk=reviewer.pk).email == "rev@corp.example"

    assert _as(reviewer).get("/members/").status_code == 403
    assert _as(reviewer).post(f"/members/{reviewer.pk}/email/",
                              {"email": "x@y.example"}).status_code == 403


def test_an_admin_connects_slack_on_the_webhooks_page(world) -> None:
    from notify_app.selectors import notification_settings_of

    admin = _as(world.users[Role.ADMIN])
    page = admin.get("/webhooks/")
    assert b"slack-signing-secret" in page.content
    assert f"/api/v1/slack/{world.tenant.name}/interactions".encode() in page.content
    assert admin.post("/webhooks/slack/", {"channel": "C0APPROVALS"}).status_code == 302
    assert notification_settings_of(world.tenant.pk).slack_channel == "C0APPROVALS"
    bad = admin.post("/webhooks/slack/", {"channel": "no spaces allowed"})
    assert bad.status_code == 400 and b"a Slack channel id" in bad.content
    assert notification_settings_of(world.tenant.pk).slack_channel == "C0APPROVALS"


def test_a_member_narrows_their_own_keys_scope_on_the_api_keys_page(world) -> None:
    from accounts_app.models import ApiKey
    from accounts_app.services.accounts import api_key_create
    from approvals_app.services.rules import scope_set
    from audit_app.models import AuditEntry
    from tests.factories import actor_of

    requester = world.users[Role.REQUESTER]
    raw = api_key_create(user=requester)
    key = ApiKey.objects.get(prefix=raw[:12])
    admins_key = ApiKey.objects.get(prefix=api_key_create(user=world.users[Role.ADMIN])[:12])
    scope_set(tenant_id=world.tenant.pk, username=requester.username,
              data={"tools": ["lookup_order", "notify_customer"]},
              actor=actor_of(world.users[Role.ADMIN]))
    page = _as(requester).get("/api-keys/")
    assert page.status_code == 200 and key.prefix.encode() in page.content
    assert raw.encode() not in page.content and admins_key.prefix.encode() not in page.content

    done = _as(requester).post(f"/api-keys/{key.pk}/scope/",
                               {"agents": "support", "tools": "lookup_order"}, follow=True)
    assert done.status_code == 200 and b"saved" in done.content
    key.refresh_from_db()
    assert (key.agents, key.tools) == (["support"], ["lookup_order"])
    assert AuditEntry.objects.filter(kind="api_key", action="updated").count() == 1

    wider = _as(requester).post(f"/api-keys/{key.pk}/scope/",
                                {"agents": "", "tools": "lookup_order, issue_refund"})
    assert wider.status_code == 400 and b"issue_refund" in wider.content
    key.refresh_from_db()
    assert key.tools == ["lookup_order"]

    # another member's key is not found; an admin sees and scopes the tenant's
    assert _as(world.users[Role.REVIEWER]).post(f"/api-keys/{key.pk}/scope/",
                                                {"agents": "", "tools": ""}).status_code == 404
    assert key.prefix.encode() in _as(world.users[Role.ADMIN]).get("/api-keys/").content
