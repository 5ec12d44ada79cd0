"""Admission: CREATED tasks start first come, first served, within the global,
per-tenant and per-agent limits; a slot freed by a task that ends is taken by
the next one waiting."""

from __future__ import annotations

import pytest
from django.db import transaction

from tasks_app.machine import TaskStatus
from tasks_app.models import AgentProfile, Task
from tasks_app.services.actors import SYSTEM
from tasks_app.services.admission import admit_created_tasks
from tasks_app.services.demo import demo_agent_ensure, demo_tools_ensure
from tasks_app.services.tasks import task_cancel
from tests.factories import TenantFactory, submit

SCRIPT = [{"final": {}}]


def _statuses(tasks: list[Task]) -> list[str]:
    return [Task.objects.get(pk=t.pk).status for t in tasks]


@pytest.fixture
def limits(settings):  # type: ignore[no-untyped-def]
    def set_limits(**limits: int) -> None:
        settings.TETHER = {**settings.TETHER, **limits}

    return set_limits


@pytest.mark.django_db(transaction=True)
def test_the_tenant_limit_admits_in_submission_order_and_a_freed_slot_goes_to_the_next(
        world, limits):
    limits(MAX_RUNNING_PER_TENANT=2)
    tasks = [submit(world.tenant, SCRIPT, goal=f"g{i}") for i in range(4)]

    assert _statuses(tasks) == ["RUNNING", "RUNNING", "CREATED", "CREATED"]

    task_cancel(task_id=tasks[0].pk, actor=SYSTEM, reason="make room")

    assert _statuses(tasks) == ["CANCELED", "RUNNING", "RUNNING", "CREATED"]


@pytest.mark.django_db(transaction=True)
def test_a_full_tenant_does_not_hold_back_another_tenant(world, limits):
    limits(MAX_RUNNING_PER_TENANT=1)
    other = TenantFactory(name="t-other")
    demo_tools_ensure(other)
    demo_agent_ensure(other, on_exhaustion="fail")
    first, second = submit(world.tenant, SCRIPT), submit(world.tenant, SCRIPT)
    theirs = submit(other, SCRIPT)

    assert _statuses([first, second, theirs]) == ["RUNNING", "CREATED", "RUNNING"]


@pytest.mark.django_db(transaction=True)
def test_the_agent_limit_holds(world):
    AgentProfile.objects.filter(tenant=world.tenant, name="support").update(
        max_concurrent_tasks=1)
    tasks = [submit(world.tenant, SCRIPT) for _ in range(2)]

    assert _statuses(tasks) == ["RUNNING", "CREATED"]
    assert admit_created_tasks() == []


@pytest.mark.django_db(transaction=True)
def test_tasks_submitted_in_one_transaction_are_admitted_once_it_commits(world, limits):
    limits(MAX_RUNNING_PER_TENANT=3)
    with transaction.atomic():
        tasks = [submit(world.tenant, SCRIPT, goal=f"g{i}") for i in range(4)]
        assert sum(entry[1] is admit_created_tasks
                   for entry in transaction.get_connection().run_on_commit) == 1
        assert _statuses(tasks) == [TaskStatus.CREATED] * 4

    assert _statuses(tasks) == ["RUNNING", "RUNNING", "RUNNING", "CREATED"]


@pytest.mark.django_db(transaction=True)
def test_the_global_limit_counts_every_tenant(world, limits):
    limits(MAX_RUNNING_TASKS=3, MAX_RUNNING_PER_TENANT=50)
    other = TenantFactory(name="t-other")
    demo_tools_ensure(other)
    demo_agent_ensure(other, on_exhaustion="fail")
    ours = [submit(world.tenant, SCRIPT) for _ in range(2)]
    theirs = [submit(other, SCRIPT) for _ in range(2)]

    assert _statuses(ours + theirs) == ["RUNNING", "RUNNING", "RUNNING", "CREATED"]
