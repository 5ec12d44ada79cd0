"""The task lease: one executor at a time advances a RUNNING task; a lease
that expired (its executor died) can be taken over; releasing is the owner's."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from foundations.actors import SYSTEM
from tasks_app.models import Task
from tasks_app.services.admission import admit_created_tasks
from tasks_app.services.tasks import task_cancel
from tasks_app.store.leases import lease_release, lease_take
from tests.factories import submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def running(world, django_capture_on_commit_callbacks):  # type: ignore[no-untyped-def]
    with django_capture_on_commit_callbacks(execute=True):  # admission
        task = submit(world.tenant, [{"final": {"ok": True}}])
    admit_created_tasks()
    return task


def _lease(task: Task) -> tuple[str, object]:
    row = Task.objects.values_list("lease_owner", "lease_expires_at").get(pk=task.pk)
    return row[0], row[1]


def test_a_free_lease_is_taken_and_another_executor_is_refused(running):
    assert lease_take(task_id=running.pk, owner="a")
    owner, until = _lease(running)
    assert owner == "a" and until > timezone.now()

    assert not lease_take(task_id=running.pk, owner="b")
    assert _lease(running)[0] == "a"
    assert lease_take(task_id=running.pk, owner="a")  # its own lease: taken again


def test_an_expired_lease_is_taken_over(running):
    assert lease_take(task_id=running.pk, owner="a")
    expired = timezone.now() - timedelta(seconds=1)
    Task.objects.filter(pk=running.pk).update(lease_expires_at=expired)

    assert lease_take(task_id=running.pk, owner="b")
    assert _lease(running)[0] == "b"


def test_only_a_running_task_is_leased(world, running):
    created = submit(world.tenant, [{"final": {}}])
    Task.objects.filter(pk=created.pk).update(status="CREATED")  # not admitted
    assert not lease_take(task_id=created.pk, owner="a")

    task_cancel(task_id=running.pk, actor=SYSTEM, reason="stop")
    assert not lease_take(task_id=running.pk, owner="a")
    assert _lease(running) == ("", None)


def test_release_is_the_owners_and_sets_when_the_task_is_due(running):
    assert lease_take(task_id=running.pk, owner="a")
    lease_release(task_id=running.pk, owner="b")  # not b's: nothing changes
    assert _lease(running)[0] == "a"

    due = timezone.now() + timedelta(seconds=5)
    lease_release(task_id=running.pk, owner="a", next_run_at=due)
    assert _lease(running) == ("", None)
    assert Task.objects.get(pk=running.pk).next_run_at == due


def test_taking_the_lease_returns_the_row_as_the_orm_reads_it(running):
    """The slice's first step uses this row instead of reading the task again."""
    taken = lease_take(task_id=running.pk, owner="a")
    fresh = Task.objects.get(pk=running.pk)

    assert taken is not None
    fields = [f.attname for f in Task._meta.concrete_fields]
    assert {f: getattr(taken, f) for f in fields} == {f: getattr(fresh, f) for f in fields}
    assert taken.lease_owner == "a" and isinstance(taken.agent_snapshot, dict)
