"""Webhook routes, mounted at /webhooks/."""

from django.urls import path

from . import views

app_name = "webhooks"
urlpatterns = [
    path("", views.webhook_list, name="webhook-list"),
    path("email/", views.email_settings_view, name="email-settings"),
    path("slack/", views.slack_settings_view, name="slack-settings"),
    path("<int:webhook_id>/", views.webhook_detail, name="webhook-detail"),
    path("<int:webhook_id>/delete/", views.webhook_delete_view, name="webhook-delete"),
]
