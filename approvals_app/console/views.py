"""The inbox page and the decisions taken on its cards.

Each action calls one service (`approvals_app.services.decisions` or
`approvals_app.services.answers.task_provide_input`) with the task version the card
showed. Through htmx the response is the card itself, fresh from the database,
with what happened (or why nothing did: 400 field errors, 403, 409 stale view).
Without JavaScript a success redirects back and a refusal re-renders the inbox.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from approvals_app.services.answers import task_provide_input
from foundations.console_access import DECIDERS, INBOX_ROLES, ConsoleUser, console_view, refuse
from foundations.console_actions import form_action
from foundations.console_errors import error_message, error_status, field_errors, form_errors
from foundations.errors import DomainError, conflict
from tools_app.registry import tool_specs
from tools_app.schemas import schema_errors

from ..models import (
    Approval,
    Question,
    QuestionStatus,
    Reconciliation,
    ReconciliationStatus,
)
from ..selectors import INBOX_FILTERS
from ..services.decide_all import approvals_decide_all
from ..services.decisions import approval_decide, reconciliation_requery, reconciliation_resolve
from ..services.routing import approval_reassign
from . import selectors as sel
from .forms import (
    AnswerForm,
    ApproveForm,
    PreviewForm,
    ReassignForm,
    RejectForm,
    ResolveForm,
    RespondForm,
)


def _cu(request: HttpRequest) -> ConsoleUser:
    return request.console  # type: ignore[attr-defined, no-any-return]


# --- pages ---------------------------------------------------------------------------


@require_GET
@console_view(roles=INBOX_ROLES)
def inbox(request: HttpRequest) -> HttpResponse:
    cu = _cu(request)
    show = request.GET.get("show", "all")
    show = show if show in INBOX_FILTERS else "all"
    ctx = {"nav": "inbox", "inbox": sel.inbox(cu.tenant_id, user_id=cu.user_id, show=show),
           "inbox_filters": [("all", "All"), ("groups", "My groups"), ("mine", "Mine")]}
    if request.htmx and request.GET.get("fragment") == "items":  # type: ignore[attr-defined]
        return render(request, "approvals/_inbox_sections.html", ctx)
    return render(request, "approvals/inbox.html", ctx)


@require_GET
@console_view()
def inbox_badge(request: HttpRequest) -> HttpResponse:
    cu = _cu(request)
    count = sel.inbox_count(cu.tenant_id) if cu.sees_inbox else 0
    return render(request, "approvals/_badge.html", {"inbox_count": count})


# --- answering through the card -----------------------------------------------------------


def _card_response(
    request: HttpRequest,
    cu: ConsoleUser,
    kind: str,
    pk: int,
    *,
    status: int = 200,
    message: str = "",
    level: str = "success",
    errors: dict[str, list[str]] | None = None,
    values: dict[str, Any] | None = None,
    open_form: str = "",
) -> HttpResponse:
    card = sel.card_of(cu.tenant_id, kind, pk)
    if card is None:
        raise Http404("No such request")
    if not request.htmx:  # type: ignore[attr-defined]
        if status >= 400 and cu.sees_inbox:
            messages.error(request, message)
            return render(
                request,
                "approvals/inbox.html",
                {
                    "nav": "inbox",
                    "inbox": sel.inbox(cu.tenant_id),
                    "errors_by_card": {card.key: errors or {}},
                },
                status=status,
            )
        (messages.success if status < 400 else messages.error)(request, message)
        return redirect(_back(request, cu, card.task.pk))
    return render(
        request,
        "approvals/_card.html",
        {
            "card": card,
            "card_message": message,
            "card_level": level,
            "card_errors": errors or {},
            "values": values or {},
            "open_form": open_form,
            "context_page": request.POST.get("context", ""),
        },
        status=status,
    )


def _back(request: HttpRequest, cu: ConsoleUser, task_id: int) -> str:
    """Where a form without JavaScript returns to: the page it came from, if it is ours."""
    target = request.POST.get("next", "")
    if url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    if cu.sees_inbox:
        return reverse("inbox:inbox")
    return reverse("console:task-detail", args=[task_id])


def _refusal(
    request: HttpRequest,
    cu: ConsoleUser,
    kind: str,
    pk: int,
    exc: DomainError,
    values: dict[str, Any],
    open_form: str,
) -> HttpResponse:
    return _card_response(
        request,
        cu,
        kind,
        pk,
        status=error_status(exc),
        message=error_message(exc),
        level="error",
        errors=field_errors(exc),
        values=values,
        open_form=open_form if error_status(exc) == 400 else "",
    )


def _invalid_form(
    request: HttpRequest, cu: ConsoleUser, kind: str, pk: int, form: Any, open_form: str
) -> HttpResponse:
    errors = form_errors(form)
    stale_fields = {"expected_version"} & set(errors)
    message = (
        "Not applied: the page did not say which version of the task you saw; reload it."
        if stale_fields
        else "Not applied: please correct the fields below."
    )
    return _card_response(
        request,
        cu,
        kind,
        pk,
        status=400,
        message=message,
        level="error",
        errors=errors,
        values=dict(request.POST.items()),
        open_form=open_form,
    )


def _approval_or_404(cu: ConsoleUser, pk: int) -> Approval:
    approval = Approval.objects.filter(tenant_id=cu.tenant_id, pk=pk).select_related("task").first()
    if approval is None:
        raise Http404("No such approval")
    return approval


def _card_action(
    request: HttpRequest, kind: str, pk: int, form: Any, call: Callable[[dict[str, Any]], Any],
    done: Callable[[Any], str], *, open_form: str,
) -> HttpResponse:
    """A decision on a card: the card again, saying what happened or why nothing did."""
    cu = _cu(request)
    return form_action(
        form,
        call,
        invalid=lambda f: _invalid_form(request, cu, kind, pk, f, open_form),
        refused=lambda exc: _refusal(request, cu, kind, pk, exc, dict(request.POST.items()),
                                     open_form),
        done=lambda result: _card_response(request, cu, kind, pk, message=done(result)),
    )


@require_POST
@console_view(roles=DECIDERS)
def approval_approve(request: HttpRequest, pk: int) -> HttpResponse:
    cu = _cu(request)
    approval = _approval_or_404(cu, pk)
    return _card_action(
        request, "approval", pk, ApproveForm(request.POST),
        lambda d: approval_decide(
            approval_id=approval.pk, tenant_id=cu.tenant_id, actor=cu.actor, decision="approve",
            comment=d.get("comment") or "", args=d.get("args"),
            expected_version=d["expected_version"], always_allow=d.get("always_allow", False),
        ),
        lambda done: (
            f"Your approval is recorded: {done.tool} needs "
            f"{done.approvals_required - len(done.approvals_given)} more, from another reviewer."
            if done.status == "pending"
            else f"Approved {done.tool} with edited arguments." if done.args_diff
            else f"Approved {done.tool}."),
        open_form="edit" if "args" in request.POST else "",
    )


@require_POST
@console_view(roles=DECIDERS)
def approvals_decide_all_view(request: HttpRequest, task_id: int) -> HttpResponse:
    """Approve or reject every pending card of a task (the calls of one reply),
    each through the same decision as alone; back to the inbox, saying what
    was decided or why not."""
    cu = _cu(request)
    decision = request.POST.get("decision", "")
    try:
        decided = approvals_decide_all(task_id=task_id, tenant_id=cu.tenant_id, actor=cu.actor,
                                       decision=decision,  # type: ignore[arg-type]
                                       comment=request.POST.get("comment", ""))
    except DomainError as exc:
        if error_status(exc) == 404:
            raise Http404("No such task") from exc
        messages.error(request, f"Not all decided: {error_message(exc)}")
    else:
        done = "Approved" if decision == "approve" else "Rejected"
        messages.success(request, f"{done} {len(decided)} calls of task #{task_id}.")
    return redirect(reverse("inbox:inbox") if cu.sees_inbox
                    else reverse("console:task-detail", args=[task_id]))


@require_POST
@console_view(roles=DECIDERS)
def approval_reassign_view(request: HttpRequest, pk: int) -> HttpResponse:
    cu = _cu(request)
    approval = _approval_or_404(cu, pk)
    return _card_action(
        request, "approval", pk, ReassignForm(request.POST),
        lambda d: approval_reassign(
            approval_id=approval.pk, tenant_id=cu.tenant_id, actor=cu.actor,
            to_user=d.get("to_user") or None, to_group=d.get("to_group") or None,
            comment=d.get("comment") or ""),
        lambda done: "Reassigned to " + (done.assignee.username if done.assignee is not None
                                         else f"the group {done.group.name}") + ".",
        open_form="reassign",
    )


@require_POST
@console_view(roles=DECIDERS)
def approval_preview(request: HttpRequest, pk: int) -> HttpResponse:
    """Check edited arguments against the tool's schema and show the diff, deciding nothing."""
    cu = _cu(request)
    approval = _approval_or_404(cu, pk)
    form = PreviewForm(request.POST)
    errors: list[str] = []
    diff: list[dict[str, Any]] = []
    if not form.is_valid():
        errors = [str(e) for e in form.errors.get("args", [])]
    else:
        args = form.cleaned_data["args"]
        allowed = (approval.task.agent_snapshot or {}).get("tools") or []
        spec = tool_specs(tenant_id=cu.tenant_id, names=[approval.tool]).get(approval.tool)
        if approval.tool not in allowed or spec is None:
            errors = [f"{approval.tool} is no longer allowed or enabled"]
        else:
            try:
                errors = schema_errors(spec.args_schema, args)
            except DomainError as exc:  # a stored schema the rules refuse
                errors = [exc.message]
        diff = args_diff(approval.args or {}, args)
    return render(
        request,
        "approvals/_diff.html",
        {"errors": errors, "diff": diff, "checked": True},
        status=400 if errors else 200,
    )


