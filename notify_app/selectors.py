"""Reads of notify_app: a tenant's webhooks, their deliveries and attempts."""
from __future__ import annotations

from django.db.models import Prefetch, QuerySet

from .models import Delivery, DeliveryAttempt, NotificationSettings, WebhookSubscription


def webhooks_of_tenant(tenant_id: int) -> QuerySet[WebhookSubscription]:
    return WebhookSubscription.objects.filter(tenant_id=tenant_id)


def webhook_of_tenant(tenant_id: int, webhook_id: int) -> WebhookSubscription | None:
    return webhooks_of_tenant(tenant_id).filter(pk=webhook_id).first()


def deliveries_of_webhook(webhook_id: int) -> QuerySet[Delivery]:
    """Newest first, with their notification and every attempt."""
    return (Delivery.objects.filter(subscription_id=webhook_id)
            .select_related("notification")
            .prefetch_related(Prefetch("attempt_log", queryset=DeliveryAttempt.objects.all())))


def email_deliveries_of_tenant(tenant_id: int) -> QuerySet[Delivery]:
    return (Delivery.objects.filter(tenant_id=tenant_id, channel="email")
            .select_related("notification")
            .prefetch_related(Prefetch("attempt_log", queryset=DeliveryAttempt.objects.all())))


def notification_settings_of(tenant_id: int) -> NotificationSettings:
    """The tenant's settings, or the defaults (e-mail off) when it never set them."""
    return (NotificationSettings.objects.filter(tenant_id=tenant_id).first()
            or NotificationSettings(tenant_id=tenant_id))
