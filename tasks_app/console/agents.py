"""Console pages for agent profiles: everyone in the tenant may read them (what
a task runs under matters to operators and reviewers); admins create and edit
them through `tasks_app.services.agents`."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from config.errors import DomainError
from tools_app.selectors import tools_of_tenant

from ..selectors import agent_of_tenant, agents_of_tenant, tasks_of_tenant
from ..services.agents import agent_create, agent_update
from .access import ADMINS, ConsoleUser, console_view
from .agent_forms import AgentForm
from .errors import error_message, field_errors


def _cu(request: HttpRequest) -> ConsoleUser:
    return request.console  # type: ignore[attr-defined, no-any-return]


@console_view()
def agent_list(request: HttpRequest) -> HttpResponse:
    cu = _cu(request)
    return render(
        request, "agents/list.html", {"nav": "agents", "agents": agents_of_tenant(cu.tenant_id)}
    )


@console_view()
def agent_detail(request: HttpRequest, name: str) -> HttpResponse:
    cu = _cu(request)
    agent = agent_of_tenant(cu.tenant_id, name)
    if agent is None:
        raise Http404("No such agent")
    recent = tasks_of_tenant(cu.tenant_id).filter(agent=agent).order_by("-id")[:10]
    return render(
        request,
        "agents/detail.html",
        {"nav": "agents", "agent": agent, "recent": recent, "model": dict(agent.model or {})},
    )


def _tool_names(cu: ConsoleUser) -> list[str]:
    return list(tools_of_tenant(cu.tenant_id).values_list("name", flat=True))


@console_view(roles=ADMINS)
def agent_create_view(request: HttpRequest) -> HttpResponse:
    cu = _cu(request)
    if request.method != "POST":
        form = AgentForm(initial=AgentForm.initial_of(None), tool_names=_tool_names(cu))
        return render(
            request, "agents/form.html", {"nav": "agents", "form": form, "creating": True}
        )
    form = AgentForm(request.POST, tool_names=_tool_names(cu))
    if form.is_valid():
        try:
            agent = agent_create(
                tenant_id=cu.tenant_id, name=form.cleaned_data["name"], **form.profile_fields()
            )
        except DomainError as exc:
            form.add_service_errors(field_errors(exc) or {"__all__": [error_message(exc)]})
        else:
            messages.success(request, f"Agent {agent.name} created.")
            return redirect("console:agent-detail", name=agent.name)
    return render(
        request, "agents/form.html", {"nav": "agents", "form": form, "creating": True}, status=400
    )


@console_view(roles=ADMINS)
def agent_edit_view(request: HttpRequest, name: str) -> HttpResponse:
    cu = _cu(request)
    agent = agent_of_tenant(cu.tenant_id, name)
    if agent is None:
        raise Http404("No such agent")
    ctx = {"nav": "agents", "agent": agent, "creating": False}
    if request.method != "POST":
        form = AgentForm(
            initial=AgentForm.initial_of(agent), tool_names=_tool_names(cu), editing=True
        )
        return render(request, "agents/form.html", {**ctx, "form": form})
    form = AgentForm(
        request.POST, initial={"name": agent.name}, tool_names=_tool_names(cu), editing=True
    )
    if form.is_valid():
        try:
            agent_update(
                tenant_id=cu.tenant_id, name=agent.name, changes=form.profile_fields(agent.model)
            )
        except DomainError as exc:
            form.add_service_errors(field_errors(exc) or {"__all__": [error_message(exc)]})
        else:
            messages.success(
                request,
                f"Agent {agent.name} saved. Tasks already submitted keep the "
                "settings they started with.",
            )
            return redirect("console:agent-detail", name=agent.name)
    return render(request, "agents/form.html", {**ctx, "form": form}, status=400)
