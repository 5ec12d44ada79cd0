"""Django admin for tenants and their quotas, users' memberships and API keys.

A membership saved or deleted here goes through the services' audit and
revocation (the member's live sockets close); keys are only revoked here."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db import transaction
from django.http import HttpRequest

from config.admin_site import operator_of

from .models import ApiKey, Membership, Tenant, TenantQuota
from .services.accounts import membership_audit, membership_revoke


class TenantQuotaInline(admin.StackedInline):
    """The tenant's quota: the operator's to set (the tenant's admins only see it)."""

    model = TenantQuota
    can_delete = True
    extra = 0
    max_num = 1


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ("name", "created_at")
    search_fields = ("name",)
    inlines = [TenantQuotaInline]


@admin.register(TenantQuota)
class TenantQuotaAdmin(admin.ModelAdmin):
    list_display = ("tenant", "max_running", "weight", "daily_spend_limit",
                    "monthly_spend_limit", "over_spend", "updated_at")
    list_select_related = ("tenant",)
    search_fields = ("tenant__name",)
    readonly_fields = ("warned_day", "warned_month")


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ("user", "tenant", "role")
    list_filter = ("role", "tenant")
    search_fields = ("user__username",)
    autocomplete_fields = ("user",)

    def save_model(self, request: HttpRequest, obj: Membership, form: Any, change: bool) -> None:
        with transaction.atomic():  # the audit entry commits with the change
            before = (Membership.objects.select_related("tenant").filter(pk=obj.pk).first()
                      if change else None)
            super().save_model(request, obj, form, change)
            membership_audit(obj, actor=operator_of(request), before=before)

    # Through the service, so the member's live sockets close at once (and it is audited).
    def delete_model(self, request: HttpRequest, obj: Membership) -> None:
        membership_revoke(user_id=obj.user_id, actor=operator_of(request))

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        for user_id in list(queryset.values_list("user_id", flat=True)):
            membership_revoke(user_id=user_id, actor=operator_of(request))


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    """Keys are made by `manage.py create_api_token` (shown once); here they are only revoked."""

    list_display = ("prefix", "user", "created_at", "last_used_at", "revoked")
    list_filter = ("revoked",)
    search_fields = ("prefix", "user__username")
    readonly_fields = ("user", "prefix", "key_hash", "created_at", "last_used_at")
    fields = ("user", "prefix", "key_hash", "created_at", "last_used_at", "revoked")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
