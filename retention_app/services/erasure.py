"""Erasure of a subject: everything Tether holds about one end user or
customer (a task's `subject`), online and in the archive.

- Its tasks in flight are canceled first (their late results are fenced as
  any cancel's are).
- Its tasks are deleted with every row that goes with them (steps, events,
  decisions, approvals, questions, reconciliations, summaries, notifications
  and their deliveries, memory citations, workflow runs) and their ledger rows,
  and the payloads they stored out of row that no other task uses,
  in one transaction with the registered parts (memory: the subject's items,
  their versions, its proposals).
- Its archived tasks are removed from their archive files: each file that
  holds one is rewritten without their lines, its index row updated (counts,
  size, checksum), the tasks' index rows deleted.
- The export files that may hold it are deleted: its own exports, and every
  export of the whole tenant.
- Audit entries that hold the subject (memory writes name it) keep who did
  what and when, and lose their diff. One new entry says that an erasure
  happened, by whom, with the counts; it names the subject by a digest, never
  by its text.
"""
from __future__ import annotations

import hashlib
from typing import Any

from django.core.files.base import ContentFile
from django.db import transaction

from audit_app.services import audit_record, audit_redact
from foundations.actors import Actor
from tasks_app.machine import NON_TERMINAL
from tasks_app.models import PayloadBlob
from tasks_app.payloads import tasks_delete
from tasks_app.services.tasks import task_cancel_many
from tools_app.models import ToolExecution

from ..erasure_parts import erasure_parts, subject_reference
from ..models import ArchivedTask, ArchiveFile
from .archive import archive_storage, encode_line, gzip_lines
from .export import exports_erase
from .restore import archive_lines
from .scope import archived_in_scope, checked_subject, tasks_in_scope


def subject_erasure(*, tenant_id: int, subject: str, actor: Actor) -> dict[str, Any]:
    """Erase `subject` in the tenant; the counts of what was erased."""
    tasks = tasks_in_scope(tenant_id, checked_subject(subject))
    in_flight = list(tasks.filter(status__in=NON_TERMINAL).values_list("pk", flat=True))
    if in_flight:
        task_cancel_many(task_ids=in_flight, actor=actor)
    counts: dict[str, Any] = {"canceled": len(in_flight)}
    with transaction.atomic():
        ids = list(tasks.values_list("pk", flat=True))
        counts["ledger_rows"], _ = ToolExecution.objects.filter(task_id__in=ids).delete()
        deleted, by_model = tasks_delete(tasks)
        counts["payload_blobs"] = by_model[PayloadBlob._meta.label]
        counts["tasks"] = by_model.get("tasks_app.Task", 0)
        counts["rows"] = deleted + counts["ledger_rows"]
        for name, part in erasure_parts().items():
            counts[name] = part(tenant_id, subject, actor)
        counts["archived_tasks"] = _erase_archived(tenant_id, subject)
        counts["exports"] = exports_erase(tenant_id=tenant_id, subject=subject)
        counts["audit_entries_redacted"] = audit_redact(tenant_id=tenant_id, containing=subject)
        audit_record(actor=actor, tenant_id=tenant_id, kind="erasure",
                     name=subject_reference(subject), action="erased", after=counts)
    return counts


def _erase_archived(tenant_id: int, subject: str) -> int:
    """Rewrite every archive file holding one of the subject's tasks without them."""
    erased = 0
    storage = archive_storage()
    for archive_id, task_ids in archived_in_scope(tenant_id, subject).items():
        archive = ArchiveFile.objects.select_for_update().get(pk=archive_id)
        kept = [line for line in archive_lines(archive) if line["task_id"] not in task_ids]
        content = gzip_lines([encode_line(line) for line in kept])
        storage.delete(archive.name)
        storage.save(archive.name, ContentFile(content))
        archive.tasks = sum(1 for line in kept if line["model"] == "tasks_app.task")
        archive.rows, archive.size_bytes = len(kept), len(content)
        archive.sha256 = hashlib.sha256(content).hexdigest()
        archive.save(update_fields=["tasks", "rows", "size_bytes", "sha256"])
        ArchivedTask.objects.filter(archive=archive, task_id__in=task_ids).delete()
        erased += len(task_ids)
    return erased
