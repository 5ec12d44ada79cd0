"""The console's Schedules page: every schedule of the tenant with its next due
time and its last run (everyone in the tenant reads it); operators and admins
pause and resume, through the same services as the API."""
from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from foundations.console_access import OPERATORS, ConsoleUser, console_view
from foundations.console_actions import form_action, succeeded
from foundations.console_errors import error_line, error_status
from foundations.errors import DomainError

from ..models import Schedule
from ..selectors import schedules_with_last_run
from ..services.schedules import schedule_pause, schedule_resume


def _cu(request: HttpRequest) -> ConsoleUser:
    return request.console  # type: ignore[attr-defined, no-any-return]


def _page(request: HttpRequest, *, status: int = 200, error: str = "") -> HttpResponse:
    return render(request, "schedules/list.html", {
        "nav": "schedules",
        "rows": schedules_with_last_run(_cu(request).tenant_id),
        "error": error,
    }, status=status)


@console_view()
def schedule_list(request: HttpRequest) -> HttpResponse:
    return _page(request)


def _action(request: HttpRequest, name: str, call: Callable[..., Schedule],
            done: str) -> HttpResponse:
    if request.method != "POST":
        return redirect("schedules:schedule-list")
    cu = _cu(request)

    def refused(exc: DomainError) -> HttpResponse:
        return _page(request, status=error_status(exc), error=error_line(exc))

    return form_action(
        None, lambda _: call(tenant_id=cu.tenant_id, name=name, actor=cu.actor),
        refused=refused,
        done=lambda _: succeeded(request, f"Schedule {name} {done}.", "schedules:schedule-list"))


@console_view(roles=OPERATORS)
def schedule_pause_view(request: HttpRequest, name: str) -> HttpResponse:
    return _action(request, name, schedule_pause, "paused: no due time fires until it resumes")


@console_view(roles=OPERATORS)
def schedule_resume_view(request: HttpRequest, name: str) -> HttpResponse:
    return _action(request, name, schedule_resume,
                   "resumed from its next due time (the ones passed while paused do not run)")
