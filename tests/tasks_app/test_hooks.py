"""The runtime's hooks for other apps: event hooks run in the transaction of
every commit, whichever backend writes it, and a sweep hook that fails does not
stop the sweep or the hooks after it."""
from __future__ import annotations

import pytest
from django.db import connection

from tasks_app.machine import TaskStatus
from tasks_app.models import Event, Step, Task
from tasks_app.runner.recovery import recovery_sweep
from tasks_app.store import hooks
from tests.factories import submit
from tests.helpers import drive

SCRIPT = [{"tool": "lookup_order", "args": {"order_id": "A-1"}}, {"final": {"ok": True}}]


@pytest.mark.django_db(transaction=True)
def test_a_hook_sees_every_commit_in_its_transaction_on_either_database(world):
    """The runner's commits are one statement on PostgreSQL: with a hook
    registered for their type, the hook still runs, inside the commit's
    transaction, seeing the rows the commit wrote (as with the ORM)."""
    seen: list[tuple[str, int, int]] = []

    def hook(event: Event) -> None:
        assert connection.in_atomic_block
        seen.append((event.type, event.task_version,
                     Step.objects.filter(task_id=event.task_id).count()))

    types = ["decision_recorded", "step_succeeded", "final_accepted"]
    hooks.on_event_appended(types, hook)
    try:
        done = drive(submit(world.tenant, SCRIPT).pk)
    finally:
        for type_ in types:
            hooks._event_hooks[type_].remove(hook)
    assert done.status == TaskStatus.SUCCEEDED
    assert seen == [("decision_recorded", 1, 1), ("step_succeeded", 2, 1),
                    ("final_accepted", 3, 2)]


@pytest.mark.django_db(transaction=True)
def test_a_failing_hook_rolls_the_commit_back_on_either_database(world):
    def refuse(event: Event) -> None:
        raise RuntimeError("refused by a hook")

    hooks.on_event_appended(["final_accepted"], refuse)
    try:
        task = submit(world.tenant, [{"final": {"ok": True}}])
        drive(task.pk)  # the runner takes the error as the step's (it fails in the end)
    finally:
        hooks._event_hooks["final_accepted"].remove(refuse)
    task = Task.objects.get(pk=task.pk)
    assert task.status != TaskStatus.SUCCEEDED and task.result is None
    assert not Step.objects.filter(task_id=task.pk, kind="final", status="SUCCEEDED").exists()
    assert not Event.objects.filter(task_id=task.pk, type="final_accepted").exists()


@pytest.mark.django_db
def test_a_failing_sweep_hook_does_not_stop_the_sweep() -> None:
    ran: list[str] = []

    def broken() -> None:
        raise RuntimeError("boom")

    def after() -> None:
        ran.append("after")

    hooks.on_sweep(broken)
    hooks.on_sweep(after)
    try:
        report = recovery_sweep()
    finally:
        hooks._sweep_hooks.remove(broken)
        hooks._sweep_hooks.remove(after)
    assert ran == ["after"] and report.requeued == 0
