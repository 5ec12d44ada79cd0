"""Exports: everything Tether holds for a tenant, or for one subject, as one
zip file of JSON Lines in the `exports` storage (`STORAGES["exports"]`).

An admin asks (`export_start`: validated, audited, queued); a background job
(`export_run`, a Celery task in production) writes the file, reporting its
progress as it goes (tasks written of the tasks in scope), then records its
counts, size and checksum; the download is streamed from the storage until
the file expires (`TETHER_EXPORT_EXPIRY_HOURS`), when the sweep deletes it.

The file holds, each row in the archive's line format (Django's serialization
format, `model`, `pk`, `fields`):

- `tasks.jsonl`: each task in scope with its whole history (steps, events,
  decisions, approvals, questions, reconciliations, summaries, notifications,
  memory citations, workflow run, ledger rows), tagged with its `task_id`, as
  the archive sweep writes it; the archived ones are read from their archive
  files;
- `memory.jsonl` (one file per registered export part): memory items, their
  versions, proposals;
- `audit.jsonl`: the tenant's audit entries (a subject's: those naming it);
- `configuration.jsonl`, a tenant export only (`configuration`: never a
  secret's value);
- `manifest.json`: what was exported, when, and the counts.

What a subject's export holds is what its erasure would erase: the same
matchers (`scope`, the registered parts, `audit_entries_naming`). The
subject's name is kept on the export's row only while the job needs it.
"""
from __future__ import annotations

import hashlib
import json
import logging
import tempfile
import zipfile
from collections.abc import Iterable, Iterator
from datetime import timedelta
from typing import IO, Any

from django.conf import settings
from django.core.files import File
from django.core.files.storage import Storage, storages
from django.db import transaction
from django.db.models import Model
from django.utils import timezone

from audit_app.models import AuditEntry
from audit_app.selectors import audit_entries_naming
from audit_app.services import Who, audit_record
from foundations.actors import Actor
from foundations.errors import conflict, gone, invalid, not_found
from tasks_app.models import Task

from ..erasure_parts import export_parts, subject_reference
from ..export_jobs import hand_over, schedule_export
from ..models import ArchiveFile, Export, ExportScope, ExportStatus
from ..selectors import export_of_tenant
from .archive import encode_line, row_lines, task_lines
from .configuration import configuration_of
from .restore import archive_lines
from .scope import archived_in_scope, checked_subject, tasks_in_scope

log = logging.getLogger(__name__)

STORAGE_ALIAS = "exports"
CHUNK = 100  # tasks read per query, and written between two progress updates
# A queued export nobody took (a lost broker message) is handed over again after
# this long; a running one whose job stopped beating (a worker killed) is queued again.
REQUEUE_AFTER = timedelta(minutes=5)
STALLED_AFTER = timedelta(minutes=10)


def export_storage() -> Storage:
    return storages[STORAGE_ALIAS]


def export_start(*, tenant_id: int, scope: str, subject: str, actor: Who) -> Export:
    """Queue an export of the tenant or of `subject`; the job runs after commit."""
    if scope == ExportScope.SUBJECT:
        checked_subject(subject)
    elif subject:
        raise invalid("invalid_export", "A tenant's export names no subject.",
                      subject=["Only with scope \"subject\"."])
    with transaction.atomic():
        export = Export.objects.create(
            tenant_id=tenant_id, scope=scope, subject=subject,
            subject_ref=subject_reference(subject) if subject else "",
            requested_by_id=actor.user_id, actor=actor.name[:150],
            actor_role=(actor.role or "")[:16], heartbeat_at=timezone.now())
        _audit(export, "requested", {"scope": scope, "subject": export.subject_ref})
        schedule_export(export.pk)
    return export


