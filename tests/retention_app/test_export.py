"""Exports end to end, the job run as a worker runs it (the `manual` runner's
queue): a subject's export holds all and only its tasks (online and archived)
and memory; a tenant's holds its configuration, never a secret's value; only
admins ask, follow and download, another tenant's export is a 404, bad input
a 400; the row keeps no subject name; an expired file is deleted; an erasure
deletes the exports that may hold what it erased."""
from __future__ import annotations

import io
import json
import threading
import zipfile
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

from accounts_app.models import Role
from accounts_app.services.secrets import secret_create
from audit_app.models import AuditEntry
from foundations.actors import SYSTEM
from notify_app.services.subscriptions import webhook_create
from retention_app.export_jobs import MANUAL_EXPORTS
from retention_app.models import Export, ExportStatus
from retention_app.services.archive import archive_sweep
from retention_app.services.export import export_run, exports_sweep
from tasks_app.machine import TaskStatus
from tasks_app.models import Task
from tasks_app.services.demo import demo_agent_ensure
from tests.api.conftest import client_for
from tests.factories import TenantFactory, make_user, submit
from tests.helpers import drive, wait_for
from tests.retention_app.conftest import run_queued_exports
from tests.retention_app.markers import database_dump

pytestmark = [pytest.mark.system, pytest.mark.django_db(transaction=True)]

MARK_A, MARK_B = "zq-export-alpha-5521", "zq-export-beta-8830"
ALICE, BOB = f"cust-{MARK_A}", f"cust-{MARK_B}"


def _task(world: Any, subject: str, mark: str) -> int:
    task = submit(world.tenant, [{"tool": "lookup_order", "args": {"order_id": "A-1"}},
                                 {"final": {"reply": f"done for {mark}"}}],
                  goal=f"help {mark}", input={"note": mark}, subject=subject)
    return drive(task.pk).pk


def _remember(admin: Any, subject: str, mark: str) -> int:
    answer = admin.post("/api/v1/memory", {"scope": "subject", "subject": subject,
                                           "kind": "preference",
                                           "text": f"prefers store credit ({mark})"},
                        format="json")
    assert answer.status_code == 201, answer.content
    return answer.json()["id"]


def _exported(admin: Any, body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, bytes]]:
    """Ask, run the job, follow it to the end, download and open the file."""
    asked = admin.post("/api/v1/exports", body, format="json")
    assert asked.status_code == 202, asked.content
    export_id = asked.json()["id"]
    assert asked.json()["status"] == "queued" and asked.json()["download"] is None
    assert run_queued_exports() == ["done"]
    status = admin.get(f"/api/v1/exports/{export_id}").json()
    assert status["status"] == "done" and status["progress"] == 1.0, status
    download = admin.get(status["download"])
    assert download.status_code == 200
    assert download["Content-Type"] == "application/zip"
    content = b"".join(download.streaming_content)
    assert len(content) == status["size_bytes"]
    with zipfile.ZipFile(io.BytesIO(content)) as archive:
        return status, {name: archive.read(name) for name in archive.namelist()}


def _rows(files: dict[str, bytes], name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in files[name].splitlines()]


