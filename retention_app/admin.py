"""The archive's index in the Django admin, read-only: what was archived, where."""
from django.contrib import admin

from .models import ArchivedTask, ArchiveFile, RetentionPolicy


class ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return False

    def has_change_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return False

    def has_delete_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return False


@admin.register(ArchiveFile)
class ArchiveFileAdmin(ReadOnly):
    list_display = ["name", "tenant", "period", "tasks", "rows", "size_bytes", "created_at"]
    list_filter = ["tenant"]


@admin.register(ArchivedTask)
class ArchivedTaskAdmin(ReadOnly):
    list_display = ["task_id", "tenant", "archive", "finished_at", "archived_at", "restored_at"]
    search_fields = ["task_id"]


@admin.register(RetentionPolicy)
class RetentionPolicyAdmin(admin.ModelAdmin):
    list_display = ["tenant", "days", "updated_at"]
