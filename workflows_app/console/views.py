"""The console's workflow pages. Everyone in the tenant reads them; admins
create and edit definitions and release, promote and roll back versions, each
through one call of `workflows_app.services.workflows`. A refused action shows
the page again with the service's reason and the refusal's status (400, 404,
409), never a 500."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_POST

from foundations.console_access import ADMINS, ConsoleUser, console_view
from foundations.console_actions import form_action, save_form, succeeded
from foundations.console_errors import error_line, error_status, form_errors
from foundations.errors import DomainError

from ..models import Workflow
from ..services.workflows import (
    workflow_create,
    workflow_promote,
    workflow_release,
    workflow_update,
)
from . import selectors as sel
from .forms import EndReleaseForm, ReleaseForm, VersionForm, WorkflowForm

VERSIONS_SHOWN = 20


def _cu(request: HttpRequest) -> ConsoleUser:
    return request.console  # type: ignore[attr-defined, no-any-return]


def _workflow_or_404(cu: ConsoleUser, name: str) -> Workflow:
    workflow = sel.workflow_of_tenant(cu.tenant_id, name)
    if workflow is None:
        raise Http404("No such workflow")
    return workflow


@require_GET
@console_view()
def workflow_list(request: HttpRequest) -> HttpResponse:
    return render(request, "workflows/list.html", {
        "nav": "workflows", "workflows": sel.workflow_rows(_cu(request).tenant_id)})


def _detail_page(request: HttpRequest, workflow: Workflow, *, status: int = 200) -> HttpResponse:
    current = sel.version_of(workflow, workflow.current_version)
    return render(request, "workflows/detail.html", {
        "nav": "workflows",
        "workflow": workflow,
        "current": current,
        "definition_text": sel.definition_text(current),
        "versions": sel.versions_shown(workflow, VERSIONS_SHOWN),
        "version_numbers": sel.version_numbers(workflow),
        "runs": sel.recent_runs(workflow),
    }, status=status)


@require_GET
@console_view()
def workflow_detail(request: HttpRequest, name: str) -> HttpResponse:
    return _detail_page(request, _workflow_or_404(_cu(request), name))


def _release_action(request: HttpRequest, name: str, form_class: type[forms.Form],
                    act: Callable[[ConsoleUser, Workflow, dict[str, Any]], Workflow],
                    done: Callable[[Workflow], str]) -> HttpResponse:
    """Parse, call one release service, redirect with what happened; a refusal
    shows the page again, fresh, with the reason and the refusal's status."""
    cu = _cu(request)
    workflow = _workflow_or_404(cu, name)

    def invalid(form: forms.Form) -> HttpResponse:
        problems = "; ".join(f"{k}: {' '.join(v)}" for k, v in form_errors(form).items())
        messages.error(request, f"Not applied: {problems}.")
        return _detail_page(request, workflow, status=400)

    def refused(exc: DomainError) -> HttpResponse:
        messages.error(request, error_line(exc))
        return _detail_page(request, _workflow_or_404(cu, name), status=error_status(exc))

    return form_action(
        form_class(request.POST), lambda d: act(cu, workflow, d),
        invalid=invalid, refused=refused,
        done=lambda changed: succeeded(request, done(changed), "workflows:workflow-detail",
                                       name=workflow.name))


@require_POST
@console_view(roles=ADMINS)
def workflow_release_view(request: HttpRequest, name: str) -> HttpResponse:
    return _release_action(
        request, name, ReleaseForm,
        lambda cu, w, d: workflow_release(tenant_id=cu.tenant_id, name=w.name, actor=cu.actor,
                                          candidate=d["candidate"], percent=d["percent"]),
        lambda w: (f"Version {w.release_candidate} now goes to {w.release_percent} % of new "
                   f"runs; the rest get version {w.current_version}." if w.release_candidate
                   else f"Release ended: every new run gets version {w.current_version}."))


