"""The console's Secrets page (admins only): store, rotate and delete the
tenant's secrets through `accounts_app.services.secrets`.

The page shows names and who stored or rotated them, never a value: the value
fields are password inputs that are never filled back in, even when the form
comes back with an error.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from foundations.console_access import ADMINS, ConsoleUser, console_view
from foundations.console_actions import ServiceErrorsForm, form_action, save_form, succeeded
from foundations.console_errors import error_line, error_message, error_status
from foundations.errors import DomainError

from ..selectors import secrets_of_tenant
from ..services.secrets import MAX_VALUE_CHARS, secret_create, secret_delete, secret_rotate


def _value_field(label: str) -> forms.CharField:
    return forms.CharField(
        label=label,
        max_length=MAX_VALUE_CHARS,
        strip=False,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
    )


class SecretForm(ServiceErrorsForm):
    name = forms.CharField(
        max_length=64,
        help_text="Lower-case letters, digits, _ and -. Tools use it as {secret:name}.",
    )
    value = _value_field("Value")


class RotateForm(forms.Form):
    value = _value_field("New value")


def _cu(request: HttpRequest) -> ConsoleUser:
    return request.console  # type: ignore[attr-defined, no-any-return]


def _page(request: HttpRequest, *, form: SecretForm | None = None, status: int = 200,
          error: str = "") -> HttpResponse:
    ctx: dict[str, Any] = {
        "nav": "secrets",
        "secrets": secrets_of_tenant(_cu(request).tenant_id),
        "form": form or SecretForm(),
        "error": error,
    }
    return render(request, "secrets/list.html", ctx, status=status)


@console_view(roles=ADMINS)
def secret_list(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return _page(request)
    cu = _cu(request)
    return save_form(
        SecretForm(request.POST),
        lambda d: secret_create(tenant_id=cu.tenant_id, name=d["name"], value=d["value"],
                                actor=cu.actor),
        page=lambda form, status: _page(request, form=form, status=status),
        done=lambda secret: succeeded(request, f"Secret {secret.name} stored.",
                                      "accounts:secret-list"),
        status_of=error_status,
    )


@console_view(roles=ADMINS)
def secret_rotate_view(request: HttpRequest, name: str) -> HttpResponse:
    if request.method != "POST":
        return redirect("accounts:secret-list")
    cu = _cu(request)

    def invalid(form: RotateForm) -> HttpResponse:
        problems = "; ".join(str(e) for e in form.errors.get("value", []))
        return _page(request, status=400, error=f"Not rotated: {problems}")

    return form_action(
        RotateForm(request.POST),
        lambda d: secret_rotate(tenant_id=cu.tenant_id, name=name, value=d["value"],
                                actor=cu.actor),
        invalid=invalid,
        refused=lambda exc: _page(request, status=error_status(exc), error=error_line(exc)),
        done=lambda _: succeeded(request, f"Secret {name} rotated: the next calls use the new "
                                 "value.", "accounts:secret-list"),
    )


@console_view(roles=ADMINS)
def secret_delete_view(request: HttpRequest, name: str) -> HttpResponse:
    if request.method != "POST":
        return redirect("accounts:secret-list")
    cu = _cu(request)

    def refused(exc: DomainError) -> HttpResponse:  # in use: say by whom
        users = [f"tool {t}" for t in exc.details.get("tools", [])]
        users += [f"agent {a}" for a in exc.details.get("agents", [])]
        detail = f" ({', '.join(users)})" if users else ""
        return _page(request, status=error_status(exc), error=error_message(exc) + detail)

    return form_action(
        None,
        lambda _: secret_delete(tenant_id=cu.tenant_id, name=name, actor=cu.actor),
        refused=refused,
        done=lambda _: succeeded(request, f"Secret {name} deleted.", "accounts:secret-list"),
    )
