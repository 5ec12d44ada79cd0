"""The console's Evaluations pages: the tenant's evaluations with a form to
start one (an agent, the candidate version, the recorded tasks chosen with the
task list's filters), and one evaluation: its progress (polled while it runs),
its summary and a per-task table with baseline and candidate side by side and
where they first diverged; and one replay: the recorded task's and the shadow
task's timelines on rows by step number (`comparing.align`, as the API's
compare), the rows before the first divergence folded, the divergence marked
and scrolled to. Starting goes through the same service as the API."""
from __future__ import annotations

from typing import Any

from django import forms
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from foundations.console_access import OPERATORS, ConsoleUser, console_view
from foundations.console_actions import ServiceErrorsForm, save_form, succeeded
from foundations.console_paging import cursor, keyset_page
from tasks_app.console.selectors import step_views
from tasks_app.machine import TERMINAL
from tasks_app.selectors import task_of_tenant

from .models import Evaluation, EvaluationStatus, Scorer
from .selectors import evaluation_of, evaluation_tasks, evaluations_of, progress_of, replay_of
from .services.comparing import align
from .services.starting import Selection, evaluation_start

PAGE_SIZE = 50
COMPARED_STEPS = 200  # steps of each run on the comparison page, the latest


def _cu(request: HttpRequest) -> ConsoleUser:
    return request.console  # type: ignore[attr-defined, no-any-return]


class StartForm(ServiceErrorsForm):
    agent = forms.CharField(max_length=64)
    candidate_version = forms.IntegerField(min_value=1, max_value=2**31 - 1)
    status = forms.MultipleChoiceField(choices=[(s.value, s.label) for s in TERMINAL],
                                       required=False, help_text="Ended statuses (any).")
    created_after = forms.DateTimeField(required=False, help_text="UTC.")
    created_before = forms.DateTimeField(required=False, help_text="UTC.")
    subject = forms.CharField(max_length=200, required=False)
    agent_version = forms.IntegerField(min_value=1, max_value=2**31 - 1, required=False,
                                       help_text="Only tasks run with this version.")
    limit = forms.IntegerField(min_value=1, required=False,
                               help_text="At most this many tasks, newest first.")
    scorer = forms.ChoiceField(choices=Scorer.choices)
    judge = forms.CharField(max_length=64, required=False,
                            help_text="For the judge scorer: the judging agent.")
    live_reads = forms.BooleanField(required=False,
                                    help_text="Make unrecorded read-only calls for real.")


def _start(cu: ConsoleUser, d: dict[str, Any]) -> Evaluation:
    return evaluation_start(
        tenant_id=cu.tenant_id, agent=d["agent"], candidate_version=d["candidate_version"],
        selection=Selection(statuses=d["status"] or None, created_after=d["created_after"],
                            created_before=d["created_before"], subject=d["subject"],
                            agent_version=d["agent_version"]),
        scorer=d["scorer"], actor=cu.actor, limit=d["limit"], live_reads=d["live_reads"],
        judge=d["judge"])


def _list_page(request: HttpRequest, form: StartForm | None = None, *,
               status: int = 200) -> HttpResponse:
    cu = _cu(request)
    page = keyset_page(evaluations_of(cu.tenant_id), before=cursor(request.GET.get("before")),
                       after=cursor(request.GET.get("after")), size=PAGE_SIZE)
    initial = {k: request.GET[k] for k in ("agent", "candidate_version") if k in request.GET}
    return render(request, "evaluations/list.html", {
        "nav": "evaluations", "page": page, "form": form or StartForm(initial=initial)},
        status=status)


@console_view(roles=OPERATORS)
def evaluation_list(request: HttpRequest) -> HttpResponse:
    return _list_page(request)


@console_view(roles=OPERATORS)
def evaluation_create(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return redirect("evaluations:evaluation-list")
    cu = _cu(request)
    return save_form(
        StartForm(request.POST), lambda d: _start(cu, d),
        page=lambda f, status: _list_page(request, f, status=status),
        done=lambda e: succeeded(request, f"Evaluation {e.pk} started: "
                                          f"{e.tasks.count()} recorded tasks replayed.",
                                 "evaluations:evaluation-detail", e.pk))


def _detail_context(cu: ConsoleUser, evaluation_id: int) -> dict[str, Any] | None:
    evaluation = evaluation_of(cu.tenant_id, evaluation_id)
    if evaluation is None:
        return None
    return {"nav": "evaluations", "evaluation": evaluation, "progress": progress_of(evaluation),
            "running": evaluation.status == EvaluationStatus.RUNNING,
            "rows": list(evaluation_tasks(evaluation)[:1000])}


@console_view(roles=OPERATORS)
def evaluation_detail(request: HttpRequest, evaluation_id: int) -> HttpResponse:
    context = _detail_context(_cu(request), evaluation_id)
    if context is None:
        return render(request, "404.html", status=404)
    template = ("evaluations/_body.html" if request.headers.get("HX-Request")
                else "evaluations/detail.html")
    return render(request, template, context)


def _aligned_context(cu: ConsoleUser, evaluation_id: int, task_id: int) -> dict[str, Any] | None:
    evaluation = evaluation_of(cu.tenant_id, evaluation_id)
    replay = replay_of(evaluation, task_id) if evaluation else None
    if replay is None:
        return None
    baseline, baseline_total = step_views(replay.recorded_task_id, limit=COMPARED_STEPS)
    candidate, candidate_total = step_views(replay.shadow_task_id, limit=COMPARED_STEPS)
    alignment = align(baseline, candidate, lambda v: v.step)
    split = next((i for i, r in enumerate(alignment.rows) if not r.same), len(alignment.rows))
    return {"nav": "evaluations", "evaluation": evaluation, "replay": replay,
            "recorded": task_of_tenant(cu.tenant_id, replay.recorded_task_id),
            "shadow": task_of_tenant(cu.tenant_id, replay.shadow_task_id),
            "c": replay.comparison, "divergence": alignment.divergence,
            "same_before": alignment.rows[:split], "from_divergence": alignment.rows[split:],
            "cut": max(baseline_total, candidate_total) > COMPARED_STEPS,
            "compared_steps": COMPARED_STEPS}


@console_view(roles=OPERATORS)
def replay_compare(request: HttpRequest, evaluation_id: int, task_id: int) -> HttpResponse:
    context = _aligned_context(_cu(request), evaluation_id, task_id)
    if context is None:
        return render(request, "404.html", status=404)
    return render(request, "evaluations/compare.html", context)
