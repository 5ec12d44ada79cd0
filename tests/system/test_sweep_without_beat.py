"""Recovery without `celery beat`: every worker process sweeps on its own timer
under a PostgreSQL advisory lock (tasks_app/runner/sweeper.py).

Real worker processes, no beat. A task whose message was lost (RUNNING, its
lease expired, nothing in the broker) is finished; an approval past its SLA
expires; sweeps never overlap
(`SweepRun`, database clock); while somebody else holds the lock, the workers
knock and none sweeps.
"""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest
from django.db import connection
from django.utils import timezone

from approvals_app.models import Approval, Decision
from foundations.deployment_locks import LOCK_CONNECTION_NAME
from tasks_app.machine import TaskStatus
from tasks_app.models import SweepRun, Task
from tasks_app.runner.sweeper import SWEEP_LOCK_KEY
from tasks_app.services.admission import admit_created_tasks
from tests.factories import submit
from tests.helpers import wait_for
from tests.processes import purge_broker
from tests.system.history import assert_history_intact

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

SCRIPT = [{"tool": "lookup_order", "args": {"order_id": "A-1"}}, {"final": {"ok": True}}]
REFUND = [{"tool": "issue_refund", "args": {"order_id": "A-1", "amount_cents": 100,
                                            "reason": "damaged"}},
          {"final": {"refunded": 100}}]


def _lost_task(world, celery_workers):  # type: ignore[no-untyped-def]
    """A RUNNING task whose worker died holding the lease and whose message is gone."""
    task = submit(world.tenant, SCRIPT)
    admit_created_tasks()  # as a worker would (the submission asked one to)
    purge_broker(celery_workers.broker_url, celery_workers.queue)
    Task.objects.filter(pk=task.pk).update(
        lease_owner="ghost-worker", lease_expires_at=timezone.now() - timedelta(seconds=1))
    task = Task.objects.get(pk=task.pk)
    assert task.status == TaskStatus.RUNNING
    return task


def _succeeded(task_id: int) -> bool:
    return Task.objects.get(pk=task_id).status == TaskStatus.SUCCEEDED


def _assert_no_overlap() -> None:
    runs = list(SweepRun.objects.exclude(finished_at=None).order_by("started_at"))
    for earlier, later in zip(runs, runs[1:], strict=False):
        assert earlier.finished_at <= later.started_at, (earlier.owner, later.owner)


def _sweeper_pids() -> set[int]:
    return {int(owner.split(":")[1]) for owner in SweepRun.objects.values_list("owner", flat=True)}


def test_a_lost_task_is_finished_by_the_workers_own_sweepers(world, celery_workers):
    task = _lost_task(world, celery_workers)
    mains = {celery_workers.start(concurrency=2).pid, celery_workers.start(concurrency=2).pid}

    wait_for(lambda: _succeeded(task.pk), timeout=60, message="the lost task to finish")
    assert_history_intact(Task.objects.get(pk=task.pk))
    # Several processes take turns (owner is host:pid:thread), never at once.
    wait_for(lambda: len({r.rsplit(":", 1)[0] for r in SweepRun.objects.values_list(
        "owner", flat=True)}) >= 2, timeout=60, message="sweeps by two processes")
    _assert_no_overlap()
    assert SweepRun.objects.filter(requeued__gte=1).exists()
    assert not _sweeper_pids() & mains  # prefork: the pool processes sweep, not the main one

    # Approvals expire without beat too.
    waiting = submit(world.tenant, REFUND)
    wait_for(lambda: Approval.objects.filter(task_id=waiting.pk).exists(), timeout=60,
             message="the refund to ask for approval")
    Approval.objects.filter(task_id=waiting.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1))
    wait_for(lambda: Approval.objects.get(task_id=waiting.pk).status == Decision.EXPIRED,
             timeout=60, message="the approval to expire")
    # (the sweep's record is written after its work commits)
    wait_for(lambda: SweepRun.objects.filter(approvals_expired__gte=1).exists(), timeout=30,
             message="the sweep that expired it to be recorded")


def test_a_solo_worker_sweeps_in_its_main_process(world, celery_workers):
    task = _lost_task(world, celery_workers)
    main = celery_workers.start(pool="solo", concurrency=1).pid
    wait_for(lambda: _succeeded(task.pk), timeout=60, message="the lost task to finish")
    assert _sweeper_pids() == {main}


def test_no_worker_sweeps_while_the_lock_is_held(world, celery_workers):
    params = connection.get_connection_params()
    holder = psycopg.connect(
        host=params.get("host"), port=params.get("port"), user=params.get("user"),
        password=params.get("password"), dbname=params["dbname"], autocommit=True)
    try:
        holder.execute("SELECT pg_advisory_lock(%s)", [SWEEP_LOCK_KEY])
        task = _lost_task(world, celery_workers)
        celery_workers.start(concurrency=2)
        celery_workers.start(concurrency=2)

        def knockers() -> set[int]:
            rows = holder.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                " AND application_name = %s", [LOCK_CONNECTION_NAME]).fetchall()
            return {pid for (pid,) in rows}

        # Two workers have connected for the lock (and been refused it).
        wait_for(lambda: len(knockers()) >= 2, timeout=60, message="two sweepers to knock")
        assert not SweepRun.objects.exists()
        assert Task.objects.get(pk=task.pk).status == TaskStatus.RUNNING
        assert Task.objects.get(pk=task.pk).lease_owner == "ghost-worker"

        holder.execute("SELECT pg_advisory_unlock(%s)", [SWEEP_LOCK_KEY])
        wait_for(lambda: _succeeded(task.pk), timeout=60, message="the lost task to finish")
        _assert_no_overlap()
    finally:
        holder.close()
