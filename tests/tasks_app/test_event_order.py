"""An informational event written while a transition commits (a late worker,
a lease settled, a reassigned request) waits for it: its version is never
behind an event written before it (`store.events.event_note`). Found by the
network-cut chaos test, where a worker whose lease ran out wrote an event at
the version it had read, after the new owner's transition."""
from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from foundations.actors import SYSTEM
from tasks_app.machine import TaskStatus
from tasks_app.models import Event, Task
from tasks_app.services.admission import admit_created_tasks
from tasks_app.store.events import event_note
from tasks_app.store.tasks import task_transition
from tests.factories import submit
from tests.helpers import wait_for

pytestmark = [pytest.mark.django_db(transaction=True)]


def _waiting_on_a_lock(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid])
        row = cursor.fetchone()
    return bool(row and row[0] == "Lock")


def test_a_note_written_during_a_transition_takes_the_version_it_commits(world):
    if connection.vendor != "postgresql":
        pytest.skip("SQLite runs one writer at a time")
    task = submit(world.tenant, [{"final": {}}])
    admit_created_tasks()
    assert Task.objects.get(pk=task.pk).status == TaskStatus.RUNNING
    noted: dict[str, object] = {}

    def note() -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                noted["pid"] = cursor.fetchone()[0]  # type: ignore[index]
            noted["event"] = event_note(task_id=task.pk, type="lease_settled", actor=SYSTEM,
                                        payload={"note": "from a late worker"})
        finally:
            connection.close()

    with transaction.atomic():
        started = task_transition(task_id=task.pk, event="step_succeeded", actor=SYSTEM)
        writer = threading.Thread(target=note)
        writer.start()
        wait_for(lambda: "pid" in noted and _waiting_on_a_lock(int(noted["pid"])),  # type: ignore[arg-type]
                 timeout=10, message="the note to wait for the transition's lock")
    writer.join(timeout=10)

    events = list(Event.objects.filter(task_id=task.pk).order_by("id")
                  .values_list("type", "task_version"))
    assert events[-2:] == [("step_succeeded", started.version), ("lease_settled", started.version)]
    versions = [v for _, v in events]
    assert versions == sorted(versions)