def test_a_subjects_export_holds_all_and_only_its_tasks_and_memory(world, export_dirs):
    admin = client_for(world.users["admin"])
    archived = {subject: _task(world, subject, mark) for subject, mark in
                ((ALICE, MARK_A), (BOB, MARK_B))}
    Task.objects.filter(pk__in=archived.values()).update(
        finished_at=timezone.now() - timedelta(days=40))
    assert archive_sweep().tasks == 2  # one file holds both subjects' tasks
    alice_online = _task(world, ALICE, MARK_A)
    waiting = submit(world.tenant, [{"ask": f"which order, {MARK_A}?"}], subject=ALICE)
    assert drive(waiting.pk).status == TaskStatus.WAITING_FOR_INPUT
    _task(world, BOB, MARK_B)
    _task(world, "", "no subject at all")
    alice_memory = _remember(admin, ALICE, MARK_A)
    _remember(admin, BOB, MARK_B)

    status, files = _exported(admin, {"scope": "subject", "subject": ALICE})

    tasks = _rows(files, "tasks.jsonl")
    exported = {row["task_id"] for row in tasks}
    assert exported == {archived[ALICE], alice_online, waiting.pk}
    kinds = {row["model"] for row in tasks}
    assert {"tasks_app.task", "tasks_app.step", "tasks_app.event",
            "tools_app.toolexecution"} <= kinds  # with the history, the ledger rows
    assert {row["fields"]["subject"] for row in tasks if row["model"] == "tasks_app.task"} == {
        ALICE}
    memory = _rows(files, "memory.jsonl")
    assert [row["pk"] for row in memory if row["model"] == "memory_app.memoryitem"] == [
        alice_memory]
    everything = b"".join(files.values()).decode()
    assert MARK_A in everything and MARK_B not in everything
    assert "no subject at all" not in everything
    assert "configuration.jsonl" not in files
    manifest = json.loads(files["manifest.json"])
    assert manifest["scope"] == "subject" and manifest["counts"]["tasks"] == 3
    assert status["tasks_total"] == status["tasks_done"] == 3
    assert status["counts"]["memory"] == len(memory)

    # Audited (who, scope, counts), and neither the row nor the entries name the subject.
    entries = AuditEntry.objects.filter(kind="export").order_by("id")
    assert [e.action for e in entries] == ["requested", "exported", "downloaded"]
    assert {e.actor for e in entries} == {world.users["admin"].username}
    assert Export.objects.get().subject == ""
    assert ALICE not in json.dumps(list(entries.values("name", "diff")))

    # Erasing the subject deletes its export's file with the rest.
    erased = admin.post("/api/v1/erasures", {"subject": ALICE}, format="json")
    assert erased.status_code == 200 and erased.json()["exports"] == 1
    assert not any(p.is_file() for p in export_dirs[1].rglob("*"))
    assert MARK_A not in database_dump()
    assert admin.get(f"/api/v1/exports/{status['id']}").status_code == 404


def test_a_tenant_export_holds_its_configuration_without_secret_values(world, export_dirs):
    admin = client_for(world.users["admin"])
    secret_value = "sk-live-zq-never-exported-3190"
    secret_create(tenant_id=world.tenant.pk, name="payments-key", value=secret_value,
                  actor=SYSTEM)
    hook = webhook_create(tenant_id=world.tenant.pk, url="http://127.0.0.1:9/hook",
                          events=["task_failed"], actor=SYSTEM)
    done = _task(world, ALICE, MARK_A)
    other = TenantFactory(name="t-other")
    demo_agent_ensure(other)
    submit(other, [{"final": {"ok": MARK_B}}], goal=f"other tenant {MARK_B}")

    status, files = _exported(admin, {"scope": "tenant"})

    configuration = _rows(files, "configuration.jsonl")
    by_model: dict[str, list[dict[str, Any]]] = {}
    for row in configuration:
        by_model.setdefault(row["model"], []).append(row)
    assert [r["fields"]["name"] for r in by_model["tasks_app.agentprofile"]] == ["support"]
    assert "lookup_order" in {r["fields"]["name"] for r in by_model["tools_app.tool"]}
    assert by_model["tasks_app.agentversion"]
    [secret] = by_model["accounts_app.tenantsecret"]
    assert secret["fields"]["name"] == "payments-key" and "ciphertext" not in secret["fields"]
    [webhook] = by_model["notify_app.webhooksubscription"]
    assert "secret_sealed" not in webhook["fields"]
    members = {tuple(r["fields"]["user"]) for r in by_model["accounts_app.membership"]}
    assert (world.users["admin"].username,) in members
    everything = b"".join(files.values()).decode()
    assert secret_value not in everything and hook.secret not in everything
    assert {row["task_id"] for row in _rows(files, "tasks.jsonl")} == {done}
    assert MARK_A in everything and MARK_B not in everything  # not the other tenant's
    assert _rows(files, "audit.jsonl")  # the tenant's audit log comes along
    assert status["counts"]["configuration"] == len(configuration)


def test_exports_are_admins_only_validated_and_tenant_scoped(world, export_dirs):
    admin = client_for(world.users["admin"])
    for role in (Role.REQUESTER, Role.REVIEWER, Role.OPERATOR):
        client = client_for(world.users[role])
        assert client.post("/api/v1/exports", {"scope": "tenant"},
                           format="json").status_code == 403
        assert client.get("/api/v1/exports").status_code == 403
    for body, field in (({"scope": "everything"}, "scope"), ({}, "scope"),
                        ({"scope": "subject"}, "subject"),
                        ({"scope": "subject", "subject": 42}, "subject"),
                        ({"scope": "tenant", "subject": "cust-1"}, "subject"),
                        ({"scope": "subject", "subject": "x" * 201}, "subject")):
        answer = admin.post("/api/v1/exports", body, format="json")
        assert answer.status_code == 400, (body, answer.content)
        assert field in answer.json()["error"]["details"], answer.json()
    assert not Export.objects.exists()  # nothing was queued by bad input

    asked = admin.post("/api/v1/exports", {"scope": "tenant"}, format="json").json()
    not_yet = admin.get(f"/api/v1/exports/{asked['id']}/download")
    assert not_yet.status_code == 409
    run_queued_exports()
    outsider = client_for(make_user(TenantFactory(name="t-other"), Role.ADMIN))
    for path in (f"/api/v1/exports/{asked['id']}", f"/api/v1/exports/{asked['id']}/download"):
        assert outsider.get(path).status_code == 404
    assert outsider.get("/api/v1/exports").json()["results"] == []
    assert [e["id"] for e in admin.get("/api/v1/exports").json()["results"]] == [asked["id"]]


