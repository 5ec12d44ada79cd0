"""The page a signed e-mail link opens (`/act/<token>/`): a GET shows the request
and one form, and decides nothing; the form's POST takes the decision. Both
check the link (`services.links.link_check`): a link that cannot be used shows
why, on a page that changes nothing. Sign-in is required (and returns here)."""
from __future__ import annotations

from typing import Any

from django import forms
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_http_methods

from approvals_app.console.selectors import approval_card, question_card
from foundations.console_access import console_view
from foundations.console_errors import error_line, error_status, field_errors
from foundations.errors import DomainError

from ..services.links import LinkRefused, Usable, link_check, link_use

MAX_TEXT = 10_000


class LinkForm(forms.Form):
    comment = forms.CharField(required=False, max_length=MAX_TEXT)
    answer = forms.CharField(required=False, max_length=MAX_TEXT)

    def __init__(self, *args: Any, action: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # A rejection says why (the agent learns from it); an answer is the point.
        self.fields["comment"].required = action == "reject"
        self.fields["answer"].required = action == "answer"


@require_http_methods(["GET", "POST"])
@console_view()
def decision_link(request: HttpRequest, token: str) -> HttpResponse:
    try:
        usable = link_check(token, user=request.user)
    except LinkRefused as exc:
        return _refused(request, exc.message, exc.status)
    action = usable.claim.action
    if request.method == "GET":
        return _confirm(request, usable, LinkForm(action=action))
    form = LinkForm(request.POST, action=action)
    if not form.is_valid():
        return _confirm(request, usable, form, status=400)
    try:
        link_use(usable, comment=form.cleaned_data["comment"],
                 answer=form.cleaned_data["answer"])
    except DomainError as exc:
        if error_status(exc) == 400:
            for name, problems in field_errors(exc).items():
                for problem in problems:
                    form.add_error(name if name in form.fields else None, problem)
            return _confirm(request, usable, form, status=400)
        return _refused(request, error_line(exc), error_status(exc))
    return render(request, "notify/link_done.html",
                  {"action": action, "task": usable.task, "request_obj": usable.request})


def _confirm(request: HttpRequest, usable: Usable, form: LinkForm, *,
             status: int = 200) -> HttpResponse:
    request_obj = usable.request
    card = (approval_card(request_obj) if usable.claim.kind == "approval"  # type: ignore[arg-type]
            else question_card(request_obj))  # type: ignore[arg-type]
    return render(request, "notify/link_confirm.html",
                  {"card": card, "o": request_obj, "t": usable.task, "form": form,
                   "action": usable.claim.action}, status=status)


def _refused(request: HttpRequest, message: str, status: int) -> HttpResponse:
    return render(request, "notify/link_refused.html", {"message": message}, status=status)
