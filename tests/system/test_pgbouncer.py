"""The runner behind PgBouncer in transaction mode (`TETHER_DB_POOLER=transaction`).

Workers reach the test database only through a PgBouncer of the test's own
(tests/processes.py), with fewer server connections than clients, so one
client's consecutive transactions land on different server connections: a
statement prepared on the server, or a lock held by the session, would be
lost or stranded there. With the pooler setting the runner prepares nothing
and holds no lock beyond a transaction (the recovery sweep's lock among
them): a hundred tasks under a worker killed mid-run all end, each write made
once, and a cancel still fences every call in flight.
"""

from __future__ import annotations

import pytest

from foundations.actors import SYSTEM
from tasks_app.machine import TaskStatus
from tasks_app.models import Event, SweepRun, Task
from tasks_app.services.tasks import task_cancel_many
from tests.helpers import wait_for
from tests.system.io_world import (
    ONE_PROCESS,
    ROOMY,
    TOOL_CALLS,
    all_ended,
    assert_done_once,
    in_flight,
    submit_io,
)

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def pooled(pgbouncer, settings):  # type: ignore[no-untyped-def]
    """What a worker behind the pooler runs with."""
    return {**ROOMY, "DATABASE_URL": pgbouncer.url(settings.DATABASES["default"]["NAME"]),
            "TETHER_DB_POOLER": "transaction"}


def test_kill_9_behind_the_pooler_loses_no_task_and_repeats_no_write(
    io_world, edge, celery_workers, pooled
):
    edge.hold("tool")
    first = celery_workers.start(**ONE_PROCESS, env=pooled)
    ids = submit_io(io_world, 100)
    wait_for(lambda: in_flight(edge, "tool", 100), timeout=120,
             message="100 tool calls in flight")
    first.kill()
    edge.release("tool")
    wait_for(lambda: edge.snapshot()["tool_in_flight"] == 0, timeout=30,
             message="the orphaned calls to finish downstream")
    sweeps_before = SweepRun.objects.count()
    celery_workers.start(env=pooled)
    celery_workers.start(env=pooled)
    tasks = wait_for(lambda: all_ended(ids), timeout=240, message="every task to end")
    assert_done_once(tasks, edge)
    assert edge.snapshot()["tool_calls"] == 100 * TOOL_CALLS
    # The lost tasks came back through the sweep, which ran behind the pooler.
    assert SweepRun.objects.count() > sweeps_before
    assert not Task.objects.filter(pk__in=ids).exclude(lease_owner="").exists()


def test_a_cancel_behind_the_pooler_fences_every_callin_flight(
    io_world, edge, celery_workers, pooled
):
    edge.hold("tool")
    celery_workers.start(**ONE_PROCESS, env=pooled)
    ids = submit_io(io_world, 30)
    wait_for(lambda: in_flight(edge, "tool", 30), timeout=120, message="30 tool calls in flight")
    assert task_cancel_many(task_ids=ids, actor=SYSTEM)["canceled"] == ids
    edge.release("tool")
    wait_for(lambda: Event.objects.filter(task_id__in=ids, type="result_discarded").count() == 30,
             timeout=120, message="every late result to be discarded")
    assert set(Task.objects.filter(pk__in=ids).values_list("status", flat=True)) == {
        TaskStatus.CANCELED}
