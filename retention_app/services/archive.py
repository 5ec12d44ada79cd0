"""The archive sweep: finished tasks past their tenant's retention leave the
online tables for compressed JSON Lines files in the archive storage.

One pass, per tenant, per batch of at most `TETHER_ARCHIVE_BATCH` due tasks
(oldest ids first), in three moves, each safe to repeat after a crash (moves 1
and 2 for every batch of every tenant, then move 3 for all of them):

1. **Write** the batch to one file, named after its tenant, month and ids
   (`<tenant>/<YYYY-MM>/tasks-<first>-<last>.jsonl.gz`): every row the task's
   deletion would remove (Django's own deletion collector says which: steps,
   events, decisions, approvals, questions, reconciliations, summaries,
   notifications, memory citations, its workflow run) and its ledger rows,
   one JSON object per line in Django's serialization format, tagged with the
   task's id, after the payloads its rows store out of row (`PayloadBlob`).
   A file of the same name left by a crash is replaced.
2. **Index** it: the `ArchiveFile` row (counts, size, SHA-256) and an
   `ArchivedTask` row per task, in one transaction. A task is indexed once
   (the row's key is the task id), and a task already indexed is never
   selected again.
3. **Delete** the indexed tasks online (this pass's, and any a crash left).
   First the month partitions of the events table (PostgreSQL) that lie past
   the operator's maximum retention and hold only archived tasks' rows are
   dropped whole (`archived_months`): their rows are not deleted one by one.
   Then the tasks, `TETHER_ARCHIVE_DELETE_BATCH` per transaction: short
   transactions, so no lock is held long and the runner never waits on the
   sweep. A payload blob no task uses any more goes with the last task that
   used it. A pass starts by removing files in the storage that no index row
   names (written by a pass that died before move 2).

At most one pass runs at a time across the deployment (a deployment lock).
"""
from __future__ import annotations

import gzip
import hashlib
import io
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.admin.utils import NestedObjects
from django.core import serializers
from django.core.files.base import ContentFile
from django.core.files.storage import Storage, storages
from django.db import transaction
from django.db.models import Exists, Model, OuterRef
from django.utils import timezone

from accounts_app.models import Tenant
from foundations.deployment_locks import deployment_lock
from tasks_app.machine import TERMINAL
from tasks_app.models import PayloadBlob, Task
from tasks_app.payloads import tasks_delete
from tools_app.models import ToolExecution

from ..models import ArchivedTask, ArchiveFile
from .archived_months import archived_months_drop
from .policy import retention_days

ARCHIVE_LOCK_KEY = 0x7E7E_0003
STORAGE_ALIAS = "archive"


@dataclass
class ArchiveReport:
    files: int = 0
    tasks: int = 0
    rows: int = 0
    deleted: int = 0
    orphans_removed: list[str] = field(default_factory=list)
    partitions_dropped: list[str] = field(default_factory=list)
    skipped: bool = False  # another pass held the lock

    def as_dict(self) -> dict[str, Any]:
        return {"files": self.files, "tasks": self.tasks, "rows": self.rows,
                "deleted": self.deleted, "orphans_removed": self.orphans_removed,
                "partitions_dropped": self.partitions_dropped, "skipped": self.skipped}


def archive_storage() -> Storage:
    return storages[STORAGE_ALIAS]


def archive_sweep(*, now: datetime | None = None, tenant: Tenant | None = None) -> ArchiveReport:
    """One pass over every tenant (or one): archive what is past retention."""
    report = ArchiveReport()
    with deployment_lock(ARCHIVE_LOCK_KEY) as taken:
        if not taken:
            report.skipped = True
            return report
        now = now or timezone.now()
        tenants = [tenant] if tenant is not None else list(Tenant.objects.order_by("pk"))
        for each in tenants:
            _remove_orphans(each, report)
            cutoff = now - timedelta(days=retention_days(each))
            while batch := _due(each, cutoff):
                written = _write(each, batch)
                report.files += 1
                report.tasks += written.tasks
                report.rows += written.rows
        report.partitions_dropped = archived_months_drop(now=now)
        report.deleted += _delete_indexed_online()
    return report


