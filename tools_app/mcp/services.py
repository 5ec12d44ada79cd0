"""MCP servers of a tenant: register, change, delete, refresh their tools.

- A server is a Streamable HTTP `url` (through the outbound-address policy
  now, and at every connection) with optional secret headers (templates naming
  the tenant's secrets, as an http tool's), or a `stdio` server the operator
  configured (`TETHER_MCP_STDIO_SERVERS`), by name only.
- Registering lists the server's tools first, outside any transaction; only
  then are the server and its tools stored, in one transaction. A server that
  cannot be listed is not registered.
- Its tools (`catalog`) are stored as tools of kind `mcp`, `review=new`: the
  annotations' suggested settings are stored, and in force once an admin saves
  the tool (`tools_app.services.tool_update`); until then the registry makes
  the tool a plain `write` that needs approval.
- A refresh reports what changed: `new`, `changed` (its schema: the tool is
  disabled until an admin saves it again), `gone` (disabled), `skipped` (with
  reasons). Description and hints follow the server silently; an admin's
  settings are never overwritten by a refresh.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone
from mcp.shared.exceptions import MCPError

from accounts_app.vault.lookup import tool_headers
from accounts_app.vault.values import Resolved, Unresolved
from audit_app.services import audit_record
from foundations.actors import SYSTEM, Actor
from foundations.errors import conflict, invalid, not_found
from foundations.named_resources import NamedResource

from ..models import McpServer, Review, Tool, ToolKind
from ..outbound import REFUSED, url_problem
from ..services import RESERVED_HEADERS, is_http_url, secret_header_errors
from .catalog import Listed, Skipped, catalog, defaults_from, schema_changed
from .connections import ConnectFailed, ServerAddress, list_tools_sync, stdio_commands

SERVER_NAME = re.compile(r"[A-Za-z][A-Za-z0-9-]*(_[A-Za-z0-9-]+)*")
MAX_SERVER_NAME = 30
LIST_TIMEOUT_S = 20.0
# Headers the MCP transport sets itself.
MCP_RESERVED_HEADERS = frozenset(RESERVED_HEADERS | {
    "accept", "host", "mcp-session-id", "mcp-protocol-version", "mcp-name", "last-event-id"})
EDITABLE = ("url", "stdio", "secret_headers", "enabled")


def mcp_server_create(*, tenant_id: int, name: str, url: str = "", stdio: str = "",
                      secret_headers: dict[str, str] | None = None,
                      actor: Actor = SYSTEM) -> tuple[McpServer, dict]:
    server = McpServer(tenant_id=tenant_id, name=name, url=url or "", stdio=stdio or "",
                       secret_headers=secret_headers or {})
    errors = server_errors(server)
    if not isinstance(name, str) or len(name) > MAX_SERVER_NAME or not SERVER_NAME.fullmatch(name):
        errors.setdefault("name", []).append(
            f"letters, digits, - and single _, starting with a letter (max {MAX_SERVER_NAME})")
    if errors:
        raise invalid("invalid", "The request is not valid.", **errors)
    if McpServer.objects.filter(tenant_id=tenant_id, name=name).exists():
        raise conflict("mcp_server_exists", f"an MCP server named {name!r} exists", name=name)
    listed, skipped = _listing(server)  # network: before any transaction
    try:
        with transaction.atomic():
            server.save()
            report = _apply(server, listed, skipped)
            _audit(actor, server, "created", after=_audited(server) | {"tools": report})
    except IntegrityError:  # a concurrent registration of the same name won
        raise conflict("mcp_server_exists", f"an MCP server named {name!r} exists", name=name)
    return server, report


def mcp_server_update(*, tenant_id: int, name: str, changes: dict[str, Any],
                      actor: Actor = SYSTEM) -> McpServer:
    """Change the address, headers or `enabled`; the tools follow at the next refresh."""
    return MCP_SERVERS.update(tenant_id=tenant_id, name=name, changes=changes, actor=actor)


def mcp_server_delete(*, tenant_id: int, name: str, actor: Actor = SYSTEM) -> None:
    """The server and its tools go; steps that called them keep their history."""
    with transaction.atomic():
        server = _locked(tenant_id, name)
        _audit(actor, server, "deleted", before=_audited(server))
        server.delete()


def mcp_server_refresh(*, tenant_id: int, name: str,
                       actor: Actor = SYSTEM) -> tuple[McpServer, dict]:
    server = McpServer.objects.filter(tenant_id=tenant_id, name=name).first()
    if server is None:
        raise not_found("MCP server")
    listed, skipped = _listing(server)  # network: outside the transaction
    with transaction.atomic():
        server = _locked(tenant_id, name)
        report = _apply(server, listed, skipped)
        if report["new"] or report["changed"] or report["gone"]:
            _audit(actor, server, "refreshed", after={"tools": {
                k: report[k] for k in ("new", "changed", "gone")}})
    return server, report


def _audited(server: McpServer) -> dict[str, Any]:
    """What the audit log keeps of a server (header templates name secrets, never values)."""
    return {"url": server.url, "stdio": server.stdio, "secret_headers": server.secret_headers,
            "enabled": server.enabled}


def _audit(actor: Actor, server: McpServer, action: str, *,
           before: dict[str, Any] | None = None, after: dict[str, Any] | None = None) -> None:
    audit_record(actor=actor, tenant_id=server.tenant_id, kind="mcp_server", name=server.name,
                 object_id=server.pk, action=action, before=before, after=after)


def _audit_change(server: McpServer, *, actor: Actor, action: str,
                  before: dict[str, Any] | None) -> None:
    _audit(actor, server, action, before=before, after=_audited(server))


def server_errors(server: McpServer) -> dict[str, list[str]]:
    """Field errors of a server's registration (empty when it may be stored)."""
    errors: dict[str, list[str]] = {}

    def add(key: str, message: str) -> None:
        errors.setdefault(key, []).append(message)

    if bool(server.url) == bool(server.stdio):
        add("url", "give a Streamable HTTP url or the name of a stdio server, not both")
    elif server.url:
        if not isinstance(server.url, str) or len(server.url) > 500 or not is_http_url(server.url):
            add("url", "an http(s) URL")
        elif problem := url_problem(server.url):
            add("url", problem)
    elif server.stdio not in stdio_commands():
        add("stdio", "not a stdio server the operator configured (TETHER_MCP_STDIO_SERVERS)")
    if server.stdio and server.secret_headers:
        add("secret_headers", "a stdio server takes no headers")
    for problem in secret_header_errors(server.tenant_id, server.secret_headers,
                                        MCP_RESERVED_HEADERS):
        add("secret_headers", problem)
    if not isinstance(server.enabled, bool):
        add("enabled", "true or false")
    return errors


