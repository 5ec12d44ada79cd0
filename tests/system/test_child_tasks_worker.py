"""A parent task waiting on its child, with a real Celery worker: the parent
holds no worker while the child's slow call runs, and the child's end wakes
it at once, well before its own re-check."""
from __future__ import annotations

import pytest
from django.utils import timezone

from tasks_app.machine import TaskStatus
from tasks_app.models import Step, Task
from tests.factories import ToolFactory, submit
from tests.fakes.runtime import add_agent
from tests.helpers import wait_for
from tests.system import slow_tools

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

# The parent's re-check must be this far off when the child is let go, so
# that only the wake-up can explain a parent that ends before it.
RECHECK_AT_LEAST_S = 6.0


def _waiting_long(parent_id: int) -> Task | None:
    parent = Task.objects.get(pk=parent_id)
    if parent.lease_owner or parent.next_run_at is None:
        return None
    ahead = (parent.next_run_at - timezone.now()).total_seconds()
    return parent if ahead >= RECHECK_AT_LEAST_S else None


def test_a_parent_is_woken_by_its_childs_end(world, celery_workers, tmp_path):
    gate = tmp_path / "gate"
    ToolFactory(tenant=world.tenant, name="slow_refund",
                target="tests.system.slow_tools.slow_refund",
                args_schema=slow_tools.SLOW_REFUND_SCHEMA, side_effect="idempotent_write",
                timeout_s=60.0, max_retries=0)
    add_agent(world.tenant, "refunder", ["slow_refund"], model={"backend": "scripted", "script": [
        {"tool": "slow_refund", "args": {"order_id": "A-1", "amount_cents": 700,
                                         "gate": str(gate)}},
        {"final": {"refunded_cents": 700}}]})
    add_agent(world.tenant, "boss", ["agent:refunder"])
    parent = submit(world.tenant, [
        {"tool": "agent:refunder", "args": {"goal": "Refund A-1", "input": {"order": "A-1"}}},
        {"final": {"done": True}}], agent="boss")
    celery_workers.start()

    child = wait_for(lambda: Task.objects.filter(parent=parent).first(), timeout=60,
                     message="the child task to be started")
    waiting = wait_for(lambda: _waiting_long(parent.pk), timeout=90,
                       message="the parent to wait with a long re-check")
    assert Task.objects.get(pk=child.pk).status == TaskStatus.RUNNING  # still in its call
    gate.touch()

    done = wait_for(lambda: (t := Task.objects.get(pk=parent.pk)).is_terminal and t,
                    timeout=60, message="the parent to end")
    assert done.status == TaskStatus.SUCCEEDED, celery_workers.logs()
    assert done.finished_at < waiting.next_run_at  # woken by the child, not its re-check
    child = Task.objects.get(pk=child.pk)
    assert child.status == TaskStatus.SUCCEEDED and child.result == {"refunded_cents": 700}
    assert Step.objects.get(task=done, step_no=1).output == {"refunded_cents": 700}
