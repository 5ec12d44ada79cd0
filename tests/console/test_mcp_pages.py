"""The console's MCP server pages (admins): register a server and see its
tools, refresh it and see what changed, confirm a tool by saving its form,
disable and delete the server; other roles are refused."""

from __future__ import annotations

import pytest
from django.test import Client

from accounts_app.models import Role
from accounts_app.services.secrets import secret_create
from foundations.actors import SYSTEM
from tools_app.models import McpServer, Review, Tool
from tools_app.outbound import REFUSED
from tools_app.registry import tool_specs

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "console-mcp-s3cret"


def client_for(user) -> Client:  # type: ignore[no-untyped-def]
    c = Client()
    c.force_login(user)
    return c


def test_an_admin_registers_refreshes_confirms_and_deletes_a_server(world, mcp_server):
    secret_create(tenant_id=world.tenant.pk, name="shop-token", value=TOKEN, actor=SYSTEM)
    c = client_for(world.users[Role.ADMIN])
    assert "Register an MCP server" in c.get("/tools/mcp/").content.decode()

    refused = c.post("/tools/mcp/", {"name": "shop",
                                     "url": mcp_server.url.replace("127.0.0.1", "127.0.0.2")})
    assert refused.status_code == 400 and REFUSED in refused.content.decode()
    assert not McpServer.objects.exists()

    created = c.post("/tools/mcp/", {
        "name": "shop", "url": mcp_server.url,
        "secret_headers": '{"Authorization": "Bearer {secret:shop-token}"}'})
    assert created.status_code == 302 and created["Location"] == "/tools/mcp/shop/"
    page = c.get("/tools/mcp/shop/").content.decode()
    assert "shop__lookup" in page and "shop__record" in page and "odd.name" in page  # skipped
    assert TOKEN not in page and "{secret:shop-token}" in page

    # The edit form shows the hints' suggestion; saving it confirms the tool.
    form = c.get("/tools/shop__record/edit/").content.decode()
    assert "Saving confirms them" in form
    saved = c.post("/tools/shop__record/edit/", {
        "description": "Record a note", "side_effect": "idempotent_write", "risk": "medium",
        "timeout_s": "5", "max_retries": "2", "enabled": "on"})
    assert saved.status_code == 302, saved.content.decode()[:3000]
    record = Tool.objects.get(name="shop__record")
    assert record.review == Review.CONFIRMED and record.args_schema["required"] == ["note"]
    assert not tool_specs(tenant_id=world.tenant.pk)["shop__record"].requires_approval

    mcp_server.change_lookup_schema()
    refreshed = c.post("/tools/mcp/shop/refresh/")
    assert refreshed.status_code == 302
    page = c.get("/tools/mcp/shop/").content.decode()
    assert "1 changed" in page and "schema changed" in page
    assert not Tool.objects.get(name="shop__lookup").enabled

    assert c.post("/tools/mcp/shop/disable/").status_code == 302
    assert McpServer.objects.get(name="shop").enabled is False
    assert c.post("/tools/mcp/shop/delete/").status_code == 302
    assert not McpServer.objects.exists() and not Tool.objects.filter(kind="mcp").exists()


def test_other_roles_cannot_see_or_register_servers(world):
    for role in (Role.REQUESTER, Role.OPERATOR, Role.REVIEWER):
        c = client_for(world.users[role])
        assert c.get("/tools/mcp/").status_code == 403
        posted = c.post("/tools/mcp/", {"name": "x", "url": "http://127.0.0.1:9/mcp"})
        assert posted.status_code == 403
    assert not McpServer.objects.exists()
