"""Publishing an agent or a workflow for the open protocols (A2A, MCP): an
admin's choice, off by default, audited, not a new version; other roles may
not publish and a bad value changes nothing."""
from __future__ import annotations

import pytest

from accounts_app.models import Role
from audit_app.models import AuditEntry
from tasks_app.models import AgentProfile
from workflows_app.models import Workflow

pytestmark = pytest.mark.django_db

AGENT = {"name": "triage", "model": {"backend": "scripted", "name": "scripted"},
         "tools": ["lookup_order"]}
FLOW = {"nodes": [{"id": "lookup", "tool": "lookup_order", "args": {"order_id": "A1"}}]}


def test_an_agent_is_unpublished_until_an_admin_publishes_it(main):
    admin = main.client(Role.ADMIN)
    created = admin.post("/api/v1/agents", AGENT, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["published"] is False
    version = created.json()["version"]

    published = admin.patch("/api/v1/agents/triage", {"published": True}, format="json")
    assert published.status_code == 200, published.content
    assert published.json()["published"] is True
    assert published.json()["latest_version"] == version  # not configuration
    entry = AuditEntry.objects.filter(kind="agent", name="triage").order_by("-id").first()
    assert entry is not None
    assert {"path": "published", "change": "changed", "old": False, "new": True} in entry.diff, \
        entry.diff


def test_only_admins_publish_and_a_bad_value_changes_nothing(main):
    assert main.client(Role.ADMIN).post("/api/v1/agents", AGENT, format="json").status_code == 201
    for role in (Role.OPERATOR, Role.REVIEWER, Role.REQUESTER):
        refused = main.client(role).patch("/api/v1/agents/triage", {"published": True},
                                          format="json")
        assert refused.status_code == 403, (role, refused.content)
    bad = main.client(Role.ADMIN).patch("/api/v1/agents/triage", {"published": "maybe"},
                                        format="json")
    assert bad.status_code == 400 and "published" in bad.json()["error"]["details"], bad.content
    assert AgentProfile.objects.get(tenant=main.tenant, name="triage").published is False


def test_a_workflow_is_published_by_create_or_patch_and_audited(main, other):
    admin = main.client(Role.ADMIN)
    created = admin.post("/api/v1/workflows", {"name": "flow", "definition": FLOW},
                         format="json")
    assert created.status_code == 201, created.content
    assert created.json()["published"] is False
    patched = admin.patch("/api/v1/workflows/flow", {"published": True}, format="json")
    assert patched.status_code == 200 and patched.json()["published"] is True
    assert patched.json()["latest_version"] == 1
    assert AuditEntry.objects.filter(kind="workflow", name="flow", action="published").exists()
    assert main.client(Role.REQUESTER).patch(
        "/api/v1/workflows/flow", {"published": False}, format="json").status_code == 403
    assert other.client(Role.ADMIN).patch(
        "/api/v1/workflows/flow", {"published": False}, format="json").status_code == 404
    assert Workflow.objects.get(tenant=main.tenant, name="flow").published is True
