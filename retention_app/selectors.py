"""Reads of the archive's index and of exports."""
from __future__ import annotations

from django.db.models import QuerySet

from .models import ArchivedTask, ArchiveFile, Export


def archived_task_of_tenant(tenant_id: int, task_id: int) -> ArchivedTask | None:
    """The index row of a task archived (and not restored) of this tenant."""
    return (ArchivedTask.objects.select_related("archive")
            .filter(tenant_id=tenant_id, task_id=task_id, restored_at=None).first())


def archive_files_of_tenant(tenant_id: int) -> QuerySet[ArchiveFile]:
    return ArchiveFile.objects.filter(tenant_id=tenant_id).order_by("-id")


def exports_of_tenant(tenant_id: int) -> QuerySet[Export]:
    return Export.objects.filter(tenant_id=tenant_id).order_by("-id")


def export_of_tenant(tenant_id: int, export_id: int) -> Export | None:
    return Export.objects.filter(tenant_id=tenant_id, pk=export_id).first()
