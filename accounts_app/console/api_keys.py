"""The console's API keys page: every member sees their own keys (an admin, the
tenant's) and narrows a key's scope, the agents it may run and the tools its
tasks may call (`services.accounts.api_key_scope_set`, audited). Keys are
created by `manage.py create_api_token`; the page never shows a key, only its
prefix."""

from __future__ import annotations

from django import forms
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from foundations.console_access import ConsoleUser, console_view
from foundations.console_actions import form_action, succeeded
from foundations.console_errors import error_line, error_status

from ..models import Role
from ..selectors import api_keys_visible
from ..services.accounts import api_key_scope_set


def names(text: str) -> list[str]:
    """A form's list of names: separated by commas or spaces."""
    return [n for n in text.replace(",", " ").split() if n]


class ScopeForm(forms.Form):
    agents = forms.CharField(max_length=4000, required=False)
    tools = forms.CharField(max_length=4000, required=False)


def _cu(request: HttpRequest) -> ConsoleUser:
    return request.console  # type: ignore[attr-defined, no-any-return]


def _page(request: HttpRequest, *, status: int = 200, error: str = "") -> HttpResponse:
    cu = _cu(request)
    keys = api_keys_visible(tenant_id=cu.tenant_id, user_id=cu.user_id,
                            admin=cu.role == Role.ADMIN)
    return render(request, "members/api_keys.html", {
        "nav": "api-keys", "keys": keys, "error": error}, status=status)


@console_view()
def api_key_list(request: HttpRequest) -> HttpResponse:
    return _page(request)


@console_view()
def api_key_scope_view(request: HttpRequest, key_id: int) -> HttpResponse:
    if request.method != "POST":
        return redirect("accounts:api-key-list")
    cu = _cu(request)
    return form_action(
        ScopeForm(request.POST),
        lambda d: api_key_scope_set(tenant_id=cu.tenant_id, key_id=key_id,
                                    agents=names(d["agents"]), tools=names(d["tools"]),
                                    actor=cu.actor),
        invalid=lambda form: _page(request, status=400, error="Not saved: a list is too long."),
        refused=lambda exc: _page(request, status=error_status(exc), error=error_line(exc)),
        done=lambda key: succeeded(request, f"Scope of key {key.prefix}… saved.",
                                   "accounts:api-key-list"),
    )
