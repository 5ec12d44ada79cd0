"""Tenant secrets through the API (admins): stored encrypted, listed by name only,
rotated, deleted; only the tenant's own admins see them, only its own tools and
agents may name them, and server environment variables only when granted."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet
from django.core.management import call_command
from django.core.management.base import CommandError

from accounts_app.models import Role, TenantSecret
from accounts_app.vault.lookup import secret_values
from tasks_app.models import AgentProfile
from tests.api.conftest import Tenancy
from tools_app.models import Tool

ADM = Role.ADMIN
VALUE = "sk-live-0123456789abcdef"
NEW_VALUE = "sk-live-fedcba9876543210"
TOOL = {
    "name": "pay",
    "kind": "http",
    "url": "http://127.0.0.1:9/charge",
    "args_schema": {"type": "object"},
    "secret_headers": {"Authorization": "Bearer {secret:payments}"},
}
AGENT_MODEL = {"backend": "openai", "name": "m", "base_url": "http://127.0.0.1:9/v1"}
TOOLS = ["lookup_order"]


def _store(tenancy: Tenancy, name: str = "payments", value: str = VALUE) -> dict:
    response = tenancy.client(ADM).post(
        "/api/v1/secrets", {"name": name, "value": value}, format="json"
    )
    assert response.status_code == 201, response.content
    return response.json()


def test_an_admin_stores_lists_rotates_and_deletes_a_secret(main: Tenancy) -> None:
    client = main.client(ADM)
    created = _store(main)
    admin = main.users[ADM].username
    assert set(created) == {"name", "created_at", "created_by", "rotated_at", "rotated_by"}
    assert (created["name"], created["created_by"], created["rotated_at"]) == (
        "payments", admin, None)

    listed = client.get("/api/v1/secrets")
    assert listed.status_code == 200 and listed.json() == [created]
    assert client.get("/api/v1/secrets/payments").json() == created

    rotated = client.put("/api/v1/secrets/payments", {"value": NEW_VALUE}, format="json")
    assert rotated.status_code == 200, rotated.content
    assert rotated.json()["rotated_by"] == admin and rotated.json()["rotated_at"] is not None
    assert secret_values(tenant_id=main.tenant.pk, names=["payments"]).get(
        "secret:payments") == NEW_VALUE

    deleted = client.delete("/api/v1/secrets/payments")
    assert deleted.status_code == 204
    assert client.get("/api/v1/secrets/payments").status_code == 404
    assert client.get("/api/v1/secrets").json() == []
    for response in (created, listed, rotated):
        text = str(getattr(response, "content", response))
        assert VALUE not in text and NEW_VALUE not in text


def test_the_value_is_encrypted_at_rest_and_survives_a_key_rotation(main: Tenancy,
                                                                   settings) -> None:
    _store(main)
    row = TenantSecret.objects.get(tenant=main.tenant, name="payments")
    assert VALUE not in row.ciphertext and row.ciphertext != VALUE

    old_key, new_key = settings.TETHER_SECRETS_KEY, Fernet.generate_key().decode()
    settings.TETHER_SECRETS_KEY = new_key  # the old key gone before rotating: unreadable
    assert "cannot be decrypted" in secret_values(
        tenant_id=main.tenant.pk, names=["payments"]).problems["secret:payments"]

    settings.TETHER_SECRETS_KEY = f"{new_key},{old_key}"  # new first, old still decrypts
    call_command("rotate_secrets")
    settings.TETHER_SECRETS_KEY = new_key  # the old key removed
    row.refresh_from_db()
    assert Fernet(new_key.encode()).decrypt(row.ciphertext.encode()).decode() == VALUE
    assert secret_values(tenant_id=main.tenant.pk, names=["payments"]).get(
        "secret:payments") == VALUE


def test_rotate_secrets_reports_a_value_no_key_opens(main: Tenancy, settings) -> None:
    _store(main)
    settings.TETHER_SECRETS_KEY = Fernet.generate_key().decode()
    with pytest.raises(CommandError, match="t-main/payments"):
        call_command("rotate_secrets")
    settings.TETHER_SECRETS_KEY = ""
    with pytest.raises(CommandError, match="TETHER_SECRETS_KEY"):
        call_command("rotate_secrets")


@pytest.mark.parametrize("role", [Role.REQUESTER, Role.OPERATOR, Role.REVIEWER])
def test_only_admins_handle_secrets(main: Tenancy, role: str) -> None:
    _store(main)
    client = main.client(role)
    assert client.get("/api/v1/secrets").status_code == 403
    assert client.get("/api/v1/secrets/payments").status_code == 403
    assert client.post("/api/v1/secrets", {"name": "mine", "value": "v"},
                       format="json").status_code == 403
    assert client.put("/api/v1/secrets/payments", {"value": "v"}, format="json").status_code == 403
    assert client.delete("/api/v1/secrets/payments").status_code == 403
    assert list(TenantSecret.objects.values_list("name", "rotated_at")) == [("payments", None)]


def test_another_tenant_neither_sees_nor_changes_a_secret(main: Tenancy, other: Tenancy) -> None:
    _store(main)
    before = TenantSecret.objects.get(tenant=main.tenant).ciphertext
    client = other.client(ADM)
    assert client.get("/api/v1/secrets").json() == []
    assert client.get("/api/v1/secrets/payments").status_code == 404
    assert client.put("/api/v1/secrets/payments", {"value": "x"}, format="json").status_code == 404
    assert client.delete("/api/v1/secrets/payments").status_code == 404
    assert TenantSecret.objects.get(tenant=main.tenant).ciphertext == before
    # The same name is free in the other tenant: it is another secret.
    _store(other, value="the-other-tenants-value")
    assert secret_values(tenant_id=main.tenant.pk, names=["payments"]).get(
        "secret:payments") == VALUE


def test_another_tenant_cannot_reference_a_secret(main: Tenancy, other: Tenancy) -> None:
    _store(main)
    client = other.client(ADM)
    tool = client.post("/api/v1/tools", TOOL, format="json")
    assert tool.status_code == 400
    assert tool.json()["error"]["details"]["secret_headers"] == [
        "no secret named 'payments' in this tenant"]
    agent = client.post("/api/v1/agents", {
        "name": "thief", "tools": TOOLS, "model": {**AGENT_MODEL, "api_key_secret": "payments",
                                   "fallback": {"name": "f", "api_key_secret": "payments"}},
    }, format="json")
    assert agent.status_code == 400
    assert set(agent.json()["error"]["details"]) == {"model.api_key_secret",
                                                     "model.fallback.api_key_secret"}
    assert not Tool.objects.filter(tenant=other.tenant, name="pay").exists()
    assert not AgentProfile.objects.filter(tenant=other.tenant, name="thief").exists()
    # The owner may.
    assert main.client(ADM).post("/api/v1/tools", TOOL, format="json").status_code == 201


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "Payments", "value": VALUE}, "name"),
        ({"name": "has space", "value": VALUE}, "name"),
        ({"name": "x" * 65, "value": VALUE}, "name"),
        ({"name": "1st", "value": VALUE}, "name"),
        ({"name": "ok", "value": ""}, "value"),
        ({"name": "ok"}, "value"),
        ({"name": "ok", "value": "line\nbreak"}, "value"),
        ({"name": "ok", "value": "pässword"}, "value"),
        ({"name": "ok", "value": "v" * 5000}, "value"),
        ({"name": "ok", "value": ["a list"]}, "value"),
    ],
)
def test_a_bad_secret_is_a_400_with_field_errors(main: Tenancy, body: dict, field: str) -> None:
    response = main.client(ADM).post("/api/v1/secrets", body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["details"]
    assert VALUE not in response.content.decode()
    assert not TenantSecret.objects.exists()


def test_a_name_is_stored_once(main: Tenancy) -> None:
    _store(main)
    again = main.client(ADM).post("/api/v1/secrets", {"name": "payments", "value": "x"},
                                  format="json")
    assert again.status_code == 409 and again.json()["error"]["code"] == "secret_exists"
    assert main.client(ADM).put("/api/v1/secrets/nope", {"value": "x"},
                                format="json").status_code == 404


def test_a_secret_in_use_cannot_be_deleted(main: Tenancy) -> None:
    _store(main)
    client = main.client(ADM)
    assert client.post("/api/v1/tools", TOOL, format="json").status_code == 201
    assert client.post("/api/v1/agents", {
        "name": "payer", "tools": TOOLS, "model": {**AGENT_MODEL, "api_key_secret": "payments"}},
        format="json").status_code == 201

    refused = client.delete("/api/v1/secrets/payments")
    assert refused.status_code == 409
    error = refused.json()["error"]
    assert error["code"] == "secret_in_use"
    assert error["details"] == {"tools": ["pay"], "agents": ["payer"]}
    assert TenantSecret.objects.filter(name="payments").exists()

    client.patch("/api/v1/tools/pay", {"secret_headers": {}}, format="json")
    client.patch("/api/v1/agents/payer", {"model": AGENT_MODEL}, format="json")
    assert client.delete("/api/v1/secrets/payments").status_code == 204


def test_no_key_configured_is_a_clear_503_and_nothing_is_stored(main: Tenancy, settings) -> None:
    settings.TETHER_SECRETS_KEY = ""
    response = main.client(ADM).post("/api/v1/secrets", {"name": "p", "value": VALUE},
                                     format="json")
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "secrets_key_missing"
    assert "TETHER_SECRETS_KEY" in response.json()["error"]["message"]
    assert not TenantSecret.objects.exists()


@pytest.mark.parametrize(
    ("grants", "variable", "allowed"),
    [
        ((), "OLLAMA_API_KEY", False),
        (("OLLAMA_API_KEY",), "OLLAMA_API_KEY", True),
        (("t-main:OLLAMA_API_KEY",), "OLLAMA_API_KEY", True),
        (("t-other:OLLAMA_API_KEY",), "OLLAMA_API_KEY", False),
        ((), "SECRET_KEY", False),
        # the server's own credentials are never granted, even when listed
        (("SECRET_KEY",), "SECRET_KEY", False),
        (("t-main:DATABASE_URL",), "DATABASE_URL", False),
        (("TETHER_SECRETS_KEY",), "TETHER_SECRETS_KEY", False),
    ],
)
def test_api_key_env_needs_the_operators_grant(main: Tenancy, settings, grants: tuple,
                                               variable: str, allowed: bool) -> None:
    settings.TETHER_ENV_GRANTS = grants
    response = main.client(ADM).post("/api/v1/agents", {
        "name": "envy", "tools": TOOLS, "model": {**AGENT_MODEL, "api_key_env": variable},
    }, format="json")
    if allowed:
        assert response.status_code == 201, response.content
    else:
        assert response.status_code == 400
        (message,) = response.json()["error"]["details"]["model.api_key_env"]
        assert "not granted" in message
        assert not AgentProfile.objects.filter(name="envy").exists()