@require_POST
@console_view(roles=ADMINS)
def workflow_end_release_view(request: HttpRequest, name: str) -> HttpResponse:
    return _release_action(
        request, name, EndReleaseForm,
        lambda cu, w, d: workflow_release(tenant_id=cu.tenant_id, name=w.name, actor=cu.actor,
                                          candidate=None, percent=0),
        lambda w: f"Release ended: every new run gets version {w.current_version}.")


@require_POST
@console_view(roles=ADMINS)
def workflow_promote_view(request: HttpRequest, name: str) -> HttpResponse:
    return _release_action(
        request, name, VersionForm,
        lambda cu, w, d: workflow_promote(tenant_id=cu.tenant_id, name=w.name, actor=cu.actor,
                                          version=d["version"]),
        lambda w: f"Version {w.current_version} promoted: every new run gets it. "
        "Runs already started keep their version.")


@require_POST
@console_view(roles=ADMINS)
def workflow_rollback_view(request: HttpRequest, name: str) -> HttpResponse:
    return _release_action(
        request, name, VersionForm,
        lambda cu, w, d: workflow_promote(tenant_id=cu.tenant_id, name=w.name, actor=cu.actor,
                                          version=d["version"], action="rolled_back"),
        lambda w: f"Rolled back: every new run gets version {w.current_version}. "
        "Runs already started keep their version.")


def _form_page(request: HttpRequest, form: WorkflowForm, status: int = 200, *,
               workflow: Workflow | None = None) -> HttpResponse:
    return render(request, "workflows/form.html", {
        "nav": "workflows", "form": form, "workflow": workflow, "creating": workflow is None,
    }, status=status)


# A new workflow's editor starts from a definition that registers as it is.
STARTER = """\
inputs:
  type: object
  properties: {}
nodes:
  - id: ask
    human: {question: "What should happen next?"}
"""


@console_view(roles=ADMINS)
def workflow_create_view(request: HttpRequest) -> HttpResponse:
    cu = _cu(request)
    if request.method != "POST":
        return _form_page(request, WorkflowForm(initial={"definition": STARTER}))
    form = WorkflowForm(request.POST)
    return save_form(
        form,
        lambda d: workflow_create(tenant_id=cu.tenant_id, name=d["name"], actor=cu.actor,
                                  definition=d["definition"], description=d["description"]),
        page=lambda f, status: _form_page(request, f, status),
        done=lambda w: succeeded(request, f"Workflow {w.name} created as version 1: new runs "
                                 "get it.", "workflows:workflow-detail", name=w.name),
        status_of=error_status)


def _saved_message(workflow: Workflow, before: int | None) -> str:
    latest = sel.version_numbers(workflow)[0]
    if latest == before:
        return f"Workflow {workflow.name} saved; its definition is unchanged (version {latest})."
    live = ("New runs get it." if latest == workflow.current_version else
            f"New runs still get version {workflow.current_version}: release or promote "
            f"version {latest} below.")
    return f"Workflow {workflow.name} saved as version {latest}. {live}"


@console_view(roles=ADMINS)
def workflow_edit_view(request: HttpRequest, name: str) -> HttpResponse:
    cu = _cu(request)
    workflow = _workflow_or_404(cu, name)
    latest = sel.version_of(workflow, workflow.latest_version)  # type: ignore[attr-defined]
    if request.method != "POST":
        return _form_page(request, WorkflowForm(editing=True, initial={
            "description": workflow.description, "enabled": workflow.enabled,
            "published": workflow.published,
            "definition": sel.definition_text(latest)}), workflow=workflow)
    form = WorkflowForm(request.POST, editing=True)
    return save_form(
        form,
        lambda d: workflow_update(tenant_id=cu.tenant_id, name=workflow.name, actor=cu.actor,
                                  definition=d["definition"], description=d["description"],
                                  enabled=d["enabled"], published=d["published"]),
        page=lambda f, status: _form_page(request, f, status, workflow=workflow),
        done=lambda w: succeeded(request, _saved_message(w, latest.number if latest else None),
                                 "workflows:workflow-detail", name=w.name),
        status_of=error_status)
