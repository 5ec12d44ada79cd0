"""Console pages for tasks: the dashboard, the task list, the live task page and
the operator's actions (cancel, bulk cancel, bulk retry, resume, fail, retry from a step,
roll the context summary back).

Thin: role checks through `foundations.console_access`, reads through `selectors`, writes through
`tasks_app.services.tasks`. An action that succeeds redirects back (303) with a
message; one that is refused re-renders the page with the fresh state, the
reason, and the status of the refusal (400/403/409).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlencode

from django.contrib import messages
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from approvals_app.console.selectors import inbox_count, open_card_for_task
from foundations.console_access import OPERATORS, SUMMARY_EDITORS, ConsoleUser, console_view, refuse
from foundations.console_actions import form_action, succeeded
from foundations.console_errors import (
    error_line,
    error_message,
    error_status,
    field_errors,
    form_errors,
)
from foundations.console_paging import cursor, keyset_page
from tools_app.breakers.selectors import waits_of_task
from workflows_app.console.dag import Dag, run_dag

from ..context.summaries import summary_count, summary_rollback
from ..machine import NON_TERMINAL, WAITING, TaskStatus
from ..models import Task
from ..retries.services import not_yet_retried, task_retry, task_retry_many
from ..selectors import task_of_tenant
from ..services.tasks import task_cancel, task_cancel_many, task_fail_by_operator, task_resume
from . import selectors as sel
from .forms import (
    BulkCancelForm,
    BulkRetryForm,
    CancelForm,
    FailForm,
    ResumeForm,
    SummaryRollbackForm,
    TaskFilterForm,
    describe_filters,
)
from .presenters import WAITING_LABELS, budget_meters
from .retries import RetryForm, retry_panel

PAGE_SIZE = 25
RESUME_FIELDS = [
    ("max_steps", "Extra steps"),
    ("max_model_calls", "Extra model calls"),
    ("max_tool_calls", "Extra tool calls"),
    ("max_tokens", "Extra tokens"),
    ("max_duration_s", "Extra seconds"),
]
BULK_CANCEL_LIMIT = 1000
BULK_RETRY_LIMIT = 100  # each retry copies its task's steps: a click's worth


def _cu(request: HttpRequest) -> ConsoleUser:
    return request.console  # type: ignore[attr-defined, no-any-return]


def _task_or_404(cu: ConsoleUser, task_id: int) -> Task:
    task = task_of_tenant(cu.tenant_id, task_id)
    if task is None:
        raise Http404("No such task")
    return task


# --- dashboard -------------------------------------------------------------------------


@require_GET
@console_view()
def dashboard(request: HttpRequest) -> HttpResponse:
    cu = _cu(request)
    ctx: dict[str, Any] = {
        "nav": "dashboard",
        "d": sel.dashboard(cu.tenant_id),
        "inbox_total": inbox_count(cu.tenant_id) if cu.sees_inbox else None,
    }
    if request.htmx and request.GET.get("fragment") == "body":  # type: ignore[attr-defined]
        return render(request, "tasks/_dashboard_body.html", ctx)
    return render(request, "tasks/dashboard.html", ctx)


# --- the task list ------------------------------------------------------------------------


FilterForm = TypeVar("FilterForm", bound=TaskFilterForm)


def _filter_form(form_class: type[FilterForm], data: Any, cu: ConsoleUser) -> FilterForm:
    """A form carrying the list's filters, with the tenant's agents and workflows to pick."""
    return form_class(data, agents=sel.agent_names(cu.tenant_id),
                      workflows=sel.workflow_names(cu.tenant_id))


def _list_filters(
    request: HttpRequest, cu: ConsoleUser, data: Any
) -> tuple[TaskFilterForm, dict[str, Any]]:
    form = _filter_form(TaskFilterForm, data, cu)
    return form, form.filters()


def _matching(cu: ConsoleUser, filters: dict[str, Any]):  # type: ignore[no-untyped-def]
    return sel.filtered_tasks(
        cu.tenant_id,
        status=filters["status"],
        agent=filters["agent"],
        workflow=filters["workflow"],
        q=filters["q"],
        trace=filters["trace"],
        requester_id=cu.user_id if filters["mine"] else None,
        agent_version=filters["agent_version"],
    )


def _list_context(request: HttpRequest, cu: ConsoleUser) -> dict[str, Any]:
    form, filters = _list_filters(request, cu, request.GET)
    qs = _matching(cu, filters)
    page = keyset_page(qs, before=cursor(request.GET.get("before")),
                       after=cursor(request.GET.get("after")), size=PAGE_SIZE)
    kept = {k: ("on" if v is True else v) for k, v in filters.items() if v}
    active = qs.filter(status__in=NON_TERMINAL).count() if cu.can_operate else 0
    return {
        "nav": "tasks",
        "form": form,
        "filters": filters,
        "page": page,
        "tasks": page.rows,
        "query_prefix": urlencode(kept) + "&" if kept else "",
        "filtered": bool(kept),
        "filter_text": describe_filters(filters),
        "active_matching": active,
        "bulk_limit": BULK_CANCEL_LIMIT,
        # ended tasks a bulk retry would take: offered on a filtered list only
        "retryable_matching": (not_yet_retried(qs).count()
                               if cu.can_operate and kept else 0),
        "bulk_retry_limit": BULK_RETRY_LIMIT,
    }


@require_GET
@console_view()
def task_list(request: HttpRequest) -> HttpResponse:
    cu = _cu(request)
    ctx = _list_context(request, cu)
    if request.htmx and request.GET.get("fragment") == "body":  # type: ignore[attr-defined]
        return render(request, "tasks/_list_body.html", ctx)
    return render(request, "tasks/list.html", ctx)


@require_POST
@console_view(roles=OPERATORS)
def tasks_bulk_cancel(request: HttpRequest) -> HttpResponse:
    """Cancel every active task that matches the list's filters (each in its own
    transaction; one that ended meanwhile is skipped and counted)."""
    cu = _cu(request)

    def cancel(ids: list[int], data: dict[str, Any], described: str) -> str:
        reason = data.get("reason") or f"bulk cancel ({described})"
        done = task_cancel_many(task_ids=ids, actor=cu.actor, reason=reason)
        return _bulk_done("Canceled", len(done["canceled"]), len(done["skipped"]),
                          "had already ended or moved on")

    return _bulk_by_filter(request, cu, _filter_form(BulkCancelForm, request.POST, cu),
                           verb="cancel", limit=BULK_CANCEL_LIMIT,
                           which=lambda qs: qs.filter(status__in=NON_TERMINAL), run=cancel)


@require_POST
@console_view(roles=OPERATORS)
def tasks_bulk_retry(request: HttpRequest) -> HttpResponse:
    """Retry the ended tasks (FAILED, CANCELED) matching the list's filters that
    were not retried before, each from its default step in its own transaction;
    only on a filtered list, at most `BULK_RETRY_LIMIT` a time."""
    cu = _cu(request)

    def retry(ids: list[int], data: dict[str, Any], described: str) -> str:
        comment = data.get("comment") or f"bulk retry ({described})"
        done = task_retry_many(tenant_id=cu.tenant_id, task_ids=ids, actor=cu.actor,
                               comment=comment)
        return _bulk_done("Retried", len(done["retried"]), len(done["skipped"]),
                          "could not be retried")

    return _bulk_by_filter(request, cu, _filter_form(BulkRetryForm, request.POST, cu),
                           verb="retry", limit=BULK_RETRY_LIMIT, which=not_yet_retried,
                           run=retry, needs_filter=True)


def _bulk_by_filter(request: HttpRequest, cu: ConsoleUser, form: BulkCancelForm | BulkRetryForm,
                    *, verb: str, limit: int, which: Callable[[QuerySet[Task]], QuerySet[Task]],
                    run: Callable[[list[int], dict[str, Any], str], str],
                    needs_filter: bool = False) -> HttpResponse:
    """A bulk action on the tasks `which` picks among those matching the list's
    filters. The operator confirmed how many (`expected_count`): when more match
    now, nothing is done and they are asked to look again."""
    filters = form.filters()
    back = (reverse("console:task-list") + "?"
            + urlencode({k: ("on" if v is True else v) for k, v in filters.items() if v}))
    if not form.is_valid():
        messages.error(request, f"Not applied: the bulk {verb} form was incomplete.")
        return redirect(back, permanent=False)
    if needs_filter and not any(filters.values()):
        messages.error(request, f"Not applied: filter the list before a bulk {verb}.")
        return redirect(back)
    ids = list(which(_matching(cu, filters)).order_by("id")
               .values_list("id", flat=True)[:limit])
    expected = form.cleaned_data["expected_count"]
    if len(ids) > expected:
        messages.warning(
            request,
            f"Not applied: {len(ids)} tasks match now, not the {expected} you "
            "confirmed. Check the list and confirm again.",
        )
        return redirect(back)
    messages.success(request, run(ids, form.cleaned_data, describe_filters(filters)))
    return redirect(back)


def _bulk_done(verb: str, done: int, skipped: int, why: str) -> str:
    text = f"{verb} {done} task{'s' if done != 1 else ''}."
    if skipped:
        text += f" {skipped} {why} and were left alone."
    return text


# --- the task page ---------------------------------------------------------------------------


def _task_context(request: HttpRequest, cu: ConsoleUser, task: Task) -> dict[str, Any]:
    events, earlier = sel.latest_events(task.pk)
    steps, steps_total = sel.step_views(task.pk)
    return {
        "nav": "tasks",
        "task": task,
        "events": events,
        "has_earlier": earlier,
        "last_event_id": events[-1].id if events else 0,
        **_panels(cu, task),
        **_summaries(cu, task, first_on_page=events[0].id if earlier and events else 0),
        "steps": steps,
        "steps_total": steps_total,
        "dag": _dag(task, steps),
    }


def _dag(task: Task, steps: list[sel.StepView]) -> Dag | None:
    """A workflow run's graph, its boxes linked to the step rows the page shows."""
    return run_dag(task, shown_steps=frozenset(s.step.step_no for s in steps))