def args_diff(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    keys = sorted(set(before) | set(after))
    return [
        {
            "key": k,
            "from": before.get(k),
            "to": after.get(k),
            "added": k not in before,
            "removed": k not in after,
        }
        for k in keys
        if before.get(k) != after.get(k)
    ]


@require_POST
@console_view(roles=DECIDERS)
def approval_reject(request: HttpRequest, pk: int) -> HttpResponse:
    cu = _cu(request)
    _approval_or_404(cu, pk)
    return _card_action(
        request, "approval", pk, RejectForm(request.POST),
        lambda d: approval_decide(
            approval_id=pk, tenant_id=cu.tenant_id, actor=cu.actor, decision="reject",
            comment=d["comment"], expected_version=d["expected_version"],
        ),
        lambda _: "Rejected; the agent gets your feedback.",
        open_form="reject",
    )


@require_POST
@console_view(roles=DECIDERS)
def approval_respond(request: HttpRequest, pk: int) -> HttpResponse:
    cu = _cu(request)
    _approval_or_404(cu, pk)
    return _card_action(
        request, "approval", pk, RespondForm(request.POST),
        lambda d: approval_decide(
            approval_id=pk, tenant_id=cu.tenant_id, actor=cu.actor, decision="respond",
            comment=d.get("comment") or "", output=d["output"],
            expected_version=d["expected_version"],
        ),
        lambda _: "Responded: the agent gets your result instead of a tool call.",
        open_form="respond",
    )


@require_POST
@console_view()
def question_answer(request: HttpRequest, pk: int) -> HttpResponse:
    cu = _cu(request)
    question = Question.objects.filter(tenant_id=cu.tenant_id, pk=pk).select_related("task").first()
    if question is None:
        raise Http404("No such question")
    if not cu.can_answer(question.task):
        return refuse(
            request, "Only reviewers, admins and the task's requester can answer its questions."
        )

    def answer(d: dict[str, Any]) -> None:
        # The card was stale: say so before asking the task.
        if question.status != QuestionStatus.OPEN:
            raise conflict("question_closed", f"this question is already {question.status}")
        task_provide_input(task_id=question.task_id, answer=d["answer"], actor=cu.actor,
                           expected_version=d["expected_version"])

    return _card_action(
        request, "question", pk, AnswerForm(request.POST), answer,
        lambda _: "Answer sent; the agent continues.",
        open_form="answer",
    )


def _rec_or_404(cu: ConsoleUser, pk: int) -> Reconciliation:
    rec = Reconciliation.objects.filter(tenant_id=cu.tenant_id, pk=pk).first()
    if rec is None:
        raise Http404("No such reconciliation")
    return rec


def _requeried(
    request: HttpRequest, cu: ConsoleUser, pk: int, rec: Reconciliation
) -> HttpResponse:
    if rec.status == ReconciliationStatus.RESOLVED:
        message = f"The status query settled it: {rec.outcome}."
        return _card_response(request, cu, "reconciliation", pk, message=message)
    state = (rec.status_answer or {}).get("state", "unknown")
    return _card_response(
        request,
        cu,
        "reconciliation",
        pk,
        level="warning",
        message=f"The status query still cannot tell (it says: {state}).",
    )


@require_POST
@console_view(roles=DECIDERS)
def reconciliation_requery_view(request: HttpRequest, pk: int) -> HttpResponse:
    cu = _cu(request)
    _rec_or_404(cu, pk)
    return form_action(
        None,
        lambda _: reconciliation_requery(reconciliation_id=pk, tenant_id=cu.tenant_id,
                                         actor=cu.actor),
        refused=lambda exc: _refusal(request, cu, "reconciliation", pk, exc, {}, ""),
        done=lambda rec: _requeried(request, cu, pk, rec),
    )


RESOLVED = {
    "succeeded": "Marked succeeded; the agent gets the result.",
    "failed": "Marked failed; the agent is told the call did not happen.",
    "retry": "Retrying with the same idempotency key.",
}


@require_POST
@console_view(roles=DECIDERS)
def reconciliation_resolve_view(request: HttpRequest, pk: int) -> HttpResponse:
    cu = _cu(request)
    _rec_or_404(cu, pk)
    form = ResolveForm(request.POST)
    return _card_action(
        request, "reconciliation", pk, form,
        lambda d: reconciliation_resolve(
            reconciliation_id=pk, tenant_id=cu.tenant_id, actor=cu.actor, outcome=d["outcome"],
            output=d.get("output"), comment=d.get("comment") or "",
            expected_version=d["expected_version"],
        ),
        lambda _: RESOLVED[form.cleaned_data["outcome"]],
        open_form=request.POST.get("outcome", ""),
    )