def export_run(export_id: int) -> str:
    """The job: write the export's file, then record it. Runs once per export
    (a second delivery finds it no longer queued). Its `started_at` is the run's
    token: a run the sweep gave up on (queued again, taken by another) finds its
    row taken and discards its own file."""
    now = timezone.now()
    taken = Export.objects.filter(pk=export_id, status=ExportStatus.QUEUED).update(
        status=ExportStatus.RUNNING, started_at=now, heartbeat_at=now)
    if not taken:
        return "not queued"
    export = Export.objects.get(pk=export_id)
    this_run = Export.objects.filter(pk=export_id, status=ExportStatus.RUNNING, started_at=now)
    try:
        name, size, sha256, counts = _write(export)
    except Exception as exc:  # noqa: BLE001 - any failure fails this export, not the worker
        log.exception("export %s failed", export_id)
        with transaction.atomic():
            # The error's type only: a message may quote the data being exported.
            this_run.update(
                status=ExportStatus.FAILED, error=type(exc).__name__, subject="",
                finished_at=timezone.now())
            _audit(export, "failed", {"scope": export.scope, "subject": export.subject_ref})
        return "failed"
    finished = timezone.now()
    with transaction.atomic():
        recorded = this_run.update(
            status=ExportStatus.DONE, name=name, size_bytes=size, sha256=sha256, counts=counts,
            subject="", finished_at=finished, heartbeat_at=finished,
            expires_at=finished + timedelta(hours=float(settings.TETHER["EXPORT_EXPIRY_HOURS"])))
        if recorded:
            _audit(export, "exported", {"scope": export.scope, "subject": export.subject_ref,
                                        "counts": counts, "size_bytes": size})
    if not recorded:  # erased meanwhile (its subject, or its tenant), or superseded
        export_storage().delete(name)
        return "discarded"
    return "done"


def export_download(*, tenant_id: int, export_id: int, actor: Who) -> tuple[Export, IO[bytes]]:
    """The export's file, open for streaming; audited. 404 for another tenant's."""
    export = export_of_tenant(tenant_id, export_id)
    if export is None:
        raise not_found("Export")
    if export.status == ExportStatus.EXPIRED:
        raise gone("export_expired", f"Export {export_id}'s file was deleted.",
                   expired_at=export.expires_at)
    if export.status != ExportStatus.DONE:
        raise conflict("export_not_ready", f"Export {export_id} is {export.status}.",
                       status=export.status)
    if export.expires_at and export.expires_at <= timezone.now():
        _expire([export])
        raise gone("export_expired", f"Export {export_id}'s file was deleted.",
                   expired_at=export.expires_at)
    handle = export_storage().open(export.name, "rb")
    audit_record(actor=actor, tenant_id=tenant_id, kind="export", name=f"export {export.pk}",
                 object_id=export.pk, action="downloaded", after={"size_bytes": export.size_bytes})
    return export, handle


def exports_sweep() -> int:
    """The recovery sweep's part: delete expired files, hand over again what was
    lost on the way to a worker. The number of exports expired."""
    now = timezone.now()
    expired = list(Export.objects.filter(status=ExportStatus.DONE, expires_at__lte=now)[:100])
    _expire(expired)
    Export.objects.filter(status=ExportStatus.RUNNING, heartbeat_at__lt=now - STALLED_AFTER
                          ).update(status=ExportStatus.QUEUED, heartbeat_at=now)
    lost = list(Export.objects.filter(status=ExportStatus.QUEUED,
                                      heartbeat_at__lt=now - REQUEUE_AFTER)
                .values_list("pk", flat=True)[:20])
    # handed over now: the next sweep waits another REQUEUE_AFTER before doing it again
    Export.objects.filter(pk__in=lost).update(heartbeat_at=now)
    for export_id in lost:
        hand_over(export_id)
    return len(expired)


def exports_erase(*, tenant_id: int, subject: str | None) -> int:
    """An erasure's part: delete the files (and rows) of the exports that may hold
    what is erased: the subject's own, and every export of the whole tenant (or,
    with no subject, all of the tenant's). The number of exports deleted."""
    exports = Export.objects.filter(tenant_id=tenant_id)
    if subject is not None:
        exports = (exports.filter(scope=ExportScope.TENANT)
                   | exports.filter(subject_ref=subject_reference(subject)))
    doomed = list(exports)
    storage = export_storage()
    for export in doomed:
        if export.name:
            storage.delete(export.name)
    Export.objects.filter(pk__in=[e.pk for e in doomed]).delete()
    return len(doomed)


def export_progress(export: Export) -> float:
    if export.status in (ExportStatus.DONE, ExportStatus.EXPIRED):
        return 1.0
    return export.tasks_done / export.tasks_total if export.tasks_total else 0.0


# --- writing ------------------------------------------------------------------------


