"""Tool registrations in the console: the list and each tool's page for the
tenant, create and edit for admins (through `tools_app.services`)."""

from __future__ import annotations

from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from foundations.console_access import ADMINS, ConsoleUser, console_view
from foundations.console_actions import save_form, succeeded

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

    def page(form: ToolForm, status: int = 200) -> HttpResponse:
        ctx = {"nav": "tools", "creating": True, "form": form}
        return render(request, "tools/form.html", ctx, status=status)

    if request.method != "POST":
        return page(ToolForm(initial=ToolForm.initial_of(None)))
    form = ToolForm(request.POST)
    return save_form(
        form,
        lambda d: tool_create(tenant_id=cu.tenant_id, name=d["name"].strip(), actor=cu.actor,
                              **form.registration()),
        page=page,
        done=lambda tool: succeeded(request, f"Tool {tool.name} registered.",
                                    "tools:tool-detail", name=tool.name),
    )


@console_view(roles=ADMINS)
def tool_edit_view(request: HttpRequest, name: str) -> HttpResponse:
    cu = _cu(request)
    tool = tool_of_tenant(cu.tenant_id, name)
    if tool is None:
        raise Http404("No such tool")
    mcp = tool.kind == ToolKind.MCP

    def page(form: ToolForm, status: int = 200) -> HttpResponse:
        ctx = {"nav": "tools", "creating": False, "tool": tool, "form": form}
        return render(request, "tools/form.html", ctx, status=status)

    if request.method != "POST":
        return page(ToolForm(initial=ToolForm.initial_of(tool), editing=True, mcp=mcp))
    form = ToolForm(request.POST, initial=ToolForm.initial_of(tool), editing=True, mcp=mcp)
    return save_form(
        form,
        lambda d: tool_update(tenant_id=cu.tenant_id, name=tool.name,
                              changes=form.registration(), actor=cu.actor),
        page=page,
        done=lambda saved: succeeded(request, f"Tool {saved.name} saved.",
                                     "tools:tool-detail", name=saved.name),
    )
