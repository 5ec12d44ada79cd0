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
from django.urls import reverse

from foundations.console_access import ADMINS, ConsoleUser, console_view
from foundations.console_actions import form_action, save_form, succeeded
from foundations.console_errors import error_message, error_status
from foundations.errors import DomainError

from ..payloads import link
from ..selectors import (
    deliveries_of_webhook,
    email_deliveries_of_tenant,
    notification_settings_of,
    webhook_of_tenant,
    webhooks_of_tenant,
)
from ..services.subscriptions import (
    email_settings_update,
    slack_settings_update,
    webhook_create,
    webhook_delete,
    webhook_update,
)
from .forms import EmailForm, SlackForm, WebhookForm

RECENT = 50


def _cu(request: HttpRequest) -> ConsoleUser:
    return request.console  # type: ignore[attr-defined, no-any-return]


def _list_page(request: HttpRequest, *, form: WebhookForm | None = None,
               secret: str = "", created: Any = None, status: int = 200,
               slack_form: SlackForm | None = None) -> HttpResponse:
    tenant_id = _cu(request).tenant_id
    prefs = notification_settings_of(tenant_id)
    return render(request, "webhooks/list.html", {
        "nav": "webhooks",
        "webhooks": webhooks_of_tenant(tenant_id),
        "form": form or WebhookForm(),
        "email_form": EmailForm(initial={"email_reviewers": prefs.email_reviewers,
                                         "email_events": prefs.email_events}),
        "emails": email_deliveries_of_tenant(tenant_id)[:10],
        "slack_form": slack_form or SlackForm(initial={"channel": prefs.slack_channel}),
        "slack_url": link(reverse("api-slack-interactions", args=[_cu(request).tenant_name])),
        "secret": secret,
        "created": created,
    }, status=status)


@console_view(roles=ADMINS)
def webhook_list(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return _list_page(request)
    cu = _cu(request)
    # Rendered, not redirected: the secret must not outlive this one answer.
    return save_form(
        WebhookForm(request.POST),
        lambda d: webhook_create(tenant_id=cu.tenant_id, actor=cu.actor, **d),
        page=lambda form, status: _list_page(request, form=form, status=status),
        done=lambda created: _list_page(request, secret=created.secret,
                                        created=created.subscription, status=201),
        status_of=error_status,
    )


@console_view(roles=ADMINS)
def webhook_detail(request: HttpRequest, webhook_id: int) -> HttpResponse:
    cu = _cu(request)
    webhook = webhook_of_tenant(cu.tenant_id, webhook_id)
    if webhook is None:
        return render(request, "404.html", status=404)

    def page(form: WebhookForm, status: int = 200) -> HttpResponse:
        return render(request, "webhooks/detail.html", {
            "nav": "webhooks", "webhook": webhook, "form": form,
            "deliveries": deliveries_of_webhook(webhook.pk)[:RECENT],
        }, status=status)

    if request.method != "POST":
        return page(WebhookForm(initial={
            "url": webhook.url, "events": webhook.events, "format": webhook.format,
            "description": webhook.description, "active": webhook.active}))
    return save_form(
        WebhookForm(request.POST),
        lambda d: webhook_update(tenant_id=cu.tenant_id, webhook_id=webhook_id, actor=cu.actor,
                                 changes=d),
        page=page,
        done=lambda _: succeeded(request, "Webhook saved.", "webhooks:webhook-detail",
                                 webhook_id=webhook_id),
        status_of=error_status,
    )


@console_view(roles=ADMINS)
def webhook_delete_view(request: HttpRequest, webhook_id: int) -> HttpResponse:
    if request.method != "POST":
        return redirect("webhooks:webhook-list")
    cu = _cu(request)
    return form_action(
        None,
        lambda _: webhook_delete(tenant_id=cu.tenant_id, webhook_id=webhook_id, actor=cu.actor),
        refused=lambda exc: render(request, "console/refused.html",
                                   {"message": error_message(exc)}, status=error_status(exc)),
        done=lambda _: succeeded(request, "Webhook deleted.", "webhooks:webhook-list"),
    )


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


@console_view(roles=ADMINS)
def slack_settings_view(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return redirect("webhooks:webhook-list")
    cu = _cu(request)
    form = SlackForm(request.POST)

    def refused(exc: DomainError) -> HttpResponse:
        for problem in exc.details.get("channel", []):
            form.add_error("channel", problem)
        return _list_page(request, slack_form=form, status=error_status(exc))

    return form_action(
        form,
        lambda d: slack_settings_update(tenant_id=cu.tenant_id, channel=d["channel"],
                                        actor=cu.actor),
        invalid=lambda f: _list_page(request, slack_form=f, status=400),
        refused=refused,
        done=lambda _: succeeded(request, "Slack settings saved.", "webhooks:webhook-list"),
    )
