"""Console pages for agent profiles: everyone in the tenant may read them (what
a task runs under matters to operators and reviewers); admins create and edit
them through `tasks_app.services.agents`, and release, promote and roll back
their versions through `tasks_app.services.releases`. The page compares two
versions on their tasks (`version_stats`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_POST

from foundations.console_access import ADMINS, ConsoleUser, console_view
from foundations.console_actions import form_action, save_form, succeeded
from foundations.console_errors import error_line, error_status, form_errors
from foundations.errors import DomainError
from tools_app.breakers.selectors import model_breakers
from tools_app.selectors import tools_of_tenant

from ..models import AgentProfile
from ..runner.rate_waits import model_limits_view
from ..selectors import (
    agent_of_tenant,
    agent_versions_of,
    agents_of_tenant,
    release_log_of,
    tasks_of_tenant,
)
from ..services.agents import agent_create, agent_update
from ..services.releases import agent_promote, agent_rollback, release_set
from .agent_forms import AgentForm
from .release_forms import ReleaseForm, VersionForm
from .version_stats import chosen_pair, versions_compared

VERSIONS_SHOWN = 20
RELEASE_LOG_SHOWN = 10


def _cu(request: HttpRequest) -> ConsoleUser:
    return request.console  # type: ignore[attr-defined, no-any-return]


@console_view()
def agent_list(request: HttpRequest) -> HttpResponse:
    cu = _cu(request)
    rows = [(a, model_breakers(cu.tenant_id, dict(a.model or {})).get("primary"))
            for a in agents_of_tenant(cu.tenant_id)]
    return render(request, "agents/list.html", {"nav": "agents", "agents": rows})


def _agent_or_404(cu: ConsoleUser, name: str) -> AgentProfile:
    agent = agent_of_tenant(cu.tenant_id, name)
    if agent is None:
        raise Http404("No such agent")
    return agent


def _detail_page(
    request: HttpRequest, cu: ConsoleUser, agent: AgentProfile, *, status: int = 200
) -> HttpResponse:
    recent = tasks_of_tenant(cu.tenant_id).filter(agent=agent).order_by("-id")[:10]
    numbers = chosen_pair(agent, request.GET.getlist("compare"))
    return render(
        request,
        "agents/detail.html",
        {
            "nav": "agents",
            "agent": agent,
            "recent": recent,
            "model": dict(agent.model or {}),
            "breakers": model_breakers(cu.tenant_id, dict(agent.model or {})),
            "rate_limits": model_limits_view(cu.tenant_id, dict(agent.model or {})),
            "versions": agent_versions_of(agent.pk)[:VERSIONS_SHOWN],
            "version_numbers": range(agent.latest_version, 0, -1),
            "release_log": release_log_of(agent.pk)[:RELEASE_LOG_SHOWN],
            "comparison": versions_compared(agent, numbers),
        },
        status=status,
    )


@console_view()
def agent_detail(request: HttpRequest, name: str) -> HttpResponse:
    cu = _cu(request)
    return _detail_page(request, cu, _agent_or_404(cu, name))


def _release_action(
    request: HttpRequest, name: str, form_class: type[forms.Form], act: Callable[..., Any],
    done: Callable[[AgentProfile], str],
) -> HttpResponse:
    """Parse, call the release service, redirect with what happened; a refusal
    re-renders the page with the reason and the refusal's status."""
    cu = _cu(request)
    agent = _agent_or_404(cu, name)

    def invalid(form: forms.Form) -> HttpResponse:
        problems = "; ".join(f"{k}: {' '.join(v)}" for k, v in form_errors(form).items())
        messages.error(request, f"Not applied: {problems}.")
        return _detail_page(request, cu, agent, status=400)

    def refused(exc: DomainError) -> HttpResponse:
        messages.error(request, error_line(exc))
        return _detail_page(request, cu, _agent_or_404(cu, name), status=error_status(exc))

    return form_action(
        form_class(request.POST),
        lambda d: act(tenant_id=cu.tenant_id, name=agent.name, actor=cu.actor,
                      **{k: v for k, v in d.items() if v is not None}),
        invalid=invalid,
        refused=refused,
        done=lambda changed: succeeded(request, done(changed), "console:agent-detail",
                                       name=agent.name),
    )


@require_POST
@console_view(roles=ADMINS)
def agent_release_view(request: HttpRequest, name: str) -> HttpResponse:
    return _release_action(
        request, name, ReleaseForm, release_set,
        lambda a: f"Version {a.release_candidate} now goes to {a.release_percent} % of new "
        f"tasks; the rest get version {a.current_version}.",
    )


@require_POST
@console_view(roles=ADMINS)
def agent_promote_view(request: HttpRequest, name: str) -> HttpResponse:
    return _release_action(
        request, name, VersionForm, agent_promote,
        lambda a: f"Version {a.current_version} promoted: every new task gets it. "
        "Tasks already submitted keep their version.",
    )


@require_POST
@console_view(roles=ADMINS)
def agent_rollback_view(request: HttpRequest, name: str) -> HttpResponse:
    return _release_action(
        request, name, VersionForm, agent_rollback,
        lambda a: f"Rolled back: every new task gets version {a.current_version}. "
        "Tasks already submitted keep their version.",
    )


def _tool_names(cu: ConsoleUser) -> list[str]:
    return list(tools_of_tenant(cu.tenant_id).values_list("name", flat=True))


@console_view(roles=ADMINS)
def agent_create_view(request: HttpRequest) -> HttpResponse:
    cu = _cu(request)

    def page(form: AgentForm, status: int = 200) -> HttpResponse:
        ctx = {"nav": "agents", "form": form, "creating": True}
        return render(request, "agents/form.html", ctx, status=status)

    if request.method != "POST":
        return page(AgentForm(initial=AgentForm.initial_of(None), tool_names=_tool_names(cu)))
    form = AgentForm(request.POST, tool_names=_tool_names(cu))
    return save_form(
        form,
        lambda d: agent_create(tenant_id=cu.tenant_id, name=d["name"], actor=cu.actor,
                               **form.profile_fields()),
        page=page,
        done=lambda agent: succeeded(request, f"Agent {agent.name} created.",
                                     "console:agent-detail", name=agent.name),
    )


def _saved_message(saved: AgentProfile) -> str:
    live = (
        "New tasks get it."
        if saved.latest_version == saved.current_version
        else f"New tasks still get version {saved.current_version}: release or "
        f"promote version {saved.latest_version} below."
    )
    return (
        f"Agent {saved.name} saved as version {saved.latest_version}. {live} Tasks "
        "already submitted keep the settings they started with."
    )


@console_view(roles=ADMINS)
def agent_edit_view(request: HttpRequest, name: str) -> HttpResponse:
    cu = _cu(request)
    agent = _agent_or_404(cu, name)

    def page(form: AgentForm, status: int = 200) -> HttpResponse:
        ctx = {"nav": "agents", "agent": agent, "creating": False, "form": form}
        return render(request, "agents/form.html", ctx, status=status)

    if request.method != "POST":
        return page(AgentForm(
            initial=AgentForm.initial_of(agent), tool_names=_tool_names(cu), editing=True
        ))
    form = AgentForm(
        request.POST, initial={"name": agent.name}, tool_names=_tool_names(cu), editing=True
    )
    return save_form(
        form,
        lambda d: agent_update(tenant_id=cu.tenant_id, name=agent.name,
                               changes=form.profile_fields(agent.model), actor=cu.actor),
        page=page,
        done=lambda saved: succeeded(request, _saved_message(saved),
                                     "console:agent-detail", name=saved.name),
    )
