"""MCP servers in the console (admins): the list with a registration form, each
server's page with its tools and what the last refresh changed, and the
refresh, enable/disable and delete actions (through `tools_app.mcp.services`).
A tool's own settings are confirmed on its edit page, like any tool's."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from foundations.console_access import ADMINS, ConsoleUser, console_view
from foundations.console_actions import ServiceErrorsForm, save_form, succeeded
from foundations.console_errors import error_line, error_status
from foundations.errors import DomainError

from ..mcp.connections import stdio_commands
from ..mcp.services import (
    mcp_server_create,
    mcp_server_delete,
    mcp_server_refresh,
    mcp_server_update,
)
from ..models import McpServer
from ..selectors import mcp_server_of_tenant, mcp_servers_of_tenant
from .forms import JSONObjectField


class McpServerForm(ServiceErrorsForm):
    name = forms.CharField(max_length=30, help_text="Its tools are named name__tool.")
    url = forms.CharField(required=False, max_length=500, label="URL",
                          help_text="The server's Streamable HTTP endpoint, e.g. https://…/mcp.")
    stdio = forms.ChoiceField(required=False, label="Or a stdio server",
                              help_text="Servers the operator configured on this host.")
    secret_headers = JSONObjectField(
        required=False, rows=3, label="Secret headers",
        help_text='{"Authorization": "Bearer {secret:github}"}: templates naming secrets '
                  "of this tenant, never the secret itself.")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["stdio"]
        assert isinstance(field, forms.ChoiceField)
        field.choices = [("", "—"), *((n, n) for n in sorted(stdio_commands()))]


def _cu(request: HttpRequest) -> ConsoleUser:
    return request.console  # type: ignore[attr-defined, no-any-return]


def _list_page(request: HttpRequest, form: McpServerForm, status: int = 200) -> HttpResponse:
    servers = mcp_servers_of_tenant(_cu(request).tenant_id).prefetch_related("tools")
    return render(request, "tools/mcp_list.html",
                  {"nav": "tools", "servers": servers, "form": form}, status=status)


@console_view(roles=ADMINS)
def mcp_server_list(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return _list_page(request, McpServerForm())
    cu = _cu(request)

    def registered(created: tuple[McpServer, dict[str, list[str]]]) -> HttpResponse:
        server, changes = created
        return succeeded(request, f"MCP server {server.name} registered: {len(changes['new'])} "
                         "tools, each a plain write that needs approval until you save it.",
                         "tools:mcp-detail", name=server.name)

    return save_form(
        McpServerForm(request.POST),
        lambda d: mcp_server_create(
            tenant_id=cu.tenant_id, name=d["name"].strip(), url=d["url"].strip(),
            stdio=d["stdio"] or "", secret_headers=d["secret_headers"] or {}, actor=cu.actor),
        page=lambda form, status: _list_page(request, form, status=status),
        done=registered,
        status_of=error_status,
    )


@console_view(roles=ADMINS)
def mcp_server_detail(request: HttpRequest, name: str) -> HttpResponse:
    server = mcp_server_of_tenant(_cu(request).tenant_id, name)
    if server is None:
        raise Http404("No such MCP server")
    return render(request, "tools/mcp_detail.html", {
        "nav": "tools", "server": server, "tools": server.tools.order_by("name"),
        "changes": server.last_changes or {}})


@console_view(roles=ADMINS)
def mcp_server_action(request: HttpRequest, name: str, action: str) -> HttpResponse:
    if request.method != "POST":
        return redirect("tools:mcp-detail", name=name)
    tenant_id, actor = _cu(request).tenant_id, _cu(request).actor
    try:
        if action == "refresh":
            _, changes = mcp_server_refresh(tenant_id=tenant_id, name=name, actor=actor)
            messages.success(request, "Refreshed: " + ", ".join(
                f"{len(changes[k])} {k}" for k in ("new", "changed", "gone", "skipped")) + ".")
        elif action in ("enable", "disable"):
            mcp_server_update(tenant_id=tenant_id, name=name,
                              changes={"enabled": action == "enable"}, actor=actor)
            messages.success(request, f"MCP server {name} {action}d.")
        elif action == "delete":
            mcp_server_delete(tenant_id=tenant_id, name=name, actor=actor)
            messages.success(request, f"MCP server {name} and its tools deleted.")
            return redirect("tools:mcp-list")
        else:
            raise Http404("No such action")
    except DomainError as exc:
        messages.error(request, error_line(exc))
    return redirect("tools:mcp-detail", name=name)
