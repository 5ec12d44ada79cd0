"""The archive sweep end to end, in-process: exactly the finished tasks past
their tenant's retention leave the online tables for an archive file; an
archived id answers 410 with where it went; an operator restores one row for
row; every crash point of a pass (file written, not indexed; indexed, not
deleted) is finished by the next pass, with no task lost or archived twice."""
from __future__ import annotations

import gzip
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core import serializers
from django.utils import timezone

from retention_app.models import ArchivedTask, ArchiveFile
from retention_app.services import archive as archive_module
from retention_app.services.archive import archive_sweep
from retention_app.services.restore import task_restore
from tasks_app.machine import TaskStatus
from tasks_app.models import Event, Step, Task
from tests.api.conftest import client_for
from tests.factories import TenantFactory, submit
from tests.helpers import drive
from tools_app.models import ToolExecution

pytestmark = pytest.mark.django_db

SCRIPT = [{"tool": "lookup_order", "args": {"order_id": "A-1"}}, {"final": {"ok": True}}]


def _finished(world: Any, n: int, *, days_ago: int) -> list[int]:
    ids = []
    for i in range(n):
        task = drive(submit(world.tenant, SCRIPT, goal=f"old {i}").pk)
        assert task.status == TaskStatus.SUCCEEDED
        ids.append(task.pk)
    Task.objects.filter(pk__in=ids).update(
        finished_at=timezone.now() - timedelta(days=days_ago))
    return ids


def _rows_of(task_id: int) -> list[dict[str, Any]]:
    """The task's rows as the serializer writes them: what a restore must give back."""
    objects = [*Task.objects.filter(pk=task_id), *Step.objects.filter(task_id=task_id),
               *Event.objects.filter(task_id=task_id),
               *ToolExecution.objects.filter(task_id=task_id)]
    return sorted(json.loads(serializers.serialize("json", objects)),
                  key=lambda row: (row["model"], row["pk"]))


def _archived_ids(archive_dir: Path) -> list[int]:
    """Every task id in every file of the archive, once per file it is in."""
    ids: list[int] = []
    for path in sorted(archive_dir.rglob("*.jsonl.gz")):
        rows = [json.loads(line) for line in gzip.decompress(path.read_bytes()).splitlines()]
        ids += [row["pk"] for row in rows if row["model"] == "tasks_app.task"]
    return ids


def test_exactly_the_tasks_past_retention_are_archived_and_deleted(world, archive_dir, settings):
    settings.TETHER = {**settings.TETHER, "RETENTION_DAYS": 30, "ARCHIVE_BATCH": 2,
                       "ARCHIVE_DELETE_BATCH": 1}
    old = _finished(world, 3, days_ago=31)
    recent = _finished(world, 2, days_ago=29)
    running = submit(world.tenant, SCRIPT).pk  # not finished: never archived
    Task.objects.filter(pk=running).update(finished_at=timezone.now() - timedelta(days=90))
    assert ToolExecution.objects.filter(task_id__in=old).count() == 3

    report = archive_sweep()

    assert report.tasks == 3 and report.files == 2 and report.deleted == 3
    assert not Task.objects.filter(pk__in=old).exists()
    assert not Step.objects.filter(task_id__in=old).exists()
    assert not Event.objects.filter(task_id__in=old).exists()
    assert not ToolExecution.objects.filter(task_id__in=old).exists()
    assert set(Task.objects.filter(pk__in=[*recent, running]).values_list("pk", flat=True)) == {
        *recent, running}
    assert sorted(_archived_ids(archive_dir)) == old
    files = list(ArchiveFile.objects.order_by("pk"))
    assert [f.tasks for f in files] == [2, 1]
    assert all(f.name.startswith(f"{world.tenant.name}/") for f in files)
    assert archive_sweep().tasks == 0  # nothing twice


def test_a_tenants_shorter_retention_applies_to_it_alone(world, archive_dir, settings):
    settings.TETHER = {**settings.TETHER, "RETENTION_DAYS": 30}
    admin = client_for(world.users["admin"])
    assert admin.put("/api/v1/retention", {"days": 5}, format="json").status_code == 200
    ten_days = _finished(world, 2, days_ago=10)
    other = TenantFactory(name="t-other")
    foreign = Task.objects.filter(pk__in=_finished(world, 1, days_ago=10))
    foreign.update(tenant=other)  # the other tenant keeps the default, 30 days
    assert archive_sweep().tasks == 2
    assert set(ArchivedTask.objects.values_list("task_id", flat=True)) == set(ten_days)


