"""Erasure of a subject: afterwards no database row (a dump of the whole test
database is searched), no archive file and no API answer holds the subject's
marker strings; another subject's tasks and memory are untouched; the audit
entry says what happened, with counts, and names the subject by a digest."""
from __future__ import annotations

import gzip
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from audit_app.models import AuditEntry
from memory_app.models import MemoryItem
from retention_app.models import ArchivedTask, ArchiveFile
from retention_app.services.archive import archive_sweep
from tasks_app.machine import TaskStatus
from tasks_app.models import Task
from tests.api.conftest import client_for
from tests.factories import submit
from tests.helpers import drive
from tests.retention_app.markers import database_dump

pytestmark = [pytest.mark.system, pytest.mark.django_db(transaction=True)]

MARK = "zq-erase-marker-7731"  # in the subject, goals, inputs, outputs and memory
SUBJECT = f"customer-{MARK}"


@pytest.fixture
def archive_dir(archive_dir: Path, settings: Any) -> Path:
    """The package's archive directory, with a retention this module's tasks pass."""
    settings.TETHER = {**settings.TETHER, "RETENTION_DAYS": 30}
    return archive_dir


def _task(world: Any, subject: str, *, final: dict[str, Any]) -> int:
    task = submit(world.tenant, [{"tool": "lookup_order", "args": {"order_id": "A-1"}},
                                 {"final": final}],
                  goal=f"help {subject}", input={"note": subject}, subject=subject)
    return drive(task.pk).pk


def _archive_text(archive_dir: Path) -> str:
    return "".join(gzip.decompress(p.read_bytes()).decode() for p in archive_dir.rglob("*.gz"))


def test_an_erased_subject_is_nowhere(world, archive_dir):
    admin = client_for(world.users["admin"])
    archived = _task(world, SUBJECT, final={"reply": f"done for {MARK}"})
    Task.objects.filter(pk=archived).update(finished_at=timezone.now() - timedelta(days=40))
    kept_archived = _task(world, "someone-else", final={"reply": "kept"})
    Task.objects.filter(pk=kept_archived).update(finished_at=timezone.now() - timedelta(days=40))
    assert archive_sweep().tasks == 2  # one file holds both
    online = _task(world, SUBJECT, final={"reply": f"online {MARK}"})
    waiting = submit(world.tenant, [{"ask": f"which order, {MARK}?"}], subject=SUBJECT,
                     goal=f"ask {MARK}")
    assert drive(waiting.pk).status == TaskStatus.WAITING_FOR_INPUT
    other = _task(world, "someone-else", final={"reply": "kept online"})
    remembered = admin.post("/api/v1/memory", {
        "scope": "subject", "subject": SUBJECT, "kind": "preference",
        "text": f"refunds go to store credit ({MARK})"}, format="json")
    assert remembered.status_code == 201
    assert admin.post("/api/v1/memory", {"scope": "subject", "subject": "someone-else",
                                          "kind": "fact", "text": "kept"},
                      format="json").status_code == 201
    assert MARK in database_dump() and MARK in _archive_text(archive_dir)

    answer = admin.post("/api/v1/erasures", {"subject": SUBJECT}, format="json")

    assert answer.status_code == 200, answer.content
    counts = answer.json()
    assert counts["canceled"] == 1 and counts["tasks"] == 2 and counts["archived_tasks"] == 1
    assert counts["memory"]["items"] == 1
    assert MARK not in database_dump()
    assert MARK not in _archive_text(archive_dir)
    for task_id in (archived, online, waiting.pk):
        assert admin.get(f"/api/v1/tasks/{task_id}").status_code == 404
    assert MARK not in admin.get("/api/v1/tasks").content.decode()
    assert MARK not in admin.get("/api/v1/audit").content.decode()
    # the rest is untouched, the archive still consistent
    assert Task.objects.filter(pk=other).exists()
    assert MemoryItem.objects.filter(text="kept").exists()
    assert list(ArchivedTask.objects.values_list("task_id", flat=True)) == [kept_archived]
    assert ArchiveFile.objects.get().tasks == 1
    assert admin.get(f"/api/v1/tasks/{kept_archived}").status_code == 410
    entry = AuditEntry.objects.get(kind="erasure")
    assert entry.name.startswith("subject:sha256:") and entry.actor == world.users["admin"].username


def test_erasure_input_is_validated_and_admins_only(world, archive_dir):
    admin = client_for(world.users["admin"])
    assert admin.post("/api/v1/erasures", {}, format="json").status_code == 400
    too_long = admin.post("/api/v1/erasures", {"subject": "x" * 201}, format="json")
    assert too_long.status_code == 400 and "subject" in too_long.json()["error"]["details"]
    operator = client_for(world.users["operator"])
    assert operator.post("/api/v1/erasures", {"subject": "s"}, format="json").status_code == 403
    assert not AuditEntry.objects.filter(kind="erasure").exists()
