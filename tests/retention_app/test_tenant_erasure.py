"""Erasure of a whole tenant (`manage.py erase_tenant`): afterwards no row of
the database (a `pg_dump` of it is searched), no archive or export file and
no file name holds the tenant's marker strings; its tasks in flight were
canceled first; what says that the erasure happened is kept; another tenant's
tasks, memory and archive are untouched."""
from __future__ import annotations

import io
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from accounts_app.models import Role, Tenant
from accounts_app.services.secrets import secret_create
from audit_app.models import AuditEntry
from foundations.actors import SYSTEM
from memory_app.models import MemoryItem
from retention_app.models import ArchivedTask, ArchiveFile
from retention_app.services.archive import archive_sweep
from tasks_app.machine import TaskStatus
from tasks_app.models import Task
from tasks_app.services.demo import demo_agent_ensure, demo_tools_ensure
from tests.api.conftest import client_for
from tests.factories import TenantFactory, make_user, submit
from tests.helpers import drive
from tests.retention_app.conftest import run_queued_exports
from tests.retention_app.markers import database_dump, files_text

pytestmark = [pytest.mark.system, pytest.mark.django_db(transaction=True)]

MARK = "zq-leaving-6604"  # in the tenant's name, users, tasks, memory, configuration
KEPT = "zq-staying-1187"  # the other tenant's


def _task(tenant: Tenant, mark: str, **kw: Any) -> int:
    task = submit(tenant, [{"tool": "lookup_order", "args": {"order_id": "A-1"}},
                           {"final": {"reply": f"done for {mark}"}}],
                  goal=f"help {mark}", input={"note": mark}, subject=f"cust-{mark}", **kw)
    return drive(task.pk).pk


def _age(*task_ids: int) -> None:
    Task.objects.filter(pk__in=task_ids).update(finished_at=timezone.now() - timedelta(days=40))


def _leaving_tenant() -> tuple[Tenant, Any]:
    tenant = TenantFactory(name=f"t-{MARK}")
    demo_tools_ensure(tenant)
    demo_agent_ensure(tenant, description=f"support for {MARK}")
    users = {role: make_user(tenant, role) for role in Role.values}
    secret_create(tenant_id=tenant.pk, name=f"key-{MARK}", value=f"value-{MARK}", actor=SYSTEM)
    return tenant, client_for(users[Role.ADMIN])


def _everything(export_dirs: tuple[Path, Path]) -> str:
    names = " ".join(str(p) for root in export_dirs for p in root.rglob("*"))
    return names + "".join(files_text(root) for root in export_dirs)


def test_an_erased_tenant_is_nowhere_and_the_other_is_untouched(world, export_dirs):
    tenant, admin = _leaving_tenant()
    archived = _task(tenant, MARK)
    kept_archived = _task(world.tenant, KEPT)
    _age(archived, kept_archived)
    assert archive_sweep().tasks == 2  # one file per tenant
    done = _task(tenant, MARK)
    waiting = submit(tenant, [{"ask": f"which order, {MARK}?"}], goal=f"ask {MARK}")
    assert drive(waiting.pk).status == TaskStatus.WAITING_FOR_INPUT
    kept_online = _task(world.tenant, KEPT)
    for client, mark in ((admin, MARK), (client_for(world.users["admin"]), KEPT)):
        assert client.post("/api/v1/memory", {"scope": "tenant", "kind": "fact",
                                               "text": f"remember {mark}"},
                           format="json").status_code == 201
    assert admin.post("/api/v1/exports", {"scope": "tenant"}, format="json").status_code == 202
    assert run_queued_exports() == ["done"]
    assert MARK in database_dump() and MARK in _everything(export_dirs)

    with pytest.raises(CommandError, match="--confirm"):
        call_command("erase_tenant", tenant.name, "--confirm", "t-main")
    assert Task.objects.filter(pk=done).exists()  # nothing erased without the confirmation

    out = io.StringIO()
    call_command("erase_tenant", tenant.name, "--confirm", tenant.name, "--actor", "ops-jo",
                 stdout=out)

    counts = json.loads(out.getvalue())
    assert counts["canceled"] == 1 and counts["tasks"] == 2
    assert counts["archived_tasks"] == 1 and counts["archive_files"] == 1
    assert counts["exports"] == 1 and counts["users"] == len(Role.values)
    assert MARK not in database_dump()
    assert MARK not in _everything(export_dirs)
    # What says it happened: the tenant's row (renamed), its entries, redacted, and one more.
    assert Tenant.objects.get(pk=tenant.pk).name == f"erased-{tenant.pk}"
    erasure = AuditEntry.objects.get(tenant_id=tenant.pk, kind="erasure")
    assert erasure.actor == "ops-jo" and erasure.action == "erased"
    assert {d["path"]: d["new"] for d in erasure.diff}["tasks"] == 2
    assert AuditEntry.objects.filter(tenant_id=tenant.pk).exclude(pk=erasure.pk).exclude(
        name="[erased]").count() == 0

    # Run again (as after a crash part-way): nothing left to erase, the first entry kept.
    again = io.StringIO()
    call_command("erase_tenant", f"erased-{tenant.pk}", "--confirm", f"erased-{tenant.pk}",
                 stdout=again)
    assert json.loads(again.getvalue())["tasks"] == 0
    assert AuditEntry.objects.get(pk=erasure.pk).actor == "ops-jo"

    # The other tenant: its tasks, memory and archive as they were.
    assert KEPT in database_dump() and KEPT in files_text(export_dirs[0])
    assert Task.objects.filter(pk=kept_online, tenant=world.tenant).exists()
    assert MemoryItem.objects.filter(tenant=world.tenant, text=f"remember {KEPT}").exists()
    assert list(ArchivedTask.objects.values_list("task_id", flat=True)) == [kept_archived]
    assert ArchiveFile.objects.get().tenant_id == world.tenant.pk
    kept_admin = client_for(world.users["admin"])
    assert kept_admin.get(f"/api/v1/tasks/{kept_archived}").status_code == 410
    assert kept_admin.get(f"/api/v1/tasks/{kept_online}").status_code == 200


def test_an_unknown_tenant_is_refused(world, export_dirs):
    with pytest.raises(CommandError, match="no tenant"):
        call_command("erase_tenant", "t-nobody", "--confirm", "t-nobody")
    assert Task.objects.count() == 0 and Tenant.objects.filter(name="t-main").exists()
