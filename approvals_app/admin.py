"""Django admin for approvals, questions and reconciliations: read-only. A
decision is a versioned transition of its task, taken in the console or the
API (`services.decisions`), never by editing a row here."""

from __future__ import annotations

from django.contrib import admin

from tasks_app.admin import ReadOnlyAdmin

from .models import Approval, Question, Reconciliation


@admin.register(Approval)
class ApprovalAdmin(ReadOnlyAdmin):
    list_display = ("id", "task", "tool", "status", "decided_by", "decided_at", "created_at")
    list_filter = ("status", "tool")
    search_fields = ("=task__id", "tool")


@admin.register(Question)
class QuestionAdmin(ReadOnlyAdmin):
    list_display = ("id", "task", "status", "answered_by", "answered_at", "created_at")
    list_filter = ("status",)
    search_fields = ("=task__id", "question")


@admin.register(Reconciliation)
class ReconciliationAdmin(ReadOnlyAdmin):
    list_display = ("id", "task", "tool", "status", "outcome", "resolved_by", "created_at")
    list_filter = ("status", "outcome")
    search_fields = ("=task__id", "idempotency_key")