def _summaries(cu: ConsoleUser, task: Task, *, first_on_page: int) -> dict[str, Any]:
    views = sel.summary_views(task.pk, cu.tenant_id, first_on_page=first_on_page)
    shown = len(views)
    return {
        "summaries": views,
        "summaries_hidden": (summary_count(task_id=task.pk, tenant_id=cu.tenant_id) - shown
                             if shown >= sel.SUMMARIES_SHOWN else 0),
        "summaries_key": f"{sel.summaries_key(views)}|{cu.can_roll_back_summary}",
        "summary_in_use": next((v.version for v in views if v.in_use), 0),
    }


def _panels(cu: ConsoleUser, task: Task) -> dict[str, Any]:
    """What the live refresh re-renders: state, waiting card, actions, budget."""
    card = open_card_for_task(task)
    return {
        "task": task,
        "meters": budget_meters(task),
        "card": card,
        "waiting_for": WAITING_LABELS.get(task.status, ""),
        "is_waiting": task.status in WAITING,
        "is_active": task.status in NON_TERMINAL,
        "can_cancel": cu.can_cancel(task) and task.status in NON_TERMINAL,
        "can_resume": cu.can_resume(task) and task.status == TaskStatus.WAITING_FOR_HUMAN,
        "can_fail": cu.can_operate and task.status in WAITING,
        "breaker_waits": (waits_of_task(task.pk) if task.status == TaskStatus.RUNNING else []),
        **sel.children_of(task),
        "resume_fields": RESUME_FIELDS,
        **retry_panel(cu, task),
    }


