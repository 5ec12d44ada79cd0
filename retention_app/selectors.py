"""Reads of the archive's index."""
from __future__ import annotations

from django.db.models import QuerySet

from .models import ArchivedTask, ArchiveFile


def archived_task_of_tenant(tenant_id: int, task_id: int) -> ArchivedTask | None:
    """The index row of a task archived (and not restored) of this tenant."""
    return (ArchivedTask.objects.select_related("archive")
            .filter(tenant_id=tenant_id, task_id=task_id, restored_at=None).first())


def archive_files_of_tenant(tenant_id: int) -> QuerySet[ArchiveFile]:
    return ArchiveFile.objects.filter(tenant_id=tenant_id).order_by("-id")
