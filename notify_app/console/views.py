"""The console's Webhooks page (admins): subscriptions, their recent deliveries
with every attempt, and the tenant's reviewer e-mail; through the services of
`notify_app.services.subscriptions`, like the API.

The signing secret is shown once, on the page that answers the create (never
redirected to, never kept in the session).
"""
from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from config.errors import DomainError
from tasks_app.console.access import ADMINS, ConsoleUser, console_view
from tasks_app.console.errors import error_message, error_status, field_errors

from ..selectors import (
    deliveries_of_webhook,
    email_deliveries_of_tenant,
    notification_settings_of,
    webhook_of_tenant,
    webhooks_of_tenant,
)
from ..services.subscriptions import (
    email_settings_update,
    webhook_create,
    webhook_delete,
    webhook_update,
)
from .forms import EmailForm, WebhookForm

RECENT = 50


def _cu(request: HttpRequest) -> ConsoleUser:
    return request.console  # type: ignore[attr-defined, no-any-return]


def _with_errors(form: Any, exc: DomainError) -> None:
    for field, problems in (field_errors(exc) or {"__all__": [error_message(exc)]}).items():
        for problem in problems:
            form.add_error(field if field in form.fields else None, problem)


def _list_page(request: HttpRequest, *, form: WebhookForm | None = None,
               secret: str = "", created: Any = None, status: int = 200) -> HttpResponse:
    tenant_id = _cu(request).tenant_id
    prefs = notification_settings_of(tenant_id)
    return render(request, "webhooks/list.html", {
        "nav": "webhooks",
        "webhooks": webhooks_of_tenant(tenant_id),
        "form": form or WebhookForm(),
        "email_form": EmailForm(initial={"email_reviewers": prefs.email_reviewers,
                                         "email_events": prefs.email_events}),
        "emails": email_deliveries_of_tenant(tenant_id)[:10],
        "secret": secret,
        "created": created,
    }, status=status)


@console_view(roles=ADMINS)
def webhook_list(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return _list_page(request)
    cu = _cu(request)
    form = WebhookForm(request.POST)
    if not form.is_valid():
        return _list_page(request, form=form, status=400)
    try:
        created = webhook_create(tenant_id=cu.tenant_id, actor=cu.actor, **form.cleaned_data)
    except DomainError as exc:
        _with_errors(form, exc)
        return _list_page(request, form=form, status=error_status(exc))
    # Rendered, not redirected: the secret must not outlive this one answer.
    return _list_page(request, secret=created.secret, created=created.subscription, status=201)


@console_view(roles=ADMINS)
def webhook_detail(request: HttpRequest, webhook_id: int) -> HttpResponse:
    cu = _cu(request)
    webhook = webhook_of_tenant(cu.tenant_id, webhook_id)
    if webhook is None:
        return render(request, "404.html", status=404)
    status = 200
    if request.method == "POST":
        form = WebhookForm(request.POST)
        if form.is_valid():
            try:
                webhook = webhook_update(tenant_id=cu.tenant_id, webhook_id=webhook_id,
                                         actor=cu.actor, changes=form.cleaned_data)
            except DomainError as exc:
                _with_errors(form, exc)
                status = error_status(exc)
            else:
                messages.success(request, "Webhook saved.")
                return redirect("webhooks:webhook-detail", webhook_id=webhook_id)
        else:
            status = 400
    else:
        form = WebhookForm(initial={"url": webhook.url, "events": webhook.events,
                                    "format": webhook.format, "description": webhook.description,
                                    "active": webhook.active})
    return render(request, "webhooks/detail.html", {
        "nav": "webhooks", "webhook": webhook, "form": form,
        "deliveries": deliveries_of_webhook(webhook.pk)[:RECENT],
    }, status=status)


@console_view(roles=ADMINS)
def webhook_delete_view(request: HttpRequest, webhook_id: int) -> HttpResponse:
    if request.method != "POST":
        return redirect("webhooks:webhook-list")
    cu = _cu(request)
    try:
        webhook_delete(tenant_id=cu.tenant_id, webhook_id=webhook_id, actor=cu.actor)
    except DomainError as exc:
        return render(request, "console/refused.html", {"message": error_message(exc)},
                      status=error_status(exc))
    messages.success(request, "Webhook deleted.")
    return redirect("webhooks:webhook-list")


@console_view(roles=ADMINS)
def email_settings_view(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return redirect("webhooks:webhook-list")
    cu = _cu(request)
    form = EmailForm(request.POST)
    if form.is_valid():
        email_settings_update(tenant_id=cu.tenant_id, actor=cu.actor,
                              email_reviewers=form.cleaned_data["email_reviewers"],
                              events=form.cleaned_data["email_events"])
        messages.success(request, "E-mail settings saved.")
    return redirect("webhooks:webhook-list")
