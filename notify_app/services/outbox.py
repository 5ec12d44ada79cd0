"""Writing the outbox: a notification and its deliveries, in the caller's transaction.

`notification_emit` is called where the event happens (the task-event hook,
`on_task_event`, inside the transaction that appends the event; the SLA
sweep), so the rows commit with their cause or not at all. Deliveries are
dispatched after commit (`dispatch.schedule_on_commit`); one that is never
dispatched (the broker was down, the process died) is found by the sweep.

Recipients are fixed when the event happens: the tenant's active subscriptions
that want its type, when the tenant e-mails its reviewers, the reviewers'
and admins' addresses, and, for an approval request, the tenant's Slack
channel when it connected a Slack app. Nobody to tell: nothing is written.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.utils import timezone

from accounts_app.models import Membership, Role
from approvals_app.selectors import routed_reviewers
from tasks_app.models import Task

from ..dispatch import schedule_on_commit
from ..events import NOTIFIED_TASK_EVENTS
from ..models import (
    Channel,
    Delivery,
    EventType,
    Notification,
    NotificationSettings,
    WebhookSubscription,
)

if TYPE_CHECKING:
    from tasks_app.models import Event

EMAIL_ROLES = (Role.REVIEWER, Role.ADMIN)
# What is posted to a tenant's Slack channel: the requests a button can decide.
SLACK_EVENTS = frozenset({EventType.APPROVAL_REQUESTED})


def notification_emit(*, tenant_id: int, task_id: int, type: str, event_id: int | None = None,
                      context: dict[str, Any] | None = None) -> Notification | None:
    """Write the notification and its deliveries (None: nobody to tell)."""
    hooks = [s for s in WebhookSubscription.objects.filter(tenant_id=tenant_id, active=True)
             .only("id", "events") if type in (s.events or [])]
    prefs = NotificationSettings.objects.filter(tenant_id=tenant_id).first()
    emails = _email_recipients(tenant_id, type, prefs, task_id, context or {})
    slack = prefs.slack_channel if prefs is not None and type in SLACK_EVENTS else ""
    if not hooks and not emails and not slack:
        return None
    notification = Notification.objects.create(
        tenant_id=tenant_id, task_id=task_id, type=type, event_id=event_id,
        context=context or {})
    now = timezone.now()
    rows = [Delivery(tenant_id=tenant_id, notification=notification, subscription_id=s.pk,
                     channel=Channel.WEBHOOK, next_attempt_at=now) for s in hooks]
    if emails:
        rows.append(Delivery(tenant_id=tenant_id, notification=notification,
                             channel=Channel.EMAIL, recipients=emails, next_attempt_at=now))
    if slack:
        rows.append(Delivery(tenant_id=tenant_id, notification=notification,
                             channel=Channel.SLACK, recipients=[slack], next_attempt_at=now))
    created = Delivery.objects.bulk_create(rows)
    schedule_on_commit(d.pk for d in created)
    return notification


def on_task_event(event: Event) -> None:
    """Registered for `events.NOTIFIED_TASK_EVENTS`: runs inside the transaction
    that appends the event, so the outbox row commits with the transition. An
    evaluation run's events notify nobody: it does nothing real (`evals_app`)."""
    if Task.objects.filter(pk=event.task_id, shadow_of__isnull=False).exists():
        return
    notification_emit(
        tenant_id=event.tenant_id, task_id=event.task_id, type=NOTIFIED_TASK_EVENTS[event.type],
        event_id=event.pk, context={"event": event.type, **(event.payload or {})})


def _email_recipients(tenant_id: int, type: str, prefs: NotificationSettings | None,
                      task_id: int, context: dict[str, Any]) -> list[str]:
    """The reviewers' and admins' addresses; for an approval routed to a group or
    a person (`approvals_app.selectors.routed_reviewers`), theirs only."""
    if prefs is None or not prefs.email_reviewers or (
            prefs.email_events and type not in prefs.email_events):
        return []
    members = Membership.objects.filter(tenant_id=tenant_id, role__in=EMAIL_ROLES)
    routed = routed_reviewers(task_id=task_id, context=context)
    if routed is not None:
        members = members.filter(user_id__in=routed)
    return sorted({email for email in members.values_list("user__email", flat=True) if email})