def _write(export: Export) -> tuple[str, int, str, dict[str, int]]:
    """The zip, written to a temporary file, then saved to the storage."""
    subject = export.subject if export.scope == ExportScope.SUBJECT else None
    online = list(tasks_in_scope(export.tenant_id, subject).order_by("pk")
                  .values_list("pk", flat=True))
    archived = {archive_id: ids - set(online)  # a restored task is read online
                for archive_id, ids in archived_in_scope(export.tenant_id, subject).items()}
    total = len(online) + sum(len(ids) for ids in archived.values())
    Export.objects.filter(pk=export.pk, started_at=export.started_at).update(tasks_total=total)
    counts: dict[str, int] = {}
    with tempfile.TemporaryFile() as spool:
        with zipfile.ZipFile(spool, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            counts["tasks"] = total
            counts["task_rows"] = _entry(archive, "tasks.jsonl",
                                         _task_lines(export, online, archived))
            for part_name, part in sorted(export_parts().items()):
                counts[part_name] = _entry(archive, f"{part_name}.jsonl", (
                    line for queryset in part(export.tenant_id, subject)
                    for line in _rows(queryset.iterator(chunk_size=500))))
            entries = (AuditEntry.objects.filter(tenant_id=export.tenant_id).order_by("id")
                       if subject is None else audit_entries_naming(export.tenant_id, subject))
            counts["audit_entries"] = _entry(archive, "audit.jsonl",
                                             _rows(entries.iterator(chunk_size=500)))
            if subject is None:
                counts["configuration"] = _entry(archive, "configuration.jsonl", (
                    line for queryset, fields in configuration_of(export.tenant_id)
                    for line in row_lines(queryset, fields=fields,
                                          use_natural_foreign_keys=True)))
            archive.writestr("manifest.json", json.dumps({
                "export": export.pk, "tenant": export.tenant.name, "scope": export.scope,
                "subject": export.subject_ref, "requested_by": export.actor,
                "written_at": timezone.now().isoformat(), "counts": counts,
                "format": "JSON Lines; each row as Django serializes it (model, pk, fields)",
            }, indent=2))
        size = spool.tell()
        spool.seek(0)
        digest = hashlib.sha256()
        for block in iter(lambda: spool.read(1 << 20), b""):
            digest.update(block)
        spool.seek(0)
        # one name per run: a superseded run deletes its own file, never the next one's
        run = export.started_at.strftime("%Y%m%dT%H%M%S%f") if export.started_at else "0"
        name = f"{export.tenant.name}/export-{export.pk}-{export.scope}-{run}.zip"
        saved = export_storage().save(name, File(spool, name=name))
    return saved, size, digest.hexdigest(), counts


def _task_lines(export: Export, online: list[int],
                archived: dict[int, set[int]]) -> Iterator[bytes]:
    done = 0
    for start in range(0, len(online), CHUNK):
        for task in Task.objects.filter(pk__in=online[start:start + CHUNK]).order_by("pk"):
            yield from task_lines(task)
        done += len(online[start:start + CHUNK])
        _progress(export, done)
    for archive_id, ids in sorted(archived.items()):
        if not ids:
            continue
        for line in archive_lines(ArchiveFile.objects.get(pk=archive_id)):
            if line["task_id"] in ids:
                yield encode_line(line)
        done += len(ids)
        _progress(export, done)


def _rows(instances: Iterable[Model]) -> Iterator[bytes]:
    batch: list[Model] = []
    for instance in instances:
        batch.append(instance)
        if len(batch) == 500:
            yield from row_lines(batch)
            batch = []
    yield from row_lines(batch)


def _entry(archive: zipfile.ZipFile, name: str, lines: Iterable[bytes]) -> int:
    written = 0
    with archive.open(name, "w", force_zip64=True) as out:
        for line in lines:
            out.write(line + b"\n")
            written += 1
    return written


def _progress(export: Export, done: int) -> None:
    Export.objects.filter(pk=export.pk, started_at=export.started_at).update(
        tasks_done=done, heartbeat_at=timezone.now())


def _expire(exports: list[Export]) -> None:
    storage = export_storage()
    for export in exports:
        if export.name:
            storage.delete(export.name)
        Export.objects.filter(pk=export.pk).update(status=ExportStatus.EXPIRED)


def _audit(export: Export, action: str, after: dict[str, Any]) -> None:
    audit_record(actor=Actor(name=export.actor, role=export.actor_role,
                             user_id=export.requested_by_id),
                 tenant_id=export.tenant_id, kind="export", name=f"export {export.pk}",
                 object_id=export.pk, action=action, after=after)
