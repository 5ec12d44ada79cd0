"""What the runner's choke points report, in this process: steps, finished
tasks and recoveries counted, and the log context bound per slice and step
(late results: `test_seed_scenarios`)."""
from __future__ import annotations

import io
import json
import logging
from datetime import timedelta

import pytest
import structlog
from django.utils import timezone
from prometheus_client import REGISTRY

from foundations.logs import json_formatter
from tasks_app.machine import TaskStatus
from tasks_app.models import Task
from tasks_app.runner.loop import run_slice
from tasks_app.runner.recovery import recovery_sweep
from tasks_app.services.admission import admit_created_tasks
from tests.factories import submit

pytestmark = pytest.mark.django_db(transaction=True)


def _count(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_a_slices_lines_carry_the_tasks_context_and_leave_none_behind(world):
    task = submit(world.tenant, [
        {"tool": "lookup_order", "args": {"order_id": "A-1"}},
        {"final": {"answer": "delivered"}},
    ])
    admit_created_tasks()
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(json_formatter())
    step_log = logging.getLogger("tether.step")
    step_log.addHandler(handler)
    previous_level = step_log.level
    step_log.setLevel(logging.INFO)
    steps_before = _count("tether_steps_total", kind="tool_call", outcome="continue")
    finished_before = _count("tether_tasks_finished_total", status=TaskStatus.SUCCEEDED)
    try:
        report = run_slice(task.pk)
    finally:
        step_log.removeHandler(handler)
        step_log.setLevel(previous_level)

    assert report.steps == 2
    task = Task.objects.get(pk=task.pk)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(r["task_id"], r["trace_id"], r["tenant"], r["agent"], r["step_no"], r["step_kind"],
             r["outcome"]) for r in lines] == [
        (task.pk, task.trace_id, world.tenant.pk, "support", 1, "tool_call", "continue"),
        (task.pk, task.trace_id, world.tenant.pk, "support", 2, "final", "stop"),
    ]
    assert structlog.contextvars.get_contextvars() == {}  # nothing leaks to the next task
    assert _count("tether_steps_total", kind="tool_call", outcome="continue") == steps_before + 1
    # counted once the final transition committed
    assert _count("tether_tasks_finished_total", status=TaskStatus.SUCCEEDED) == (
        finished_before + 1)


def test_the_recovery_sweep_counts_the_leases_it_takes_over(world):
    tasks = [submit(world.tenant, [{"final": {}}]) for _ in range(2)]
    admit_created_tasks()
    Task.objects.filter(pk__in=[t.pk for t in tasks]).update(
        lease_owner="dead-worker", lease_expires_at=timezone.now() - timedelta(seconds=5))
    before = _count("tether_recoveries_total")

    assert recovery_sweep().requeued == 2
    assert _count("tether_recoveries_total") == before + 2
    assert recovery_sweep().requeued == 2  # still unleased here: nobody ran them
    assert _count("tether_recoveries_total") == before + 4