def _locked(tenant_id: int, name: str) -> McpServer:
    return MCP_SERVERS.locked(tenant_id, name)


def _listing(server: McpServer) -> tuple[list[Listed], list[Skipped]]:
    """The server's tools as Tether tools; raises a field error when it cannot be listed.
    Everything the server said is redacted of the rendered secrets."""
    try:
        headers, resolved = tool_headers(tenant_id=server.tenant_id,
                                         secret_headers=dict(server.secret_headers or {}))
    except Unresolved as exc:
        raise invalid("invalid", "The request is not valid.", secret_headers=[str(exc)])
    address = ServerAddress(tenant_id=server.tenant_id, name=server.name, url=server.url,
                            stdio=server.stdio, headers=tuple(sorted(headers.items())))
    field = "url" if server.url else "stdio"
    try:
        tools = list_tools_sync(address, LIST_TIMEOUT_S)
    except ConnectFailed as exc:
        message = REFUSED if exc.refused else f"cannot list the server's tools: {exc}"
        raise invalid("mcp_unreachable", "The MCP server cannot be listed.",
                      **{field: [resolved.redact(message)[:500]]})
    except (MCPError, TimeoutError) as exc:
        raise invalid("mcp_unreachable", "The MCP server cannot be listed.",
                      **{field: [resolved.redact(f"cannot list the server's tools: {exc}")[:500]]})
    listed, skipped = catalog(server.name, tools)
    return [_redacted(item, resolved) for item in listed], [
        Skipped(s.remote, resolved.redact(s.reason)) for s in skipped]


def _redacted(item: Listed, resolved: Resolved) -> Listed:
    return replace(item, description=resolved.redact(item.description),
                   args_schema=resolved.redact(item.args_schema),
                   result_schema=resolved.redact(item.result_schema))


def _apply(server: McpServer, listed: list[Listed], skipped: list[Skipped]) -> dict[str, Any]:
    """Store the listing; the caller holds the server's row lock (or has just created it)."""
    report: dict[str, Any] = {"new": [], "changed": [], "gone": [], "unchanged": [],
                              "skipped": [{"tool": s.remote, "reason": s.reason} for s in skipped]}
    mine = {t.target: t for t in Tool.objects.select_for_update().filter(mcp_server=server)}
    others = set(Tool.objects.filter(tenant_id=server.tenant_id, name__in=[i.name for i in listed])
                 .exclude(mcp_server=server).values_list("name", flat=True))
    for item in listed:
        tool = mine.pop(item.remote, None)
        if tool is None:
            if item.name in others:
                report["skipped"].append({"tool": item.remote,
                                          "reason": f"a tool named {item.name!r} exists"})
                continue
            Tool.objects.create(
                tenant_id=server.tenant_id, name=item.name, kind=ToolKind.MCP, target=item.remote,
                mcp_server=server, description=item.description, args_schema=item.args_schema,
                result_schema=item.result_schema, mcp_hints=item.hints, review=Review.NEW,
                **defaults_from(item.hints))
            report["new"].append(item.name)
            continue
        fields: dict[str, Any] = {"description": item.description, "mcp_hints": item.hints}
        if schema_changed(tool, item) or tool.review == Review.GONE:
            fields |= {"args_schema": item.args_schema, "result_schema": item.result_schema,
                       "review": Review.SCHEMA_CHANGED, "enabled": False}
            report["changed"].append(item.name)
        else:
            report["unchanged"].append(item.name)
        if tool.review == Review.NEW:  # not yet confirmed: the suggestions follow the hints
            fields |= defaults_from(item.hints)
        for key, value in fields.items():
            setattr(tool, key, value)
        tool.save()
    for tool in mine.values():
        if tool.review != Review.GONE:
            tool.review, tool.enabled = Review.GONE, False
            tool.save(update_fields=["review", "enabled", "updated_at"])
            report["gone"].append(tool.name)
    server.refreshed_at = timezone.now()
    server.last_changes = report
    server.save(update_fields=["refreshed_at", "last_changes", "updated_at"])
    return report


# Created through `mcp_server_create` (its tools are listed first, over the network).
MCP_SERVERS = NamedResource(
    model=McpServer, noun="MCP server", article="an", editable=EDITABLE, errors=server_errors,
    audit=_audit_change, audited=_audited,
)
