"""The registry's read of a tenant's tools: one statement (no ORM), the same
specs the models say, and always fresh: a fix applies to the next read."""
from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.factories import TenantFactory
from tools_app.models import McpServer, Review, SideEffect, Tool, ToolKind
from tools_app.registry import tool_specs

pytestmark = pytest.mark.django_db

NAMES = ["lookup_order", "issue_refund"]


def _mcp_tool(tenant, server: McpServer, name: str, **fields) -> Tool:  # type: ignore[no-untyped-def]
    return Tool.objects.create(tenant=tenant, name=name, kind=ToolKind.MCP, target=name,
                               mcp_server=server, args_schema={"type": "object"}, **fields)


def test_the_specs_are_the_tools_as_saved_in_one_statement(world):
    refund = Tool.objects.get(tenant=world.tenant, name="issue_refund")
    refund.secret_headers = {"X-Key": "k"}
    refund.retry_delays_s = [1, 2.5]
    refund.breaker = {"failures": 3}
    refund.requires_approval = True
    refund.save()
    with CaptureQueriesContext(connection) as captured:
        specs = tool_specs(tenant_id=world.tenant.pk, names=NAMES)
    assert len(captured.captured_queries) == 1
    assert set(specs) == set(NAMES)
    spec = specs["issue_refund"]
    assert spec.secret_headers == {"X-Key": "k"} and spec.retry_delays_s == (1.0, 2.5)
    assert spec.breaker == {"failures": 3} and spec.requires_approval is True
    assert spec.args_schema == refund.args_schema and spec.timeout_s == refund.timeout_s
    assert spec.side_effect == refund.side_effect and spec.kind == refund.kind
    assert specs["lookup_order"].requires_approval is False
    # without names: every enabled tool of the tenant; an empty list: none
    assert set(NAMES) <= set(tool_specs(tenant_id=world.tenant.pk))
    assert tool_specs(tenant_id=world.tenant.pk, names=[]) == {}


def test_a_fix_applies_to_the_next_read_even_one_that_sends_no_signal(world):
    """As another process's save looks from here: an UPDATE behind our back."""
    assert "issue_refund" in tool_specs(tenant_id=world.tenant.pk, names=NAMES)
    Tool.objects.filter(tenant=world.tenant, name="issue_refund").update(enabled=False)
    assert set(tool_specs(tenant_id=world.tenant.pk, names=NAMES)) == {"lookup_order"}
    Tool.objects.filter(tenant=world.tenant, name="issue_refund").update(enabled=True,
                                                                        timeout_s=7)
    assert tool_specs(tenant_id=world.tenant.pk, names=NAMES)["issue_refund"].timeout_s == 7


def test_another_tenants_tools_are_never_read(world):
    other = TenantFactory(name="t-other")
    Tool.objects.create(tenant=other, name="lookup_order", target="x", args_schema={},
                        timeout_s=99)
    assert tool_specs(tenant_id=world.tenant.pk, names=NAMES)["lookup_order"].timeout_s != 99
    assert set(tool_specs(tenant_id=other.pk)) == {"lookup_order"}


def test_an_mcp_tool_carries_its_servers_address_and_is_a_write_until_confirmed(world):
    server = McpServer.objects.create(tenant=world.tenant, name="shop", url="https://mcp.test/mcp",
                                      secret_headers={"Authorization": "Bearer s"})
    _mcp_tool(world.tenant, server, "shop__new", side_effect=SideEffect.READ,
              review=Review.NEW)
    _mcp_tool(world.tenant, server, "shop__ok", side_effect=SideEffect.READ)
    specs = tool_specs(tenant_id=world.tenant.pk)
    new, ok = specs["shop__new"], specs["shop__ok"]
    assert (new.side_effect, new.requires_approval) == (SideEffect.WRITE, True)
    assert (ok.side_effect, ok.requires_approval) == (SideEffect.READ, False)
    assert (ok.url, ok.mcp_server, ok.secret_headers) == (
        "https://mcp.test/mcp", "shop", {"Authorization": "Bearer s"})
    # a disabled server's tools are not offered
    McpServer.objects.filter(pk=server.pk).update(enabled=False)
    assert not {"shop__new", "shop__ok"} & set(tool_specs(tenant_id=world.tenant.pk))
