"""The console's Secrets page: admins store, rotate and delete; the page never
shows a value; other roles are refused and other tenants' secrets are out of reach."""

from __future__ import annotations

import pytest
from django.test import Client

from accounts_app.models import Role, TenantSecret
from accounts_app.vault.lookup import secret_values
from tests.console.test_admin_pages import AGENT_FORM
from tests.factories import TenantFactory, make_user
from tests.fakes.runtime import add_tool

pytestmark = pytest.mark.django_db

VALUE = "console-s3cret-value"


def client_for(user) -> Client:  # type: ignore[no-untyped-def]
    c = Client()
    c.force_login(user)
    return c


def _value(tenant, name: str) -> str:  # type: ignore[no-untyped-def]
    return secret_values(tenant_id=tenant.pk, names=[name]).get(f"secret:{name}")


def test_an_admin_stores_rotates_and_deletes_a_secret(world):
    c = client_for(world.users[Role.ADMIN])
    page = c.get("/secrets/")
    assert page.status_code == 200 and "Store a secret" in page.content.decode()

    bad = c.post("/secrets/", {"name": "Not A Slug", "value": VALUE})
    assert bad.status_code == 400
    assert "lower-case letters" in bad.content.decode() and VALUE not in bad.content.decode()
    assert not TenantSecret.objects.exists()

    stored = c.post("/secrets/", {"name": "shipping", "value": VALUE})
    assert stored.status_code == 302 and stored["Location"] == "/secrets/"
    listed = c.get("/secrets/").content.decode()
    assert "shipping" in listed and VALUE not in listed
    assert _value(world.tenant, "shipping") == VALUE

    again = c.post("/secrets/", {"name": "shipping", "value": VALUE})
    assert again.status_code == 409 and VALUE not in again.content.decode()

    rotated = c.post("/secrets/shipping/rotate/", {"value": "rotated-value"})
    assert rotated.status_code == 302
    assert _value(world.tenant, "shipping") == "rotated-value"
    assert "rotated-value" not in c.get("/secrets/").content.decode()

    add_tool(world.tenant, "ship", kind="http", url="http://127.0.0.1:9/s",
             secret_headers={"Authorization": "{secret:shipping}"})
    in_use = c.post("/secrets/shipping/delete/")
    assert in_use.status_code == 409 and "tool ship" in in_use.content.decode()
    world.tenant.tools.filter(name="ship").delete()
    assert c.post("/secrets/shipping/delete/").status_code == 302
    assert not TenantSecret.objects.exists()


@pytest.mark.parametrize("role", [Role.REQUESTER, Role.OPERATOR, Role.REVIEWER])
def test_other_roles_are_refused(world, role):
    c = client_for(world.users[role])
    assert "/secrets/" not in c.get("/").content.decode()  # not in the navigation
    assert c.get("/secrets/").status_code == 403
    assert c.post("/secrets/", {"name": "mine", "value": VALUE}).status_code == 403
    assert not TenantSecret.objects.exists()


def test_another_tenants_admin_cannot_touch_a_secret(world):
    client_for(world.users[Role.ADMIN]).post("/secrets/", {"name": "shipping", "value": VALUE})
    outsider = client_for(make_user(TenantFactory(name="t-out"), Role.ADMIN))

    assert "shipping" not in outsider.get("/secrets/").content.decode()
    assert outsider.post("/secrets/shipping/rotate/", {"value": "x"}).status_code == 404
    assert outsider.post("/secrets/shipping/delete/").status_code == 404
    assert _value(world.tenant, "shipping") == VALUE


def test_an_agent_form_names_its_key_by_secret(world):
    c = client_for(world.users[Role.ADMIN])
    form = {**AGENT_FORM, "backend": "openai", "model_name": "m",
            "base_url": "http://127.0.0.1:9/v1", "api_key_secret": "llm"}
    missing = c.post("/agents/new/", form)
    assert missing.status_code == 400
    assert "no secret named &#x27;llm&#x27; in this tenant" in missing.content.decode()
    env = c.post("/agents/new/", {**form, "api_key_secret": "", "api_key_env": "SECRET_KEY"})
    assert env.status_code == 400 and "not granted" in env.content.decode()

    c.post("/secrets/", {"name": "llm", "value": VALUE})
    assert c.post("/agents/new/", form).status_code == 302
    detail = c.get("/agents/billing/").content.decode()
    assert "<code>llm</code>" in detail and VALUE not in detail
