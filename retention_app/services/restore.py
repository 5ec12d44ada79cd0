"""Bring an archived task back online from its archive file (an operator's act).

The task's lines are read from its file and inserted back with their own ids,
in the order they were written (a row after the rows it points to), in one
transaction; a payload blob is put back unless its tenant holds the same one
online already (then the task's uses point at that one). The index row stays,
marked restored: the sweep never archives the task again, and the file keeps
its copy.
"""
from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Iterator
from typing import Any

from django.core import serializers
from django.db import transaction
from django.utils import timezone

from foundations.errors import conflict, not_found
from tasks_app.models import PayloadBlob, PayloadUse

from ..models import ArchivedTask, ArchiveFile
from .archive import archive_storage


def archive_lines(archive: ArchiveFile) -> Iterator[dict[str, Any]]:
    """The rows of an archive file, checked against its recorded checksum."""
    with archive_storage().open(archive.name, "rb") as handle:
        content = handle.read()
    if hashlib.sha256(content).hexdigest() != archive.sha256:
        raise conflict("archive_corrupt", f"{archive.name} does not match its checksum.")
    for line in gzip.decompress(content).splitlines():
        if line:
            yield json.loads(line)


def task_restore(task_id: int) -> int:
    """Restore one archived task; the number of rows inserted."""
    entry = ArchivedTask.objects.select_related("archive").filter(task_id=task_id).first()
    if entry is None:
        raise not_found("Archived task")
    if entry.restored_at is not None:
        raise conflict("already_restored", f"Task {task_id} was restored on {entry.restored_at}.")
    rows = [{k: v for k, v in line.items() if k != "task_id"}
            for line in archive_lines(entry.archive) if line["task_id"] == task_id]
    with transaction.atomic():
        blob_ids: dict[int, int] = {}  # the archived blob's id -> the one online
        for obj in serializers.deserialize("python", rows):
            row = obj.object
            if isinstance(row, PayloadBlob):  # kept once per tenant and content
                blob_ids[row.pk] = PayloadBlob.objects.get_or_create(
                    tenant_id=row.tenant_id, sha256=row.sha256,
                    defaults={"size": row.size, "data": row.data})[0].pk
                continue
            if isinstance(row, PayloadUse):
                row.blob_id = blob_ids.get(row.blob_id, row.blob_id)
            obj.save()
        ArchivedTask.objects.filter(pk=task_id).update(restored_at=timezone.now())
    return len(rows)
