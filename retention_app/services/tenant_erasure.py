"""Erasure of a whole tenant (an operator's act, `manage.py erase_tenant`):
everything Tether holds for it goes, online and in the archive; what is kept is
what says that it happened.

In this order, each step safe to run again if a run dies:

1. its tasks in flight are canceled (their late results are fenced as any
   cancel's are);
2. its tasks are deleted online with every row that goes with them and their
   ledger rows, `TETHER_ARCHIVE_DELETE_BATCH` tasks per transaction (short
   transactions: the runner serving other tenants never waits on them);
3. its archive files are deleted from the archive storage, with anything
   else under its directory there (files of a crashed sweep), then their
   index rows; its export files likewise;
4. in one transaction: every other row that belongs to it (anything with a
   foreign key to the tenant, and what hangs from those rows: memory,
   configuration, secrets, webhooks and notifications, schedules,
   evaluations, quotas, ...; the tables keyed by its id without a foreign key:
   breakers, resource leases), its members' user accounts with their API keys
   (a user belongs to one tenant), its audit entries redacted (kind, action,
   role and time kept; name, actor, object and diff blanked; earlier erasures'
   entries, which hold no content, as they were), the tenant row
   renamed `erased-<id>` (kept, so its audit entries and the new one keep a
   tenant to belong to, and its id is never reused), and one audit entry that
   says an erasure happened, by whom, with the counts.
"""
from __future__ import annotations

from contextlib import suppress
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.files.storage import Storage
from django.db import transaction
from django.db.models import ForeignObjectRel, Model, QuerySet
from django.db.models.deletion import ProtectedError, RestrictedError

from accounts_app.models import Membership, Tenant
from audit_app.models import AuditEntry
from audit_app.services import ERASED, audit_record
from foundations.actors import Actor
from foundations.deployment_locks import deployment_lock
from foundations.errors import conflict
from tasks_app.machine import NON_TERMINAL
from tasks_app.models import LeaseWaiter, ResourceLease, Task
from tasks_app.payloads import tasks_delete
from tasks_app.services.tasks import task_cancel_many
from tools_app.models import Breaker, ToolExecution

from ..models import ArchivedTask, ArchiveFile
from .archive import ARCHIVE_LOCK_KEY, archive_storage
from .export import export_storage, exports_erase

# Tables that name a tenant by its id, without a foreign key (hot paths keep them lean).
KEYED_BY_TENANT_ID: list[type[Model]] = [Breaker, ResourceLease, LeaseWaiter, ToolExecution]


def tenant_erasure(*, tenant: Tenant, actor: Actor) -> dict[str, Any]:
    """Erase `tenant`'s data; the counts of what was erased. Never beside an
    archive pass (the pass's lock): it could write a file of the tenant's tasks
    while they are being deleted."""
    with deployment_lock(ARCHIVE_LOCK_KEY) as taken:
        if not taken:
            raise conflict("archive_pass_running",
                           "An archive pass is running; erase the tenant when it is done.")
        return _erase(tenant, actor)


def _erase(tenant: Tenant, actor: Actor) -> dict[str, Any]:
    tenant_id, slug = tenant.pk, tenant.name
    in_flight = list(Task.objects.filter(tenant_id=tenant_id, status__in=NON_TERMINAL)
                     .values_list("pk", flat=True))
    if in_flight:
        task_cancel_many(task_ids=in_flight, actor=actor, reason="tenant erased")
    counts: dict[str, Any] = {"canceled": len(in_flight)}
    counts["tasks"], counts["task_rows"] = _delete_tasks(tenant_id)
    counts["archive_files"] = ArchiveFile.objects.filter(tenant_id=tenant_id).count()
    counts["archived_tasks"] = ArchivedTask.objects.filter(tenant_id=tenant_id).count()
    for name in ArchiveFile.objects.filter(tenant_id=tenant_id).values_list("name", flat=True):
        archive_storage().delete(name)
    _delete_tree(archive_storage(), slug)
    ArchivedTask.objects.filter(tenant_id=tenant_id).delete()
    ArchiveFile.objects.filter(tenant_id=tenant_id).delete()
    counts["exports"] = exports_erase(tenant_id=tenant_id, subject=None)
    _delete_tree(export_storage(), slug)
    with transaction.atomic():
        users = list(Membership.objects.filter(tenant_id=tenant_id)
                     .values_list("user_id", flat=True))
        counts["rows"] = _delete_owned(tenant) + sum(
            model._default_manager.filter(tenant_id=tenant_id).delete()[0]
            for model in KEYED_BY_TENANT_ID)
        get_user_model().objects.filter(pk__in=users).delete()  # with their API keys
        counts["users"] = len(users)
        # Earlier erasures' entries hold counts and digests only: they stay as they are.
        counts["audit_entries_redacted"] = (
            AuditEntry.objects.filter(tenant_id=tenant_id).exclude(kind="erasure")
            .update(name="[erased]", actor="[erased]", object_id="", user=None, diff=ERASED,
                    request_id=""))
        Tenant.objects.filter(pk=tenant_id).update(name=f"erased-{tenant_id}")
        audit_record(actor=actor, tenant_id=tenant_id, kind="erasure",
                     name=f"tenant:{tenant_id}", action="erased", after=counts)
    return counts


def _delete_tasks(tenant_id: int) -> tuple[int, int]:
    tasks = rows = 0
    size = int(settings.TETHER["ARCHIVE_DELETE_BATCH"])
    while ids := list(Task.objects.filter(tenant_id=tenant_id).order_by("pk")
                      .values_list("pk", flat=True)[:size]):
        with transaction.atomic():
            ledger, _ = ToolExecution.objects.filter(task_id__in=ids).delete()
            deleted, _ = tasks_delete(Task.objects.filter(pk__in=ids))
        tasks += len(ids)
        rows += deleted + ledger
    return tasks, rows


def _delete_owned(tenant: Tenant) -> int:
    """Every row with a foreign key to the tenant (and, by their own cascades, what
    hangs from them) but its audit entries. A protected row (an approval rule's
    reviewer group) goes once what protects it went: passes until none is left."""
    owned: list[QuerySet] = [
        relation.field.model._default_manager.filter(**{relation.field.name: tenant})
        for relation in Tenant._meta.get_fields(include_hidden=True)  # related_name="+" too
        if isinstance(relation, ForeignObjectRel) and relation.field.model is not AuditEntry]
    deleted = 0
    while owned:
        left = []
        for rows in owned:
            try:
                with transaction.atomic():
                    deleted += rows.delete()[0]
            except (ProtectedError, RestrictedError):
                left.append(rows)
        if len(left) == len(owned):
            raise RuntimeError(f"rows of {tenant.name} protect each other: {left}")
        owned = left
    return deleted


def _delete_tree(storage: Storage, prefix: str) -> None:
    """Every file under `prefix` in the storage (a file system's or a bucket's),
    then, on a file system, the directories left empty (they bear its name)."""
    if not storage.exists(prefix):
        return
    directories, files = storage.listdir(prefix)
    for name in files:
        storage.delete(f"{prefix}/{name}")
    for directory in directories:
        _delete_tree(storage, f"{prefix}/{directory}")
    with suppress(NotImplementedError):  # a bucket has no directories
        Path(storage.path(prefix)).rmdir()