def test_retention_is_bounded_and_only_admins_set_it(world, archive_dir, settings):
    settings.TETHER = {**settings.TETHER, "RETENTION_DAYS": 30, "RETENTION_MAX_DAYS": 90}
    admin = client_for(world.users["admin"])
    too_long = admin.put("/api/v1/retention", {"days": 91}, format="json")
    assert too_long.status_code == 400 and "days" in too_long.json()["error"]["details"]
    assert admin.put("/api/v1/retention", {"days": "x"}, format="json").status_code == 400
    assert admin.get("/api/v1/retention").json() == {
        "days": 30, "own": False, "default_days": 30, "max_days": 90}
    operator = client_for(world.users["operator"])
    assert operator.put("/api/v1/retention", {"days": 10}, format="json").status_code == 403
    assert admin.put("/api/v1/retention", {"days": 10}, format="json").json()["days"] == 10
    assert admin.put("/api/v1/retention", {"days": None}, format="json").json()["own"] is False


def test_an_archived_task_answers_410_with_its_archive_and_is_restored_row_for_row(
        world, archive_dir, settings):
    settings.TETHER = {**settings.TETHER, "RETENTION_DAYS": 30}
    [task_id] = _finished(world, 1, days_ago=40)
    before = _rows_of(task_id)
    archive_sweep()
    reader = client_for(world.users["operator"])
    answer = reader.get(f"/api/v1/tasks/{task_id}")
    assert answer.status_code == 410
    error = answer.json()["error"]
    assert error["code"] == "task_archived"
    assert error["details"]["archive"] == ArchiveFile.objects.get().name
    other = TenantFactory(name="t-other")
    from tests.factories import make_user
    stranger = client_for(make_user(other, "admin"))
    assert stranger.get(f"/api/v1/tasks/{task_id}").status_code == 404

    assert task_restore(task_id) > 3
    assert _rows_of(task_id) == before
    assert reader.get(f"/api/v1/tasks/{task_id}").status_code == 200
    assert archive_sweep().tasks == 0  # a restored task stays online


def test_a_pass_that_died_after_writing_leaves_no_duplicate(world, archive_dir, settings,
                                                            monkeypatch):
    """Killed between the file and its index: the next pass removes the orphan
    file and archives the tasks once."""
    settings.TETHER = {**settings.TETHER, "RETENTION_DAYS": 30, "ARCHIVE_BATCH": 2}
    ids = _finished(world, 3, days_ago=40)

    def die(*args: Any, **kwargs: Any) -> Any:
        raise SystemExit("killed after writing")

    monkeypatch.setattr(archive_module.ArchiveFile.objects, "create", die)
    with pytest.raises(SystemExit):
        archive_sweep()
    monkeypatch.undo()
    assert len(list(archive_dir.rglob("*.jsonl.gz"))) == 1 and not ArchivedTask.objects.exists()

    report = archive_sweep()
    assert len(report.orphans_removed) + report.files >= 2
    assert sorted(_archived_ids(archive_dir)) == ids  # each once
    assert not Task.objects.filter(pk__in=ids).exists()


def test_a_pass_that_died_before_deleting_is_finished_by_the_next(world, archive_dir, settings,
                                                                  monkeypatch):
    settings.TETHER = {**settings.TETHER, "RETENTION_DAYS": 30}
    ids = _finished(world, 2, days_ago=40)
    monkeypatch.setattr(archive_module, "_delete_indexed_online", lambda: 0)
    archive_sweep()
    monkeypatch.undo()
    assert Task.objects.filter(pk__in=ids).count() == 2  # indexed, still online
    report = archive_sweep()
    assert report.deleted == 2 and report.files == 0
    assert not Task.objects.filter(pk__in=ids).exists()
    assert sorted(_archived_ids(archive_dir)) == ids


def test_a_file_that_does_not_match_its_checksum_is_not_restored(world, archive_dir, settings):
    settings.TETHER = {**settings.TETHER, "RETENTION_DAYS": 30}
    [task_id] = _finished(world, 1, days_ago=40)
    archive_sweep()
    path = next(archive_dir.rglob("*.jsonl.gz"))
    path.write_bytes(gzip.compress(b"{}\n"))
    from foundations.errors import DomainError
    with pytest.raises(DomainError) as refused:
        task_restore(task_id)
    assert refused.value.code == "archive_corrupt"
    assert not Task.objects.filter(pk=task_id).exists()
