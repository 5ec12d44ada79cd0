"""Django admin for agent profiles and (read-only) tasks, steps, events and
summaries.

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

from config.admin_site import ReadOnlyAdmin, ServiceCheckedForm, operator_of

from .models import (
    AgentProfile,
    AgentReleaseEntry,
    AgentVersion,
    ContextSummary,
    Event,
    Step,
    Task,
)
from .services.agent_versions import version_record
from .services.agents import EDITABLE, agent_audit, agent_audited, agent_errors


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
        actor = operator_of(request)
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
