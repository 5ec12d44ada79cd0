"""The audit log of configuration, through the API and the console: every kind
of change is an entry with who, when, what and the diff, in the change's own
transaction; secret values never appear; tenants see only their own entries;
only admins read it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import transaction
from django.test import Client

from accounts_app.models import Role
from accounts_app.services.accounts import membership_revoke, user_deactivate, user_ensure
from audit_app.models import AuditEntry
from audit_app.services import audit_record
from foundations.actors import Actor
from tests.factories import actor_of, make_user

from .conftest import Tenancy

ADM = Role.ADMIN
SECRET_VALUE = "sk-live-do-not-log-me-0123456789"
NEW_VALUE = "sk-live-rotated-never-shown-98765"
TOOL = {"name": "crm_lookup", "description": "Look a customer up.", "kind": "http",
        "url": "http://127.0.0.1:9/crm", "args_schema": {"type": "object"},
        "side_effect": "read", "timeout_s": 5}


def _entries(tenancy: Tenancy, **query: str) -> list[dict[str, Any]]:
    response = tenancy.client(ADM).get("/api/v1/audit", query)
    assert response.status_code == 200, response.content
    return response.json()["results"]


def _one(tenancy: Tenancy, kind: str, name: str, action: str) -> dict[str, Any]:
    found = [e for e in _entries(tenancy, kind=kind, name=name) if e["action"] == action]
    assert len(found) == 1, (kind, name, action, found)
    return found[0]


def _changes(entry: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    return {d["path"]: (d["old"], d["new"]) for d in entry["diff"]}


def test_tool_changes_are_entries_with_who_and_the_diff(main: Tenancy) -> None:
    client = main.client(ADM)
    assert client.post("/api/v1/tools", TOOL, format="json").status_code == 201
    patched = client.patch("/api/v1/tools/crm_lookup", {"timeout_s": 9, "enabled": False},
                           format="json", HTTP_X_REQUEST_ID="req-42")
    assert patched.status_code == 200 and patched["X-Request-Id"] == "req-42"

    created = _one(main, "tool", "crm_lookup", "created")
    assert (created["actor"], created["actor_role"]) == (main.users[ADM].username, "admin")
    assert _changes(created)["url"] == (None, "http://127.0.0.1:9/crm")
    updated = _one(main, "tool", "crm_lookup", "updated")
    assert _changes(updated) == {"timeout_s": (5.0, 9), "enabled": (True, False)}
    assert updated["request_id"] == "req-42"
    # newest first; a refused change (400) records nothing
    assert client.patch("/api/v1/tools/crm_lookup", {"timeout_s": -1},
                        format="json").status_code == 400
    assert [e["action"] for e in _entries(main, kind="tool")][:2] == ["updated", "created"]


def test_agent_edits_and_every_release_change_are_entries(main: Tenancy) -> None:
    client = main.client(ADM)
    agent = {"name": "triage", "model": {"backend": "scripted", "name": "scripted"},
             "tools": ["lookup_order"], "budget": {"max_steps": 10}}
    assert client.post("/api/v1/agents", agent, format="json").status_code == 201
    assert client.patch("/api/v1/agents/triage", {"budget": {"max_steps": 20, "max_cost": "2"}},
                        format="json").status_code == 200
    assert client.patch("/api/v1/agents/triage", {"release": {"candidate": 2, "percent": 10}},
                        format="json").status_code == 200
    assert client.patch("/api/v1/agents/triage", {"release": {"candidate": 2, "percent": 50}},
                        format="json").status_code == 200
    assert client.post("/api/v1/agents/triage/promote", {}, format="json").status_code == 200
    assert client.post("/api/v1/agents/triage/rollback", {"version": 1},
                       format="json").status_code == 200

    actions = [e["action"] for e in _entries(main, kind="agent", name="triage")][::-1]
    assert actions == ["created", "updated", "release_started", "release_changed", "promoted",
                       "rolled_back"]
    edit = _one(main, "agent", "triage", "updated")
    assert _changes(edit)["budget.max_steps"] == (10, 20)
    assert _changes(edit)["budget.max_cost"] == (None, "2")
    assert _changes(edit)["latest_version"] == (1, 2)
    started = _one(main, "agent", "triage", "release_started")
    assert _changes(started)["release"] == (None, {"candidate": 2, "percent": 10})
    assert _changes(_one(main, "agent", "triage", "release_changed"))["release.percent"] == (10, 50)
    promoted = _changes(_one(main, "agent", "triage", "promoted"))
    assert promoted["current_version"] == (1, 2)
    rolled = _changes(_one(main, "agent", "triage", "rolled_back"))
    assert rolled["current_version"] == (2, 3) and rolled["budget.max_steps"] == (20, 10)


def test_secret_changes_are_entries_by_name_and_values_never_appear(main: Tenancy) -> None:
    client = main.client(ADM)
    assert client.post("/api/v1/secrets", {"name": "payments", "value": SECRET_VALUE},
                       format="json").status_code == 201
    assert client.put("/api/v1/secrets/payments", {"value": NEW_VALUE},
                      format="json").status_code == 200
    assert client.delete("/api/v1/secrets/payments").status_code == 204

    assert [e["action"] for e in _entries(main, kind="secret", name="payments")] == [
        "deleted", "rotated", "created"]
    rotated = _one(main, "secret", "payments", "rotated")
    assert set(_changes(rotated)) == {"rotated_at", "rotated_by"}
    stored = json.dumps(list(AuditEntry.objects.values()), default=str)
    page = _console(main).get("/audit/?kind=secret").content.decode()
    for text in (stored, page, json.dumps(_entries(main))):
        assert SECRET_VALUE not in text and NEW_VALUE not in text
    assert "payments" in page


def test_webhook_changes_are_entries_and_the_signing_secret_never_appears(
        main: Tenancy) -> None:
    client = main.client(ADM)
    created = client.post("/api/v1/webhooks", {"url": "http://127.0.0.1:9/hook",
                                               "events": ["task_failed"]}, format="json")
    assert created.status_code == 201, created.content
    hook = created.json()
    assert client.patch(f"/api/v1/webhooks/{hook['id']}", {"active": False},
                        format="json").status_code == 200
    assert client.delete(f"/api/v1/webhooks/{hook['id']}").status_code == 204

    name = str(hook["id"])
    assert [e["action"] for e in _entries(main, kind="webhook", name=name)] == [
        "deleted", "updated", "created"]
    assert _changes(_one(main, "webhook", name, "updated")) == {"active": (True, False)}
    stored = json.dumps(list(AuditEntry.objects.values()), default=str)
    assert hook["secret"] not in stored


def test_membership_and_api_key_changes_are_entries(main: Tenancy) -> None:
    admin = actor_of(main.users[ADM])
    user = user_ensure(tenant=main.tenant, username="newbie", role=Role.REQUESTER, actor=admin)
    user_ensure(tenant=main.tenant, username="newbie", role=Role.REVIEWER, actor=admin)
    user_ensure(tenant=main.tenant, username="newbie", role=Role.REVIEWER, actor=admin)  # no-op
    user_deactivate(user_id=user.pk, actor=admin)
    membership_revoke(user_id=user.pk, actor=admin)

    entries = _entries(main, kind="membership", name="newbie")
    assert [e["action"] for e in entries] == ["revoked", "deactivated", "updated", "created"]
    assert _changes(entries[2]) == {"role": ("requester", "reviewer")}
    assert {e["actor"] for e in entries} == {admin.name}
    # the API key the test client made for the admin is an entry too (prefix only)
    keys = _entries(main, kind="api_key", name=main.users[ADM].username)
    assert keys and set(_changes(keys[0])) == {"prefix"}


def test_an_entry_commits_with_its_change_or_not_at_all(main: Tenancy) -> None:
    actor = Actor(name="someone", role="admin")
    with pytest.raises(RuntimeError), transaction.atomic():
        audit_record(actor=actor, tenant_id=main.tenant.pk, kind="webhook", name="7",
                     action="created", after={"url": "https://x", "secret": "whsec_123"})
        raise RuntimeError("the change failed")
    assert not AuditEntry.objects.filter(kind="webhook").exists()
    entry = audit_record(actor=actor, tenant_id=main.tenant.pk, kind="webhook", name="7",
                         action="created", after={"url": "https://x", "secret": "whsec_123"})
    assert entry is not None and "whsec_123" not in json.dumps(entry.diff)
    assert audit_record(actor=actor, tenant_id=main.tenant.pk, kind="webhook", name="7",
                        action="updated", before={"url": "a"}, after={"url": "a"}) is None


def test_filters_and_pages(main: Tenancy) -> None:
    actor = Actor(name="bot", role="admin")
    for i in range(5):
        audit_record(actor=actor, tenant_id=main.tenant.pk, kind="webhook", name=f"h{i}",
                     action="created", after={"n": i})
    client = main.client(ADM)
    first = client.get("/api/v1/audit", {"actor": "bot", "limit": 2}).json()
    assert [e["name"] for e in first["results"]] == ["h4", "h3"]
    second = client.get(first["next"]).json()
    assert [e["name"] for e in second["results"]] == ["h2", "h1"]
    assert _entries(main, since="2999-01-01T00:00:00Z") == []
    bad = client.get("/api/v1/audit", {"since": "yesterday"})
    assert bad.status_code == 400 and "since" in bad.json()["error"]["details"]


def test_tenants_see_only_their_own_entries(main: Tenancy, other: Tenancy) -> None:
    assert other.client(ADM).post("/api/v1/secrets", {"name": "theirs", "value": "v-1"},
                                  format="json").status_code == 201
    assert main.client(ADM).post("/api/v1/secrets", {"name": "ours", "value": "v-2"},
                                 format="json").status_code == 201
    assert {e["name"] for e in _entries(main, kind="secret")} == {"ours"}
    assert {e["name"] for e in _entries(other, kind="secret")} == {"theirs"}
    page = _console(main).get("/audit/").content.decode()
    assert "ours" in page and "theirs" not in page


@pytest.mark.parametrize("role", [Role.REQUESTER, Role.OPERATOR, Role.REVIEWER])
def test_only_admins_read_the_audit_log(main: Tenancy, role: str) -> None:
    response = main.client(role).get("/api/v1/audit")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "role_required"
    console = Client()
    console.force_login(main.users[role])
    assert console.get("/audit/").status_code == 403


def _console(tenancy: Tenancy) -> Client:
    client = Client()
    client.force_login(tenancy.users[ADM])
    return client


def test_the_console_page_filters_by_kind(main: Tenancy) -> None:
    admin = make_user(main.tenant, ADM, username="second-admin")
    user_ensure(tenant=main.tenant, username="someone", role=Role.OPERATOR,
                actor=actor_of(admin))
    page = _console(main).get("/audit/?kind=membership").content.decode()
    assert "someone" in page and "second-admin" in page
    assert "<code>crm_lookup</code>" not in page


def test_django_admin_changes_are_audited(main: Tenancy, django_user_model: Any) -> None:
    from accounts_app.models import Membership

    root = django_user_model.objects.create_superuser("root", password="pw")
    admin = Client()
    admin.force_login(root)
    member = Membership.objects.get(user=main.users[Role.OPERATOR])
    changed = admin.post(f"/admin/accounts_app/membership/{member.pk}/change/",
                         {"user": member.user_id, "tenant": main.tenant.pk, "role": "reviewer"})
    assert changed.status_code == 302, changed.content.decode()[:2000]
    entry = _one(main, "membership", main.users[Role.OPERATOR].username, "updated")
    assert (entry["actor"], entry["actor_role"]) == ("root", "django-admin")
    assert _changes(entry) == {"role": ("operator", "reviewer")}
    deleted = admin.post(f"/admin/accounts_app/membership/{member.pk}/delete/", {"post": "yes"})
    assert deleted.status_code == 302
    revoked = _one(main, "membership", main.users[Role.OPERATOR].username, "revoked")
    assert revoked["actor"] == "root"
