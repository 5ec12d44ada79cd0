"""Input and output shapes of the notification endpoints."""
from __future__ import annotations

from rest_framework import serializers

from ..models import EventType, PayloadFormat
from ..services.subscriptions import MAX_URL_CHARS

EVENTS_HELP = "Event types to send: " + ", ".join(EventType.values) + "."


class WebhookSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    url = serializers.CharField()
    events = serializers.ListField(child=serializers.ChoiceField(choices=EventType.values))
    format = serializers.ChoiceField(choices=PayloadFormat.values)
    description = serializers.CharField(allow_blank=True)
    active = serializers.BooleanField()
    created_by = serializers.CharField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class WebhookCreatedSerializer(WebhookSerializer):
    secret = serializers.CharField(
        help_text="The signing secret (HMAC-SHA256 key of X-Tether-Signature). Shown only in "
        "this answer: store it now.")


class WebhookCreateSerializer(serializers.Serializer):
    url = serializers.CharField(max_length=MAX_URL_CHARS, help_text="An http(s) URL the "
                                "outbound-address policy allows (checked now and at each send).")
    events = serializers.ListField(child=serializers.CharField(max_length=40), min_length=1,
                                   max_length=len(EventType.values) * 2, help_text=EVENTS_HELP)
    format = serializers.ChoiceField(
        choices=PayloadFormat.values, default=PayloadFormat.JSON,
        help_text="`json`: Tether's payload; `slack`: `{\"text\": ...}` for Slack incoming "
        "webhooks and Teams/Slack workflow webhooks.")
    description = serializers.CharField(max_length=200, required=False, allow_blank=True,
                                        default="")
    active = serializers.BooleanField(required=False, default=True)


class WebhookUpdateSerializer(WebhookCreateSerializer):
    pass


class AttemptSerializer(serializers.Serializer):
    number = serializers.IntegerField()
    started_at = serializers.DateTimeField()
    duration_ms = serializers.IntegerField()
    status_code = serializers.IntegerField(allow_null=True)
    outcome = serializers.CharField(help_text="succeeded, retry, failed or refused")
    error = serializers.CharField(allow_blank=True)


class DeliverySerializer(serializers.Serializer):
    id = serializers.UUIDField(source="uid", help_text="The X-Tether-Delivery header.")
    event_id = serializers.UUIDField(source="notification.uid", help_text="The body's `id`.")
    type = serializers.CharField(source="notification.type")
    task_id = serializers.IntegerField(source="notification.task_id")
    status = serializers.CharField(help_text="pending, succeeded, failed or refused")
    attempts = serializers.IntegerField()
    next_attempt_at = serializers.DateTimeField(allow_null=True,
                                                help_text="When a pending one is tried next.")
    last_status_code = serializers.IntegerField(allow_null=True)
    last_error = serializers.CharField(allow_blank=True)
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    attempt_log = AttemptSerializer(many=True, help_text="Every attempt, oldest first.")


class EmailSettingsSerializer(serializers.Serializer):
    email_reviewers = serializers.BooleanField(
        help_text="E-mail the tenant's reviewers and admins (off by default).")
    email_events = serializers.ListField(
        child=serializers.CharField(max_length=40), max_length=len(EventType.values) * 2,
        required=False, default=list, help_text="Event types e-mailed; empty: all. " + EVENTS_HELP)


class SlackSettingsSerializer(serializers.Serializer):
    channel = serializers.CharField(
        source="slack_channel", max_length=80, allow_blank=True,
        help_text="The Slack channel approval requests are posted to (an id like C0123ABC); "
                  "empty: off. The app's bot token and signing secret are the tenant secrets "
                  "`slack-bot-token` and `slack-signing-secret`.")
    interactions_url = serializers.CharField(
        read_only=True, help_text="The Request URL to give the Slack app's Interactivity.")
