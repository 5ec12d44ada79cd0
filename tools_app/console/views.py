"""Tool registrations in the console: the list and each tool's page for the
tenant, create and edit for admins (through `tools_app.services`)."""

from __future__ import annotations

from django.contrib import messages
from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from config.errors import DomainError
from tasks_app.console.access import ADMINS, ConsoleUser, console_view
from tasks_app.console.errors import error_message, field_errors

from ..breakers.selectors import tool_breakers
from ..models import LedgerStatus, ToolExecution, ToolKind
from ..selectors import tool_of_tenant, tools_of_tenant
from ..services import tool_create, tool_update
from .forms import ToolForm


def _cu(request: HttpRequest) -> ConsoleUser:
    return request.console  # type: ignore[attr-defined, no-any-return]


@console_view()
def tool_list(request: HttpRequest) -> HttpResponse:
    cu = _cu(request)
    tools = list(tools_of_tenant(cu.tenant_id))
    breakers = tool_breakers(tools)
    rows = [(t, breakers.get(t.name)) for t in tools]
    return render(request, "tools/list.html", {"nav": "tools", "tools": rows})


@console_view()
def tool_detail(request: HttpRequest, name: str) -> HttpResponse:
    cu = _cu(request)
    tool = tool_of_tenant(cu.tenant_id, name)
    if tool is None:
        raise Http404("No such tool")
    ledger = ToolExecution.objects.filter(tenant_id=cu.tenant_id, tool=tool.name)
    by_status = dict(ledger.order_by().values_list("status").annotate(n=Count("id")))
    recent = ledger.order_by("-id")[:10]
    return render(
        request,
        "tools/detail.html",
        {
            "nav": "tools",
            "tool": tool,
            "breaker": tool_breakers([tool]).get(tool.name),
            "recent": recent,
            "ledger_counts": [(s, by_status.get(s, 0)) for s in LedgerStatus.values],
        },
    )


@console_view(roles=ADMINS)
def tool_create_view(request: HttpRequest) -> HttpResponse:
    cu = _cu(request)
    ctx = {"nav": "tools", "creating": True}
    if request.method != "POST":
        return render(
            request, "tools/form.html", {**ctx, "form": ToolForm(initial=ToolForm.initial_of(None))}
        )
    form = ToolForm(request.POST)
    if form.is_valid():
        try:
            tool = tool_create(
                tenant_id=cu.tenant_id,
                name=form.cleaned_data["name"].strip(),
                actor=cu.actor,
                **form.registration(),
            )
        except DomainError as exc:
            form.add_service_errors(field_errors(exc) or {"__all__": [error_message(exc)]})
        else:
            messages.success(request, f"Tool {tool.name} registered.")
            return redirect("tools:tool-detail", name=tool.name)
    return render(request, "tools/form.html", {**ctx, "form": form}, status=400)


@console_view(roles=ADMINS)
def tool_edit_view(request: HttpRequest, name: str) -> HttpResponse:
    cu = _cu(request)
    tool = tool_of_tenant(cu.tenant_id, name)
    if tool is None:
        raise Http404("No such tool")
    ctx = {"nav": "tools", "creating": False, "tool": tool}
    mcp = tool.kind == ToolKind.MCP
    if request.method != "POST":
        form = ToolForm(initial=ToolForm.initial_of(tool), editing=True, mcp=mcp)
        return render(request, "tools/form.html", {**ctx, "form": form})
    form = ToolForm(request.POST, initial=ToolForm.initial_of(tool), editing=True, mcp=mcp)
    if form.is_valid():
        try:
            tool_update(tenant_id=cu.tenant_id, name=tool.name, changes=form.registration(),
                        actor=cu.actor)
        except DomainError as exc:
            form.add_service_errors(field_errors(exc) or {"__all__": [error_message(exc)]})
        else:
            messages.success(request, f"Tool {tool.name} saved.")
            return redirect("tools:tool-detail", name=tool.name)
    return render(request, "tools/form.html", {**ctx, "form": form}, status=400)
