"""Django admin for tool registrations (checked by the same rules as the API and
the console), the idempotency ledger (read-only: it is evidence) and the demo store."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db import transaction
from django.http import HttpRequest

from config.admin_site import ReadOnlyAdmin, ServiceCheckedForm
from foundations.actors import Actor

from .models import DemoNotification, DemoOrder, DemoRefund, Tool, ToolExecution
from .services import EDITABLE, tool_audit, tool_audited, tool_errors


class ToolForm(ServiceCheckedForm):
    url = forms.URLField(required=False, max_length=500, assume_scheme="https")
    check = staticmethod(tool_errors)

    class Meta:
        model = Tool
        fields = ("tenant", "name", *EDITABLE)


@admin.register(Tool)
class ToolAdmin(admin.ModelAdmin):
    form = ToolForm
    list_display = ("name", "tenant", "kind", "side_effect", "risk", "requires_approval", "enabled")
    list_filter = ("tenant", "kind", "side_effect", "risk", "enabled")
    search_fields = ("name", "description")

    def save_model(self, request: HttpRequest, obj: Tool, form: Any, change: bool) -> None:
        actor = Actor(name=request.user.get_username(), role="django-admin",
                      user_id=request.user.pk)
        with transaction.atomic():  # the audit entry commits with the change
            old = Tool.objects.select_for_update().filter(pk=obj.pk).first() if change else None
            super().save_model(request, obj, form, change)
            tool_audit(obj, actor=actor, action="updated" if old else "created",
                       before=tool_audited(old) if old else None)


@admin.register(ToolExecution)
class ToolExecutionAdmin(ReadOnlyAdmin):
    list_display = ("idempotency_key", "tool", "task_id", "status", "updated_at")
    list_filter = ("status", "tool")
    search_fields = ("idempotency_key", "=task_id")


@admin.register(DemoOrder)
class DemoOrderAdmin(admin.ModelAdmin):
    list_display = ("order_id", "customer", "amount_cents", "status")


@admin.register(DemoRefund)
class DemoRefundAdmin(admin.ModelAdmin):
    list_display = ("order_id", "amount_cents", "reason", "created_at")


@admin.register(DemoNotification)
class DemoNotificationAdmin(admin.ModelAdmin):
    list_display = ("customer", "message", "created_at")