@require_GET
@console_view()
def task_detail(request: HttpRequest, task_id: int) -> HttpResponse:
    cu = _cu(request)
    task = _task_or_404(cu, task_id)
    return render(request, "tasks/detail.html", _task_context(request, cu, task))


@require_GET
@console_view()
def task_live(request: HttpRequest, task_id: int) -> HttpResponse:
    """Timeline rows after `after` plus the panels, for the page's live refresh."""
    cu = _cu(request)
    task = _task_or_404(cu, task_id)
    after = cursor(request.GET.get("after")) or 0
    first = cursor(request.GET.get("first")) or 0  # the oldest row the page shows (0: all)
    events, more = sel.events_page(task.pk, after=after)
    steps, steps_total = sel.step_views(task.pk)
    return render(
        request,
        "tasks/_live.html",
        {
            **_panels(cu, task),
            **_summaries(cu, task, first_on_page=first),
            "events": events,
            "more": more,
            "steps": steps,
            "steps_total": steps_total,
            "dag": _dag(task, steps),
        },
    )


@require_GET
@console_view()
def task_events_before(request: HttpRequest, task_id: int) -> HttpResponse:
    cu = _cu(request)
    task = _task_or_404(cu, task_id)
    events, earlier = sel.events_page(task.pk, before=cursor(request.GET.get("before")))
    return render(
        request, "tasks/_earlier.html", {"task": task, "events": events, "has_earlier": earlier}
    )


