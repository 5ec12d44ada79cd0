"""Admission: CREATED tasks start first come, first served, within the global,
per-tenant and per-agent limits; a slot freed by a task that ends is taken by
the next one waiting."""

from __future__ import annotations

import pytest
from django.db import transaction
from django.utils import timezone

from foundations.actors import SYSTEM
from tasks_app.machine import TaskStatus
from tasks_app.models import Event, Task
from tasks_app.services import admission
from tasks_app.services.admission import admit_created_tasks
from tasks_app.services.demo import demo_agent_ensure, demo_tools_ensure
from tasks_app.services.tasks import task_cancel
from tasks_app.store.backends import ADMISSION_PAGE as PAGE
from tasks_app.store.backends import ORM, Candidate
from tests.factories import TenantFactory, submit

SCRIPT = [{"final": {}}]


def _statuses(tasks: list[Task]) -> list[str]:
    return [Task.objects.get(pk=t.pk).status for t in tasks]


@pytest.fixture
def limits(settings):  # type: ignore[no-untyped-def]
    def set_limits(**limits: int) -> None:
        settings.TETHER = {**settings.TETHER, **limits}

    return set_limits


@pytest.fixture(params=[
    pytest.param("prepared SQL", marks=pytest.mark.postgres_only(
        "admission's prepared statements (psycopg)")),
    "orm",
], autouse=True)
def statements(request, monkeypatch):  # type: ignore[no-untyped-def]
    """Admission's reads: the backend's (prepared SQL on PostgreSQL), or the ORM's (SQLite's)."""
    if request.param == "orm":
        monkeypatch.setattr(admission, "backend", lambda: ORM)
    return admission.backend().admission


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
    # The profile's row alone is not what tasks get: its current version is.
    demo_agent_ensure(world.tenant, on_exhaustion="fail", max_concurrent_tasks=1)
    tasks = [submit(world.tenant, SCRIPT) for _ in range(2)]

    assert _statuses(tasks) == ["RUNNING", "CREATED"]
    assert admit_created_tasks() == []


@pytest.mark.django_db(transaction=True)
def test_tasks_submitted_in_one_transaction_are_admitted_once_it_commits(world, limits):
    limits(MAX_RUNNING_PER_TENANT=3)
    with transaction.atomic():
        tasks = [submit(world.tenant, SCRIPT, goal=f"g{i}") for i in range(4)]
        assert sum(entry[1] in admission.ADMISSION_HOOKS
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


@pytest.mark.django_db(transaction=True)
def test_a_queue_longer_than_a_page_does_not_hold_back_a_later_tenant(world, limits):
    """Candidates are read a page at a time, leaving out tenants already full:
    the other tenant's task, behind more than a page of waiting ones, starts."""
    limits(MAX_RUNNING_PER_TENANT=1)
    other = TenantFactory(name="t-other")
    demo_tools_ensure(other)
    demo_agent_ensure(other, on_exhaustion="fail")
    with transaction.atomic():
        ours = [submit(world.tenant, SCRIPT) for _ in range(PAGE + 5)]
        theirs = submit(other, SCRIPT)

    assert _statuses(ours[:2]) == ["RUNNING", "CREATED"]
    assert _statuses([theirs]) == ["RUNNING"]


@pytest.mark.django_db(transaction=True)
def test_an_agent_at_its_limit_is_skipped_across_pages(world):
    """A limit set on the agent is not known before its tasks' rows are read:
    they are skipped one by one, past the first page, to a task that may run."""
    demo_agent_ensure(world.tenant, name="narrow", max_concurrent_tasks=1)
    with transaction.atomic():
        narrow = [submit(world.tenant, SCRIPT, agent="narrow") for _ in range(PAGE + 5)]
        broad = submit(world.tenant, SCRIPT)

    assert _statuses(narrow).count("RUNNING") == 1
    assert _statuses([broad]) == ["RUNNING"]


@pytest.mark.django_db(transaction=True)
def test_a_task_canceled_while_waiting_is_passed_over_and_admission_goes_on(
        world, limits, statements):
    """A candidate whose row moved on between the read and its start is skipped;
    the admission's transaction stays usable and the next one starts."""
    limits(MAX_RUNNING_PER_TENANT=1)
    running, waiting, after = (submit(world.tenant, SCRIPT) for _ in range(3))
    assert _statuses([running, waiting, after]) == ["RUNNING", "CREATED", "CREATED"]
    task = Task.objects.get(pk=waiting.pk)
    stale = Candidate(id=task.pk, tenant_id=task.tenant_id, agent_id=task.agent_id,
                       version=task.version, trace_id=task.trace_id, agent_cap=None,
                       duration=None)
    task_cancel(task_id=waiting.pk, actor=SYSTEM, reason="changed my mind")

    with transaction.atomic():
        assert admission.candidate_start(stale, timezone.now()) is False
        assert Task.objects.filter(pk=waiting.pk).values_list("status", flat=True).get() == (
            TaskStatus.CANCELED)  # the transaction still answers

    task_cancel(task_id=running.pk, actor=SYSTEM, reason="make room")
    assert _statuses([running, waiting, after]) == ["CANCELED", "CANCELED", "RUNNING"]


@pytest.mark.django_db(transaction=True)
def test_a_started_task_has_its_clock_and_its_event(world, limits):
    limits(MAX_RUNNING_PER_TENANT=0)
    task = submit(world.tenant, SCRIPT)
    limits(MAX_RUNNING_PER_TENANT=1)

    assert admit_created_tasks() == [task.pk]

    started = Task.objects.get(pk=task.pk)
    budget = started.agent_snapshot["budget"]
    assert (started.status, started.version) == (TaskStatus.RUNNING, task.version + 1)
    assert (started.deadline_at - started.started_at).total_seconds() == budget["max_duration_s"]
    event = Event.objects.filter(task=task).latest("id")
    assert (event.type, event.task_version, event.actor, event.actor_role, event.payload) == (
        "task_started", started.version, SYSTEM.name, SYSTEM.role,
        {"from": "CREATED", "to": "RUNNING"})
