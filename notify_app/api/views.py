"""Webhook endpoints (admins): subscriptions, their deliveries, and the tenant's e-mail choice.

Another tenant's webhook is a 404 and never listed. The signing secret appears
in the 201 of the create and nowhere else.
"""
from __future__ import annotations

from django.urls import reverse
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from accounts_app.models import Tenant
from foundations.api_base import CURSOR_PARAMETERS, TenantAPIView, cursor_page
from foundations.api_errors import error_responses
from foundations.errors import not_found

from ..models import WebhookSubscription
from ..payloads import link
from ..selectors import (
    deliveries_of_webhook,
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
from .serializers import (
    DeliverySerializer,
    EmailSettingsSerializer,
    SlackSettingsSerializer,
    WebhookCreatedSerializer,
    WebhookCreateSerializer,
    WebhookSerializer,
    WebhookUpdateSerializer,
)

TAGS = ["notifications"]
DeliveryPage = cursor_page(DeliverySerializer, "DeliveryPage")


class WebhookListView(TenantAPIView):
    policy = {"GET": "webhook.read", "POST": "webhook.write"}

    @extend_schema(operation_id="webhooks_list", tags=TAGS, summary="List webhooks",
                   responses={200: WebhookSerializer(many=True), **error_responses()})
    def get(self, request: Request) -> Response:
        return Response(WebhookSerializer(webhooks_of_tenant(self.access.tenant_id),
                                          many=True).data)

    @extend_schema(operation_id="webhooks_create", tags=TAGS,
                   summary="Subscribe a URL to events (the secret is shown once)",
                   request=WebhookCreateSerializer,
                   responses={201: WebhookCreatedSerializer, **error_responses()})
    def post(self, request: Request) -> Response:
        data = self.validated(WebhookCreateSerializer)
        created = webhook_create(tenant_id=self.access.tenant_id, actor=self.access.actor, **data)
        body = {**WebhookSerializer(created.subscription).data, "secret": created.secret}
        return Response(body, status=status.HTTP_201_CREATED)


class WebhookViewBase(TenantAPIView):
    def webhook(self, webhook_id: int) -> WebhookSubscription:
        webhook = webhook_of_tenant(self.access.tenant_id, webhook_id)
        if webhook is None:
            raise not_found("Webhook")
        return webhook


class WebhookDetailView(WebhookViewBase):
    policy = {"GET": "webhook.read", "PATCH": "webhook.write", "DELETE": "webhook.write"}

    @extend_schema(operation_id="webhooks_retrieve", tags=TAGS, summary="A webhook",
                   responses={200: WebhookSerializer, **error_responses()})
    def get(self, request: Request, webhook_id: int) -> Response:
        return Response(WebhookSerializer(self.webhook(webhook_id)).data)

    @extend_schema(operation_id="webhooks_update", tags=TAGS,
                   summary="Change a webhook's URL, events, format, description or active",
                   request=WebhookUpdateSerializer,
                   responses={200: WebhookSerializer, **error_responses()})
    def patch(self, request: Request, webhook_id: int) -> Response:
        data = self.validated(WebhookUpdateSerializer, partial=True)
        webhook = webhook_update(tenant_id=self.access.tenant_id, webhook_id=webhook_id,
                                 actor=self.access.actor, changes=data)
        return Response(WebhookSerializer(webhook).data)

    @extend_schema(operation_id="webhooks_destroy", tags=TAGS,
                   summary="Delete a webhook and its delivery history",
                   responses={204: None, **error_responses()})
    def delete(self, request: Request, webhook_id: int) -> Response:
        webhook_delete(tenant_id=self.access.tenant_id, webhook_id=webhook_id,
                       actor=self.access.actor)
        return Response(status=status.HTTP_204_NO_CONTENT)


class WebhookDeliveriesView(WebhookViewBase):
    policy = {"GET": "webhook.read"}

    @extend_schema(operation_id="webhooks_deliveries", tags=TAGS,
                   summary="A webhook's deliveries, newest first, with every attempt",
                   parameters=CURSOR_PARAMETERS,
                   responses={200: DeliveryPage, **error_responses()})
    def get(self, request: Request, webhook_id: int) -> Response:
        webhook = self.webhook(webhook_id)
        return self.paginate(deliveries_of_webhook(webhook.pk),
                             lambda page: DeliverySerializer(page, many=True).data)


class EmailSettingsView(TenantAPIView):
    policy = {"GET": "webhook.read", "PUT": "webhook.write"}

    @extend_schema(operation_id="notifications_email_retrieve", tags=TAGS,
                   summary="Whether the tenant's reviewers are e-mailed",
                   responses={200: EmailSettingsSerializer, **error_responses()})
    def get(self, request: Request) -> Response:
        return Response(EmailSettingsSerializer(
            notification_settings_of(self.access.tenant_id)).data)

    @extend_schema(operation_id="notifications_email_update", tags=TAGS,
                   summary="Turn reviewer e-mail on or off", request=EmailSettingsSerializer,
                   responses={200: EmailSettingsSerializer, **error_responses()})
    def put(self, request: Request) -> Response:
        data = self.validated(EmailSettingsSerializer)
        prefs = email_settings_update(tenant_id=self.access.tenant_id,
                                      email_reviewers=data["email_reviewers"],
                                      events=data["email_events"], actor=self.access.actor)
        return Response(EmailSettingsSerializer(prefs).data)


class SlackSettingsView(TenantAPIView):
    """The tenant's Slack channel for approval requests, and the app's Request URL."""

    policy = {"GET": "webhook.read", "PUT": "webhook.write"}

    def shown(self, channel: str) -> Response:
        tenant = Tenant.objects.values_list("name", flat=True).get(pk=self.access.tenant_id)
        url = link(reverse("api-slack-interactions", args=[tenant]))
        return Response(SlackSettingsSerializer(
            {"slack_channel": channel, "interactions_url": url}).data)

    @extend_schema(operation_id="notifications_slack_retrieve", tags=TAGS,
                   summary="The Slack channel approval requests are posted to",
                   responses={200: SlackSettingsSerializer, **error_responses()})
    def get(self, request: Request) -> Response:
        return self.shown(notification_settings_of(self.access.tenant_id).slack_channel)

    @extend_schema(operation_id="notifications_slack_update", tags=TAGS,
                   summary="Post approval requests to a Slack channel (empty: off)",
                   request=SlackSettingsSerializer,
                   responses={200: SlackSettingsSerializer, **error_responses()})
    def put(self, request: Request) -> Response:
        data = self.validated(SlackSettingsSerializer)
        prefs = slack_settings_update(tenant_id=self.access.tenant_id,
                                      channel=data["slack_channel"], actor=self.access.actor)
        return self.shown(prefs.slack_channel)
