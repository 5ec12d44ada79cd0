"""Webhook subscriptions of a tenant: create, change, delete; and the tenant's e-mail choice.

The URL is checked with the outbound-address policy when it is registered or
changed (400 naming the field; the same check runs again at every delivery).
The signing secret is generated here, sealed with the tenant-secret keyring
(it must be readable to sign, so it is encrypted, not hashed) and returned
once, by `webhook_create`; nothing else ever returns it.
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from accounts_app.vault.keyring import seal
from audit_app.services import audit_record
from foundations.actors import Actor
from foundations.errors import invalid, not_found
from tools_app.outbound import url_problem

from ..models import EventType, NotificationSettings, PayloadFormat, WebhookSubscription
from ..signing import new_secret

log = logging.getLogger(__name__)

MAX_URL_CHARS = 2000
MAX_WEBHOOKS_PER_TENANT = 50


@dataclass(frozen=True)
class Created:
    subscription: WebhookSubscription
    secret: str  # shown once


def webhook_create(*, tenant_id: int, url: str, events: list[str], actor: Actor,
                   format: str = PayloadFormat.JSON, description: str = "",
                   active: bool = True) -> Created:
    _check(url=url, events=events, format=format)
    if WebhookSubscription.objects.filter(tenant_id=tenant_id).count() >= MAX_WEBHOOKS_PER_TENANT:
        raise invalid("too_many_webhooks",
                      f"A tenant has at most {MAX_WEBHOOKS_PER_TENANT} webhooks.")
    secret = new_secret()
    with transaction.atomic():
        subscription = WebhookSubscription.objects.create(
            tenant_id=tenant_id, url=url, events=_ordered(events), format=format,
            description=description, active=active, secret_sealed=seal(secret),
            created_by=actor.name)
        _audit(actor, subscription, "created", after=_audited(subscription))
    log.info("webhook %s of tenant %s created by %s", subscription.pk, tenant_id, actor.name)
    return Created(subscription=subscription, secret=secret)


def webhook_update(*, tenant_id: int, webhook_id: int, actor: Actor,
                   changes: dict[str, Any]) -> WebhookSubscription:
    """Change url, events, format, description or active; nothing else."""
    allowed = {"url", "events", "format", "description", "active"}
    changes = {k: v for k, v in changes.items() if k in allowed}
    _check(url=changes.get("url"), events=changes.get("events"), format=changes.get("format"))
    if "events" in changes:
        changes["events"] = _ordered(changes["events"])
    with transaction.atomic():
        subscription = (WebhookSubscription.objects.select_for_update()
                        .filter(tenant_id=tenant_id, pk=webhook_id).first())
        if subscription is None:
            raise not_found("Webhook")
        before = _audited(subscription)
        for name, value in changes.items():
            setattr(subscription, name, value)
        subscription.save()
        _audit(actor, subscription, "updated", before=before, after=_audited(subscription))
    log.info("webhook %s of tenant %s changed by %s (%s)", webhook_id, tenant_id, actor.name,
             ", ".join(sorted(changes)) or "nothing")
    return subscription


def webhook_delete(*, tenant_id: int, webhook_id: int, actor: Actor) -> None:
    """Delete the subscription with its delivery history; nothing more is sent to it."""
    with transaction.atomic():
        subscription = (WebhookSubscription.objects.select_for_update()
                        .filter(tenant_id=tenant_id, pk=webhook_id).first())
        if subscription is None:
            raise not_found("Webhook")
        _audit(actor, subscription, "deleted", before=_audited(subscription))
        subscription.delete()
    log.info("webhook %s of tenant %s deleted by %s", webhook_id, tenant_id, actor.name)


def email_settings_update(*, tenant_id: int, email_reviewers: bool, events: list[str],
                          actor: Actor) -> NotificationSettings:
    _check(url=None, events=events, format=None, events_field="email_events")
    with transaction.atomic():
        current = NotificationSettings.objects.filter(tenant_id=tenant_id).first()
        before = ({"email_reviewers": current.email_reviewers, "email_events": current.email_events}
                  if current else {})
        prefs, _ = NotificationSettings.objects.update_or_create(
            tenant_id=tenant_id,
            defaults={"email_reviewers": email_reviewers, "email_events": _ordered(events)})
        audit_record(actor=actor, tenant_id=tenant_id, kind="notifications", name="email",
                     action="updated", before=before,
                     after={"email_reviewers": prefs.email_reviewers,
                            "email_events": prefs.email_events})
    log.info("notification e-mail of tenant %s set to %s by %s", tenant_id, email_reviewers,
             actor.name)
    return prefs


SLACK_CHANNEL = re.compile(r"[A-Za-z0-9#][A-Za-z0-9_.-]{0,79}")


def slack_settings_update(*, tenant_id: int, channel: str, actor: Actor) -> NotificationSettings:
    """Post approval requests to this Slack channel (an id like C0123, or #name);
    empty turns Slack off. The app's token and signing secret are tenant secrets."""
    channel = channel.strip()
    if channel and not SLACK_CHANNEL.fullmatch(channel):
        raise invalid("invalid", "The request is not valid.",
                      channel=["a Slack channel id (C0123ABC) or #name"])
    with transaction.atomic():
        current = NotificationSettings.objects.filter(tenant_id=tenant_id).first()
        before = {"slack_channel": current.slack_channel} if current else {}
        prefs, _ = NotificationSettings.objects.update_or_create(
            tenant_id=tenant_id, defaults={"slack_channel": channel})
        audit_record(actor=actor, tenant_id=tenant_id, kind="notifications", name="slack",
                     action="updated", before=before, after={"slack_channel": channel})
    return prefs


def _audited(subscription: WebhookSubscription) -> dict[str, Any]:
    """What the audit log keeps of a webhook: its settings, never its secret."""
    return {"url": subscription.url, "events": list(subscription.events),
            "format": subscription.format, "description": subscription.description,
            "active": subscription.active}


def _audit(actor: Actor, subscription: WebhookSubscription, action: str, *,
           before: dict[str, Any] | None = None, after: dict[str, Any] | None = None) -> None:
    audit_record(actor=actor, tenant_id=subscription.tenant_id, kind="webhook",
                 name=str(subscription.pk), object_id=subscription.pk, action=action,
                 before=before, after=after)


def _check(*, url: str | None, events: list[str] | None, format: str | None,
           events_field: str = "events") -> None:
    """Field errors (400) for what a webhook or the e-mail choice may not be;
    an empty list of e-mailed events means all of them."""
    errors: dict[str, list[str]] = {}
    if url is not None:
        if len(url) > MAX_URL_CHARS:
            errors["url"] = [f"at most {MAX_URL_CHARS} characters"]
        elif problem := url_problem(url):
            errors["url"] = [problem]
    if events is not None:
        unknown = sorted(set(events) - set(EventType.values))
        if unknown:
            errors[events_field] = [f"unknown event types: {', '.join(unknown)}; "
                                    f"known: {', '.join(EventType.values)}"]
        elif not events and events_field == "events":
            errors["events"] = ["name at least one event type"]
    if format is not None and format not in PayloadFormat.values:
        errors["format"] = [f"one of {', '.join(PayloadFormat.values)}"]
    if errors:
        raise invalid("invalid", "The request is not valid.", **errors)


def _ordered(events: list[str]) -> list[str]:
    return [e for e in EventType.values if e in set(events)]
