"""Reads of tool registrations and of the idempotency ledger, scoped by the caller."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from accounts_app.vault.references import header_secret_names

from .models import McpServer, Tool, ToolExecution


def tools_of_tenant(tenant_id: int) -> QuerySet[Tool]:
    return Tool.objects.filter(tenant_id=tenant_id).select_related("mcp_server").order_by("name")


def tool_of_tenant(tenant_id: int, name: str) -> Tool | None:
    return tools_of_tenant(tenant_id).filter(name=name).first()


def mcp_servers_of_tenant(tenant_id: int) -> QuerySet[McpServer]:
    return McpServer.objects.filter(tenant_id=tenant_id).order_by("name")


def mcp_server_of_tenant(tenant_id: int, name: str) -> McpServer | None:
    return mcp_servers_of_tenant(tenant_id).filter(name=name).first()


def tools_naming_secret(tenant_id: int, name: str) -> list[str]:
    """The tenant's tools and MCP servers whose secret headers refer to the secret."""
    tools = [t.name for t in Tool.objects.filter(tenant_id=tenant_id).exclude(secret_headers={})
             .only("name", "secret_headers").order_by("name")
             if name in header_secret_names(t.secret_headers)]
    tools += [f"{s.name} (MCP server)" for s in McpServer.objects.filter(tenant_id=tenant_id)
              .exclude(secret_headers={}).only("name", "secret_headers").order_by("name")
              if name in header_secret_names(s.secret_headers)]
    return tools


def ledger_attempts(*, tenant_id: int, keys: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Each call attempt recorded in the ledger, by idempotency key."""
    rows = ToolExecution.objects.filter(tenant_id=tenant_id, idempotency_key__in=keys)
    return {
        row.idempotency_key: list(row.attempts or [])
        for row in rows.only("idempotency_key", "attempts")
    }