def _due(tenant: Tenant, cutoff: datetime) -> list[Task]:
    indexed = ArchivedTask.objects.filter(task_id=OuterRef("pk"))
    return list(
        Task.objects.filter(tenant=tenant, status__in=TERMINAL, finished_at__lt=cutoff)
        .filter(~Exists(indexed)).order_by("pk")[: int(settings.TETHER["ARCHIVE_BATCH"])])


def _write(tenant: Tenant, batch: list[Task]) -> ArchiveFile:
    """Moves 1 and 2 for one batch: the file, then its index."""
    period = batch[0].finished_at.strftime("%Y-%m") if batch[0].finished_at else "unknown"
    name = f"{tenant.name}/{period}/tasks-{batch[0].pk}-{batch[-1].pk}.jsonl.gz"
    lines = [line for task in batch for line in task_lines(task)]
    content = gzip_lines(lines)
    storage = archive_storage()
    if storage.exists(name):
        storage.delete(name)  # a crash wrote it and indexed nothing
    saved = storage.save(name, ContentFile(content))
    with transaction.atomic():
        archive = ArchiveFile.objects.create(
            tenant=tenant, period=period, name=saved, tasks=len(batch), rows=len(lines),
            size_bytes=len(content), sha256=hashlib.sha256(content).hexdigest())
        ArchivedTask.objects.bulk_create([
            ArchivedTask(task_id=task.pk, tenant=tenant, archive=archive,
                         finished_at=task.finished_at or timezone.now()) for task in batch])
    return archive


def task_lines(task: Task) -> list[bytes]:
    """Every row that goes with `task`, in an order they can be inserted back in."""
    collector = NestedObjects(using="default")
    collector.collect([task])
    collector.sort()  # deletion order: dependents first
    # its payloads stored out of row first: its rows' uses of them follow
    instances: list[Model] = list(PayloadBlob.objects.filter(uses__task_id=task.pk)
                                  .distinct().order_by("pk"))
    instances += [obj for _model, objs in reversed(collector.data.items()) for obj in objs]
    instances += list(ToolExecution.objects.filter(task_id=task.pk).order_by("pk"))
    return row_lines(instances, tag={"task_id": task.pk})


def row_lines(instances: Iterable[Model], *, tag: dict[str, Any] | None = None,
              **options: Any) -> list[bytes]:
    """Rows as lines, in Django's serialization format (`model`, `pk`, `fields`;
    `options` as `serializers.serialize` takes them), each with `tag`'s keys first."""
    payload = json.loads(serializers.serialize("json", instances, **options))
    return [encode_line({**(tag or {}), **row}) for row in payload]


def encode_line(row: dict[str, Any]) -> bytes:
    return json.dumps(row, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def gzip_lines(lines: list[bytes]) -> bytes:
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as out:
        for line in lines:
            out.write(line + b"\n")
    return buffer.getvalue()


def _delete_indexed_online() -> int:
    """Move 3: delete online, in short transactions, every indexed task still there."""
    deleted = 0
    size = int(settings.TETHER["ARCHIVE_DELETE_BATCH"])
    while True:
        online = Task.objects.filter(
            Exists(ArchivedTask.objects.filter(task_id=OuterRef("pk"), restored_at=None)))
        ids = list(online.order_by("pk").values_list("pk", flat=True)[:size])
        if not ids:
            return deleted
        with transaction.atomic():
            ToolExecution.objects.filter(task_id__in=ids).delete()
            tasks_delete(Task.objects.filter(pk__in=ids))
        deleted += len(ids)


def _remove_orphans(tenant: Tenant, report: ArchiveReport) -> None:
    """Files of the tenant no index row names: left by a pass that died between
    writing and indexing; their tasks are still online and archived again."""
    storage = archive_storage()
    if not storage.exists(tenant.name):
        return
    indexed = set(ArchiveFile.objects.filter(tenant=tenant).values_list("name", flat=True))
    periods, _files = storage.listdir(tenant.name)
    for period in periods:
        _dirs, files = storage.listdir(f"{tenant.name}/{period}")
        for file_name in files:
            name = f"{tenant.name}/{period}/{file_name}"
            if name not in indexed:
                storage.delete(name)
                report.orphans_removed.append(name)