def test_an_expired_export_file_is_deleted_by_the_sweep(world, export_dirs):
    admin = client_for(world.users["admin"])
    asked = admin.post("/api/v1/exports", {"scope": "tenant"}, format="json").json()
    run_queued_exports()
    export = Export.objects.get(pk=asked["id"])
    assert (export_dirs[1] / export.name).is_file()
    assert export.expires_at > timezone.now() + timedelta(hours=71)  # the default: 72 hours

    Export.objects.filter(pk=export.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert exports_sweep() == 1

    assert not (export_dirs[1] / export.name).exists()
    assert admin.get(f"/api/v1/exports/{export.pk}").json()["status"] == ExportStatus.EXPIRED
    assert admin.get(f"/api/v1/exports/{export.pk}/download").status_code == 410


def test_the_sweep_hands_over_again_an_export_lost_on_the_way(world, export_dirs):
    """A queued export no worker took (a lost broker message), and a running one
    whose job stopped reporting (a killed worker), are handed over again."""
    admin = client_for(world.users["admin"])
    lost = admin.post("/api/v1/exports", {"scope": "tenant"}, format="json").json()["id"]
    stalled = admin.post("/api/v1/exports", {"scope": "tenant"}, format="json").json()["id"]
    MANUAL_EXPORTS.clear()  # neither message reached a worker
    long_ago = timezone.now() - timedelta(minutes=11)
    Export.objects.filter(pk=lost).update(heartbeat_at=long_ago)
    Export.objects.filter(pk=stalled).update(status=ExportStatus.RUNNING, heartbeat_at=long_ago)
    assert exports_sweep() == 0
    assert list(MANUAL_EXPORTS) == [lost]  # the stalled one is queued again, handed next time
    assert Export.objects.get(pk=stalled).status == ExportStatus.QUEUED
    Export.objects.filter(pk=stalled).update(heartbeat_at=long_ago)
    exports_sweep()
    assert run_queued_exports() == ["done", "done"]
    exports_sweep()
    assert not MANUAL_EXPORTS  # nothing left to hand over



def test_a_run_given_up_on_discards_its_own_file(world, export_dirs):
    """A run held up past its heartbeat is queued again by the sweep and taken by
    another run; the first, when it finishes, records nothing and deletes its own file."""
    admin = client_for(world.users["admin"])
    export_id = admin.post("/api/v1/exports", {"scope": "tenant"}, format="json").json()["id"]
    MANUAL_EXPORTS.clear()
    outcome: list[str] = []

    def run() -> None:
        try:
            outcome.append(export_run(export_id))
        finally:
            connection.close()  # this thread's own

    first = threading.Thread(target=run)
    with transaction.atomic(), connection.cursor() as cursor:
        # The first run takes the export, then waits on the tasks table.
        cursor.execute(f"LOCK TABLE {Task._meta.db_table} IN ACCESS EXCLUSIVE MODE")
        first.start()
        wait_for(lambda: Export.objects.get(pk=export_id).status == ExportStatus.RUNNING,
                 timeout=10, message="the first run to take the export")
        wait_for(lambda: _waiting_on_a_lock(cursor), timeout=10,
                 message="the first run to wait on the tasks table")
        # Meanwhile it was given up on and another run took the export.
        Export.objects.filter(pk=export_id).update(started_at=timezone.now())
    first.join(30)

    assert outcome == ["discarded"]
    assert not any(p.is_file() for p in export_dirs[1].rglob("*"))
    export = Export.objects.get(pk=export_id)
    assert export.status == ExportStatus.RUNNING and export.name == ""  # the other run's


def _waiting_on_a_lock(cursor: Any) -> bool:
    cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                   "AND datname = current_database()")
    return cursor.fetchone()[0] > 0
