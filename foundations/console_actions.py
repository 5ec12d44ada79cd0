"""The shape every console action follows, written once: validate the form, call
one service, and answer. A form that does not validate and a service's refusal
(`DomainError`) each become the page's own refusal (its message, field errors and
status); only a service that returned is a success. Pages differ in how they
answer (a card, the task page again, a form), so they pass those answers in.

A form page (create, edit) puts a refusal back on the form: `ServiceErrorsForm`
maps the service's field names onto the form's fields, and `save_form` renders
the form again (400) with them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django import forms
from django.contrib import messages
from django.core.exceptions import NON_FIELD_ERRORS
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect

from .console_errors import error_message, field_errors
from .errors import DomainError

T = TypeVar("T")


def form_action(
    form: forms.Form | None,
    call: Callable[[dict[str, Any]], T],
    *,
    invalid: Callable[[Any], HttpResponse] | None = None,
    refused: Callable[[DomainError], HttpResponse],
    done: Callable[[T], HttpResponse],
) -> HttpResponse:
    """`call` gets the form's cleaned data ({} for an action without a form)."""
    if form is not None and not form.is_valid():
        assert invalid is not None, "an action with a form says how it refuses invalid input"
        return invalid(form)
    try:
        result = call(form.cleaned_data if form is not None else {})
    except DomainError as exc:
        return refused(exc)
    return done(result)


def succeeded(
    request: HttpRequest, message: str, to: str, *args: Any, **kwargs: Any
) -> HttpResponse:
    """A success without JavaScript: say what happened on the page it redirects to."""
    messages.success(request, message)
    return redirect(to, *args, **kwargs)


def service_errors(exc: DomainError) -> dict[str, list[str]]:
    """A refusal as form errors: its field errors, or its message for the whole form."""
    return field_errors(exc) or {NON_FIELD_ERRORS: [error_message(exc)]}


class ServiceErrorsForm(forms.Form):
    """A form whose input a service checks as a whole; its refusals come back here."""

    def field_of(self, service_field: str) -> str:
        """The form field a service's field error belongs on (the same name by default)."""
        return service_field

    def add_service_errors(self, errors: dict[str, list[str]]) -> None:
        """Each on its form field; one the form lacks goes on the whole form, named
        in the message (the whole form's own are not)."""
        for key, problems in errors.items():
            field: str | None = self.field_of(key)
            if field not in self.fields:
                field = None
            for message in problems:
                named = message if field or key == NON_FIELD_ERRORS else f"{key}: {message}"
                self.add_error(field, named)


F = TypeVar("F", bound=ServiceErrorsForm)


def save_form(
    form: F,
    call: Callable[[dict[str, Any]], T],
    *,
    page: Callable[[F, int], HttpResponse],
    done: Callable[[T], HttpResponse],
    status_of: Callable[[DomainError], int] = lambda exc: 400,
) -> HttpResponse:
    """A create or edit form: a refusal, the form's own or the service's, renders
    the form again with the errors on their fields (400, or the refusal's own
    status where the page says so with `status_of=error_status`)."""

    def refused(exc: DomainError) -> HttpResponse:
        form.add_service_errors(service_errors(exc))
        return page(form, status_of(exc))

    return form_action(form, call, invalid=lambda f: page(f, 400), refused=refused, done=done)
