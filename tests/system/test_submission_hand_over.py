"""A submission hands admission to a worker: while another admitter holds the
admission lock, the request returns at once, and the worker admits the task
(a real Celery worker; no sweeper, so nothing else would admit it)."""
from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from tasks_app.machine import TaskStatus
from tasks_app.models import Task
from tasks_app.store.backends.postgres import ADMISSION_LOCK_KEY, LOCK_SQL
from tests.factories import submit
from tests.helpers import wait_for

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

SCRIPT = [{"final": {"ok": True}}]


def test_a_submission_hands_admission_to_a_worker_while_another_admitter_holds_the_lock(
        world, celery_workers):
    celery_workers.start(env={"TETHER_WORKER_SWEEP": "false"})
    held, release, released = threading.Event(), threading.Event(), threading.Event()

    def admitter() -> None:
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(LOCK_SQL, [ADMISSION_LOCK_KEY])
                held.set()
                release.wait(60)
        finally:
            released.set()
            connection.close()

    thread = threading.Thread(target=admitter)
    thread.start()
    try:
        assert held.wait(30)
        task = submit(world.tenant, SCRIPT)
        # the submission returned while the lock is still held: it did not wait for it
        assert not released.is_set()
        assert Task.objects.get(pk=task.pk).status == TaskStatus.CREATED
    finally:
        release.set()
        thread.join(30)

    done = wait_for(lambda: Task.objects.filter(pk=task.pk, status=TaskStatus.SUCCEEDED).first(),
                    timeout=60, message="the worker to admit and run the task")
    assert done.status == TaskStatus.SUCCEEDED, celery_workers.logs()
    stats = celery_workers.app.control.inspect(timeout=5).stats() or {}
    assert sum(s.get("total", {}).get("tasks_app.tasks.admit_tasks", 0)
               for s in stats.values()) >= 1