def _refused(
    request: HttpRequest,
    cu: ConsoleUser,
    task_id: int,
    message: str,
    status: int,
    errors: dict[str, list[str]] | None = None,
    action: str = "",
) -> HttpResponse:
    """The task page again, fresh from the database, saying why nothing was done."""
    task = _task_or_404(cu, task_id)
    messages.error(request, message)
    ctx = _task_context(request, cu, task)
    ctx.update(action_errors=errors or {}, open_action=action)
    return render(request, "tasks/detail.html", ctx, status=status)


def _version_for_cancel(task: Task, form: CancelForm) -> int | None:
    """Cancel acts on what the operator saw. While a task is running its version
    moves with every step; progress inside RUNNING does not make "stop this" stale,
    so only a change of status is. A waiting task's version is stable: pass it."""
    shown = form.cleaned_data.get("shown_status")
    if shown in (TaskStatus.RUNNING, TaskStatus.CREATED) and task.status == shown:
        return None
    return form.cleaned_data["expected_version"]


def _task_action(
    request: HttpRequest, task: Task, form: Any, call: Callable[[dict[str, Any]], Any],
    done: Callable[[Any], HttpResponse], *, action: str,
    incomplete: str = "Not applied: please correct the fields below.",
) -> HttpResponse:
    """An operator's action on the task page: a refusal shows the page again with
    the reason, the action's form open with its field errors, and the status."""
    cu = _cu(request)
    return form_action(
        form,
        call,
        invalid=lambda f: _refused(request, cu, task.pk, incomplete, 400, form_errors(f), action),
        refused=lambda exc: _refused(request, cu, task.pk, error_message(exc), error_status(exc),
                                     field_errors(exc), action),
        done=done,
    )


@require_POST
@console_view()
def task_cancel_view(request: HttpRequest, task_id: int) -> HttpResponse:
    cu = _cu(request)
    task = _task_or_404(cu, task_id)
    if not cu.can_cancel(task):
        return refuse(request, "Only operators, admins and the task's requester can cancel it.")
    form = CancelForm(request.POST)
    return _task_action(
        request, task, form,
        lambda d: task_cancel(task_id=task.pk, actor=cu.actor,
                              expected_version=_version_for_cancel(task, form),
                              reason=d.get("reason") or ""),
        lambda _: succeeded(request, f"Task #{task.pk} canceled.", "console:task-detail",
                            task_id=task.pk),
        action="cancel", incomplete="Not applied: the cancel form was incomplete.",
    )


