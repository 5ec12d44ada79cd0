"""Webhook subscriptions, the notification outbox and its deliveries.

- `WebhookSubscription`: a tenant's URL and the event types it wants; its
  signing secret is stored sealed with the tenant-secret keyring
  (`accounts_app.vault.keyring`), readable only to sign a delivery.
- `Notification`: one event that needs a person (the outbox row), written in
  the same transaction as what caused it. Its body is composed once, when it is
  first sent, and then frozen: every retry and every channel sends the same one.
- `SlaWarning`: the approvals whose SLA warning was emitted (once each, ever).
- `Delivery`: one notification to one subscription (or to the tenant's
  reviewers by e-mail, or to its Slack channel), with its retry state. Its `uid` is the
  `X-Tether-Delivery` header: the same on every attempt, so receivers dedupe on it.
- `DeliveryAttempt`: every attempt, as it happened (status code, error, duration).
- `NotificationSettings`: a tenant's e-mail choice (off unless turned on) and
  Slack channel.
- `SlackMessage`: the Slack message an approval was posted as, rewritten when
  it is decided.
"""
from __future__ import annotations

import uuid

from django.db import models


class EventType(models.TextChoices):
    APPROVAL_REQUESTED = "approval_requested", "Approval requested"
    QUESTION_ASKED = "question_asked", "Question asked"
    RECONCILIATION_OPENED = "reconciliation_opened", "Reconciliation opened"
    TASK_ESCALATED = "task_escalated", "Task escalated"
    TASK_FAILED = "task_failed", "Task failed"
    APPROVAL_SLA_WARNING = "approval_sla_warning", "Approval SLA warning (80 %)"
    SPEND_WARNING = "spend_warning", "Spend warning (80 % of a tenant's spend limit)"


class PayloadFormat(models.TextChoices):
    JSON = "json", "Tether JSON"
    SLACK = "slack", "Slack / Teams ({\"text\": ...})"
    CLOUDEVENTS = "cloudevents", "CloudEvents 1.0 (structured JSON)"


class WebhookSubscription(models.Model):
    tenant = models.ForeignKey("accounts_app.Tenant", on_delete=models.CASCADE,
                               related_name="webhooks")
    url = models.CharField(max_length=2000)
    events = models.JSONField(default=list, help_text="Event types sent to this URL.")
    format = models.CharField(max_length=16, choices=PayloadFormat.choices,
                              default=PayloadFormat.JSON)
    description = models.CharField(max_length=200, blank=True)
    active = models.BooleanField(default=True)
    secret_sealed = models.TextField(help_text="The signing secret, encrypted at rest.")
    created_by = models.CharField(max_length=150)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["tenant", "active"], name="webhook_tenant_active")]

    def __str__(self) -> str:
        return f"webhook {self.pk} -> {self.url}"


class Notification(models.Model):
    uid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    tenant = models.ForeignKey("accounts_app.Tenant", on_delete=models.CASCADE, related_name="+")
    task = models.ForeignKey("tasks_app.Task", on_delete=models.CASCADE, related_name="+")
    type = models.CharField(max_length=40, choices=EventType.choices)
    # What caused it: the task event, or the request (an SLA warning has no task event).
    # No constraint in the database: on PostgreSQL the events table is partitioned
    # (tasks_app.store.partitions) and its unique key is (id, created_at), which a
    # foreign key on the id alone cannot reference. Django still sets it to NULL
    # when the event is deleted row by row; a dropped month leaves it dangling
    # until the notification goes with its archived task.
    event = models.ForeignKey("tasks_app.Event", null=True, blank=True, db_constraint=False,
                              on_delete=models.SET_NULL, related_name="+")
    context = models.JSONField(default=dict, help_text="What the event said (payload).")
    body = models.JSONField(null=True, blank=True, help_text="Composed at the first send.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"{self.type} of task {self.task_id}"


class Channel(models.TextChoices):
    WEBHOOK = "webhook"
    EMAIL = "email"
    SLACK = "slack"  # an interactive message posted to the tenant's Slack channel


class DeliveryStatus(models.TextChoices):
    PENDING = "pending"  # waiting for its next attempt (or in flight while claimed)
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # gave up: retries exhausted, or a permanent refusal by the receiver
    REFUSED = "refused"  # the outbound-address policy refused the URL: never sent


class Delivery(models.Model):
    uid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    tenant = models.ForeignKey("accounts_app.Tenant", on_delete=models.CASCADE, related_name="+")
    notification = models.ForeignKey(Notification, on_delete=models.CASCADE,
                                     related_name="deliveries")
    subscription = models.ForeignKey(WebhookSubscription, null=True, blank=True,
                                     on_delete=models.CASCADE, related_name="deliveries")
    channel = models.CharField(max_length=8, choices=Channel.choices, default=Channel.WEBHOOK)
    recipients = models.JSONField(default=list, blank=True,
                                  help_text="E-mail addresses, or the Slack channel.")
    status = models.CharField(max_length=10, choices=DeliveryStatus.choices,
                              default=DeliveryStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    claimed_until = models.DateTimeField(null=True, blank=True)
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["next_attempt_at"], name="delivery_due",
                         condition=models.Q(status="pending")),
            models.Index(fields=["subscription", "-id"], name="delivery_of_webhook"),
        ]

    def __str__(self) -> str:
        return f"delivery {self.uid} ({self.status})"


class DeliveryAttempt(models.Model):
    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="attempt_log")
    number = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    duration_ms = models.PositiveIntegerField()
    status_code = models.PositiveIntegerField(null=True, blank=True)
    outcome = models.CharField(max_length=10, help_text="succeeded, retry, failed or refused")
    error = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["id"]
        constraints = [models.UniqueConstraint(fields=["delivery", "number"],
                                               name="attempt_once_per_number")]

    def __str__(self) -> str:
        return f"attempt {self.number} of delivery {self.delivery_id}: {self.outcome}"


class SlaWarning(models.Model):
    approval = models.OneToOneField("approvals_app.Approval", on_delete=models.CASCADE,
                                    related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"SLA warning of approval {self.approval_id}"


class NotificationSettings(models.Model):
    tenant = models.OneToOneField("accounts_app.Tenant", on_delete=models.CASCADE,
                                  related_name="notification_settings")
    email_reviewers = models.BooleanField(
        default=False, help_text="E-mail the tenant's reviewers and admins for these events.")
    email_events = models.JSONField(default=list, blank=True,
                                    help_text="Event types e-mailed (empty: all).")
    slack_channel = models.CharField(
        max_length=80, blank=True,
        help_text="The Slack channel approval requests are posted to (empty: Slack off); the "
                  "app's bot token and signing secret are the tenant secrets "
                  "slack-bot-token and slack-signing-secret.")
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"notification settings of tenant {self.tenant_id}"


class SlackMessage(models.Model):
    """The interactive message an approval request was posted as, so that any
    decision on the approval (from Slack or anywhere else) updates it."""

    tenant = models.ForeignKey("accounts_app.Tenant", on_delete=models.CASCADE, related_name="+")
    approval = models.OneToOneField("approvals_app.Approval", on_delete=models.CASCADE,
                                    related_name="+")
    channel = models.CharField(max_length=80, help_text="Slack's channel id.")
    ts = models.CharField(max_length=40, help_text="Slack's message timestamp (its id).")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"Slack message {self.channel}/{self.ts} of approval {self.approval_id}"
