"""What an export covers and an erasure erases: the tasks of a tenant, or of
one subject (a task concerns a subject when its `subject` is that subject),
online and in the archive. One matcher for both, so a subject's export holds
exactly what its erasure would erase. Other apps match their own rows (memory:
`erasure_parts`)."""
from __future__ import annotations

from collections import defaultdict

from django.db.models import QuerySet

from foundations.errors import invalid
from tasks_app.models import Task

from ..models import ArchivedTask, ArchiveFile
from .restore import archive_lines

MAX_SUBJECT = 200


def checked_subject(subject: str) -> str:
    """A subject to erase or export: 1 to `MAX_SUBJECT` characters, or a 400."""
    if not subject or len(subject) > MAX_SUBJECT:
        raise invalid("invalid_subject", "Name the subject.",
                      subject=[f"1 to {MAX_SUBJECT} characters."])
    return subject


def tasks_in_scope(tenant_id: int, subject: str | None) -> QuerySet[Task]:
    """The tenant's tasks online, or only the subject's."""
    tasks = Task.objects.filter(tenant_id=tenant_id)
    return tasks if subject is None else tasks.filter(subject=subject)


def archived_in_scope(tenant_id: int, subject: str | None) -> dict[int, set[int]]:
    """{archive file id: ids of its tasks in scope}. For a subject each file of
    the tenant is read (the index does not keep subjects, the task's own line does)."""
    found: dict[int, set[int]] = defaultdict(set)
    if subject is None:
        entries = ArchivedTask.objects.filter(tenant_id=tenant_id, restored_at=None)
        for archive_id, task_id in entries.values_list("archive_id", "task_id"):
            found[archive_id].add(task_id)
        return dict(found)
    for archive in ArchiveFile.objects.filter(tenant_id=tenant_id).order_by("pk"):
        for line in archive_lines(archive):
            if line["model"] == "tasks_app.task" and line["fields"].get("subject") == subject:
                found[archive.pk].add(line["task_id"])
    return dict(found)
