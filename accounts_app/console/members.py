"""The console's Members page (admins only): the tenant's people, their roles and
their e-mail addresses (where notification e-mails go, and how a Slack user is
recognised as a reviewer), set through `accounts_app.services.accounts`."""

from __future__ import annotations

from django import forms
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from foundations.console_access import ADMINS, ConsoleUser, console_view
from foundations.console_actions import form_action, succeeded
from foundations.console_errors import error_line, error_status

from ..selectors import members_of_tenant
from ..services.accounts import member_email_set


class EmailForm(forms.Form):
    email = forms.CharField(max_length=254, required=False)


def _cu(request: HttpRequest) -> ConsoleUser:
    return request.console  # type: ignore[attr-defined, no-any-return]


def _page(request: HttpRequest, *, status: int = 200, error: str = "") -> HttpResponse:
    return render(request, "members/list.html", {
        "nav": "members", "members": members_of_tenant(_cu(request).tenant_id),
        "error": error}, status=status)


@console_view(roles=ADMINS)
def member_list(request: HttpRequest) -> HttpResponse:
    return _page(request)


@console_view(roles=ADMINS)
def member_email_view(request: HttpRequest, user_id: int) -> HttpResponse:
    if request.method != "POST":
        return redirect("accounts:member-list")
    cu = _cu(request)
    return form_action(
        EmailForm(request.POST),
        lambda d: member_email_set(tenant_id=cu.tenant_id, user_id=user_id, email=d["email"],
                                   actor=cu.actor),
        invalid=lambda form: _page(request, status=400, error="Not saved: the address is "
                                   "too long."),
        refused=lambda exc: _page(request, status=error_status(exc), error=error_line(exc)),
        done=lambda m: succeeded(request, f"E-mail of {m.user.username} saved.",
                                 "accounts:member-list"),
    )
