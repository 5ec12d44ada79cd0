"""The archive sweep killed -9 mid-pass (`manage.py archive_tasks` in a process
of its own), then run again: every task past retention is archived exactly
once (one index row, in exactly one file of the archive) and none is left
online; no file of the archive is left that the index does not name."""

from __future__ import annotations

import gzip
import json
import sys
from collections import Counter
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from retention_app.models import ArchivedTask, ArchiveFile
from tasks_app.models import Task
from tests.factories import submit
from tests.helpers import drive, wait_for
from tests.processes import _base_env, _spawn, database_url

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

TASKS = 60
SCRIPT = [{"tool": "lookup_order", "args": {"order_id": "A-1"}}, {"final": {"ok": True}}]


def _archive_pass(tmp_path, name: str):  # type: ignore[no-untyped-def]
    env = {**_base_env(), "DJANGO_SETTINGS_MODULE": "tests.settings",
           "DATABASE_URL": database_url(connection.settings_dict),
           "TETHER_ARCHIVE_DIR": str(tmp_path / "archive"), "TETHER_RETENTION_DAYS": "30",
           "TETHER_ARCHIVE_BATCH": "2", "TETHER_ARCHIVE_DELETE_BATCH": "1"}
    return _spawn(name, [sys.executable, "manage.py", "archive_tasks"], env=env,
                  log_dir=tmp_path)


def test_a_pass_killed_mid_batch_is_finished_by_the_next_with_no_task_twice(world, tmp_path):
    ids = [drive(submit(world.tenant, SCRIPT, goal=f"old {i}").pk).pk for i in range(TASKS)]
    Task.objects.filter(pk__in=ids).update(finished_at=timezone.now() - timedelta(days=40))

    first = _archive_pass(tmp_path, "archive-1")
    wait_for(lambda: ArchivedTask.objects.count() >= 6 or not first.alive(), timeout=120,
             interval=0.01, message="the first pass to index a few batches")
    first.kill()
    indexed_at_kill = ArchivedTask.objects.count()
    assert indexed_at_kill < TASKS, "the pass ended before it could be killed"

    second = _archive_pass(tmp_path, "archive-2")
    wait_for(lambda: not second.alive(), timeout=120, message="the second pass to end")
    assert second.popen.returncode == 0, second.log_tail()
    report = json.loads(second.log_tail().strip().splitlines()[-1])
    assert report["tasks"] == TASKS - indexed_at_kill

    assert not Task.objects.filter(pk__in=ids).exists()
    assert sorted(ArchivedTask.objects.values_list("task_id", flat=True)) == ids
    in_files: Counter[int] = Counter()
    names = set(ArchiveFile.objects.values_list("name", flat=True))
    for path in (tmp_path / "archive").rglob("*.jsonl.gz"):
        assert str(path.relative_to(tmp_path / "archive")) in names, f"{path} is not indexed"
        for line in gzip.decompress(path.read_bytes()).splitlines():
            row = json.loads(line)
            if row["model"] == "tasks_app.task":
                in_files[row["pk"]] += 1
    assert in_files == Counter({task_id: 1 for task_id in ids})