def _resumed(extra: dict[str, int]) -> str:
    """What a resume added, e.g. " with 10 more steps, 5 more tool calls"."""
    if not extra:
        return ""
    return " with " + ", ".join(
        f"{v} more {k.replace('max_', '').replace('_', ' ')}" for k, v in extra.items()
    )


@require_POST
@console_view(roles=OPERATORS)
def task_resume_view(request: HttpRequest, task_id: int) -> HttpResponse:
    cu = _cu(request)
    task = _task_or_404(cu, task_id)
    form = ResumeForm(request.POST)
    return _task_action(
        request, task, form,
        lambda d: task_resume(task_id=task.pk, actor=cu.actor,
                              expected_version=d["expected_version"], extend=form.extension(),
                              comment=d.get("comment") or ""),
        lambda _: succeeded(request, f"Task #{task.pk} resumed{_resumed(form.extension())}.",
                            "console:task-detail", task_id=task.pk),
        action="resume",
    )


@require_POST
@console_view(roles=OPERATORS)
def task_retry_view(request: HttpRequest, task_id: int) -> HttpResponse:
    cu = _cu(request)
    task = _task_or_404(cu, task_id)
    return _task_action(
        request, task, RetryForm(request.POST),
        lambda d: task_retry(tenant_id=cu.tenant_id, task_id=task.pk, actor=cu.actor,
                             from_step=d["from_step"], comment=d.get("comment") or ""),
        lambda done: succeeded(request, f"Task #{task.pk} retried from step {done.from_step} "
                               f"as task #{done.task.pk}.",
                               "console:task-detail", task_id=done.task.pk),
        action="retry",
    )


@require_POST
@console_view(roles=OPERATORS)
def task_fail_view(request: HttpRequest, task_id: int) -> HttpResponse:
    cu = _cu(request)
    task = _task_or_404(cu, task_id)
    return _task_action(
        request, task, FailForm(request.POST),
        lambda d: task_fail_by_operator(task_id=task.pk, actor=cu.actor,
                                        expected_version=d["expected_version"],
                                        reason=d["reason"]),
        lambda _: succeeded(request, f"Task #{task.pk} ended as failed.", "console:task-detail",
                            task_id=task.pk),
        action="fail", incomplete="Not applied: say why the task is being ended.",
    )


@require_POST
@console_view(roles=SUMMARY_EDITORS)
def task_summary_rollback_view(request: HttpRequest, task_id: int) -> HttpResponse:
    """Make an earlier context summary the one in use (version 0: none)."""
    cu = _cu(request)
    task = _task_or_404(cu, task_id)
    form = SummaryRollbackForm(request.POST)
    # The rollback form sits in the summaries panel, not among the actions: its
    # problems are said in the page's message.
    return form_action(
        form,
        lambda d: summary_rollback(task_id=task.pk, tenant_id=cu.tenant_id, version=d["version"],
                                   actor=cu.actor, expected_version=d["expected_version"],
                                   comment=d.get("comment") or ""),
        invalid=lambda f: _refused(
            request, cu, task_id,
            "Not applied: the rollback form was incomplete ("
            + "; ".join(f"{k}: {' '.join(v)}" for k, v in form_errors(f).items()) + ").",
            400,
        ),
        refused=lambda exc: _refused(request, cu, task_id, error_line(exc), error_status(exc)),
        done=lambda _: succeeded(
            request,
            f"Context summary rolled back to v{form.cleaned_data['version']}; the next one "
            "builds on it." if form.cleaned_data["version"] else
            "Context summaries dropped; the next one is built from the steps themselves.",
            reverse("console:task-detail", args=[task.pk]) + "#task-summaries",
        ),
    )
