"""Django admin for tenants, users' memberships, API keys, agent profiles and
(read-only) tasks, steps, events and summaries.

Task state is never edited here: the status field is protected and changes
only through `store`, so tasks and their history are view-only.
Agent profiles are editable and checked by the same rules as the API and the
console (`services.agents.agent_errors`).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db import transaction
from django.http import HttpRequest

from config.admin_site import ReadOnlyAdmin, ServiceCheckedForm
from foundations.actors import Actor

from .models import (
    AgentProfile,
    AgentReleaseEntry,
    AgentVersion,
    ApiKey,
    ContextSummary,
    Event,
    Membership,
    Step,
    Task,
    Tenant,
    TenantQuota,
)
from .services.accounts import membership_audit, membership_revoke
from .services.agent_versions import version_record
from .services.agents import EDITABLE, agent_audit, agent_audited, agent_errors


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
            membership_audit(obj, actor=_operator(request), before=before)

    # Through the service, so the member's live sockets close at once (and it is audited).
    def delete_model(self, request: HttpRequest, obj: Membership) -> None:
        membership_revoke(user_id=obj.user_id, actor=_operator(request))

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        for user_id in list(queryset.values_list("user_id", flat=True)):
            membership_revoke(user_id=user_id, actor=_operator(request))


def _operator(request: HttpRequest) -> Actor:
    """A superuser of the Django admin, as audit entries name them."""
    return Actor(name=request.user.get_username(), role="django-admin", user_id=request.user.pk)


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


class AgentProfileForm(ServiceCheckedForm):
    check = staticmethod(agent_errors)

    class Meta:
        model = AgentProfile
        fields = ("tenant", "name", *EDITABLE)



@admin.register(AgentProfile)
class AgentProfileAdmin(admin.ModelAdmin):
    """An edit here is recorded as a version like any other (released from the console or API)."""

    form = AgentProfileForm
    list_display = ("name", "tenant", "enabled", "current_version", "latest_version", "updated_at")
    list_filter = ("tenant", "enabled", "on_exhaustion")
    search_fields = ("name", "description")
    readonly_fields = ("current_version", "latest_version", "release_candidate", "release_percent")

    def save_model(self, request: HttpRequest, obj: AgentProfile, form: Any, change: bool) -> None:
        actor = _operator(request)
        with transaction.atomic():
            old = AgentProfile.objects.select_for_update().filter(pk=obj.pk).first()
            before = agent_audited(old) if change and old is not None else None
            super().save_model(request, obj, form, change)
            locked = AgentProfile.objects.select_for_update().get(pk=obj.pk)
            version_record(agent=locked, actor=actor)
            agent_audit(locked, actor=actor, action="updated" if before else "created",
                        before=before)


@admin.register(AgentVersion)
class AgentVersionAdmin(ReadOnlyAdmin):
    list_display = ("agent", "number", "kind", "actor", "created_at")
    list_filter = ("kind",)
    search_fields = ("agent__name",)


@admin.register(AgentReleaseEntry)
class AgentReleaseEntryAdmin(ReadOnlyAdmin):
    list_display = ("agent", "action", "current_before", "current_after", "candidate", "percent",
                    "actor", "created_at")
    list_filter = ("action",)


class StepInline(admin.TabularInline):
    model = Step
    extra = 0
    can_delete = False
    show_change_link = True
    fields = ("step_no", "kind", "status", "tool", "attempt", "latency_ms", "finished_at")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Task)
class TaskAdmin(ReadOnlyAdmin):
    list_display = ("id", "tenant", "agent", "status", "version", "steps_count", "created_at")
    list_filter = ("status", "tenant", "agent")
    search_fields = ("=id", "trace_id", "goal")
    date_hierarchy = "created_at"
    list_select_related = ("tenant", "agent")
    inlines = [StepInline]


@admin.register(Step)
class StepAdmin(ReadOnlyAdmin):
    list_display = ("id", "task", "step_no", "kind", "status", "tool", "attempt")
    list_filter = ("status", "kind")
    search_fields = ("=task__id", "tool", "idempotency_key")


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = ("id", "task", "task_version", "type", "actor", "actor_role", "created_at")
    list_filter = ("type", "actor_role")
    search_fields = ("=task__id", "trace_id", "actor")


@admin.register(ContextSummary)
class ContextSummaryAdmin(ReadOnlyAdmin):
    list_display = ("task", "version", "covers_until_step", "active", "created_by", "created_at")
    list_filter = ("active",)
