"""Crash recovery with real processes: a Celery worker is killed (SIGKILL to
its whole process group: the main process, its pool children) while a tool
call is in flight; another worker, with beat running the recovery sweep,
finishes the task from what the database says.

- A tool that honours keys (`idempotent_write`) runs again with the same key:
  the downstream keeps one row for it.
- A plain `write` is never replayed blindly: the interrupted call becomes
  UNCERTAIN and its status query settles it; the tool ran exactly once.
"""

from __future__ import annotations

import pytest

from tasks_app.machine import TaskStatus
from tasks_app.models import Event, Task
from tasks_app.services.demo import demo_agent_ensure
from tests.factories import ToolFactory, submit
from tests.helpers import wait_for
from tests.system import slow_tools
from tests.system.history import assert_history_intact
from tools_app.models import DemoNotification, DemoRefund, LedgerStatus, ToolExecution

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

# The slow call must still be in flight when the worker dies: the tool's own
# timeout only has to outlast the few moments between its write and the kill.
SLOW_TOOL_TIMEOUT_S = 5.0
RECOVERY_TIMEOUT_S = 150.0


@pytest.fixture
def slow_world(world):  # type: ignore[no-untyped-def]
    ToolFactory(
        tenant=world.tenant,
        name="slow_refund",
        target="tests.system.slow_tools.slow_refund",
        args_schema=slow_tools.SLOW_REFUND_SCHEMA,
        side_effect="idempotent_write",
        timeout_s=SLOW_TOOL_TIMEOUT_S,
        max_retries=3,
    )
    ToolFactory(
        tenant=world.tenant,
        name="slow_notify",
        target="tests.system.slow_tools.slow_notify",
        status_tool="tools_app.demo.tools.notification_status",
        args_schema=slow_tools.SLOW_NOTIFY_SCHEMA,
        side_effect="write",
        timeout_s=SLOW_TOOL_TIMEOUT_S,
        max_retries=0,
    )
    demo_agent_ensure(
        world.tenant,
        on_exhaustion="fail",
        tools=["lookup_order", "issue_refund", "notify_customer", "slow_refund", "slow_notify"],
    )
    return world


def _finished(task_id: int) -> Task | None:
    task = Task.objects.get(pk=task_id)
    return task if task.is_terminal or task.is_waiting else None


def _crash_mid_call(celery_workers, first_row, gate) -> None:  # type: ignore[no-untyped-def]
    """Wait until the tool has written downstream (the call is in flight), kill
    the worker, open the gate for any later call, start a worker with beat."""
    first = celery_workers.start()
    wait_for(first_row, timeout=60, message="the slow tool to write downstream")
    first.kill()
    assert not first.alive()
    gate.touch()
    celery_workers.start(beat=True)


def test_an_idempotent_call_cut_by_a_crash_runs_again_with_its_key(
    slow_world, celery_workers, tmp_path
):
    gate = tmp_path / "gate"
    task = submit(
        slow_world.tenant,
        [
            {"tool": "lookup_order", "args": {"order_id": "A-1"}},
            {
                "tool": "slow_refund",
                "args": {"order_id": "A-1", "amount_cents": 700, "gate": str(gate)},
            },
            {"final": {"refunded_cents": 700}},
        ],
    )
    _crash_mid_call(
        celery_workers, lambda: DemoRefund.objects.filter(order_id="A-1").exists(), gate
    )

    done = wait_for(
        lambda: _finished(task.pk), timeout=RECOVERY_TIMEOUT_S, message="the task to finish"
    )
    assert done.status == TaskStatus.SUCCEEDED, celery_workers.logs()
    assert done.result == {"refunded_cents": 700}

    step = done.steps.get(step_no=2)
    ledger = ToolExecution.objects.get(idempotency_key=step.idempotency_key)
    refunds = DemoRefund.objects.filter(order_id="A-1")
    # The call ran twice with one key (the second after the crash); one refund.
    assert [r.idempotency_key for r in refunds] == [step.idempotency_key]
    assert ledger.status == LedgerStatus.SUCCEEDED and len(ledger.attempts) == 2
    assert "outcome" not in ledger.attempts[0]  # the first call died with its worker
    assert len({a["owner"] for a in ledger.attempts}) == 2  # two different workers
    assert step.status == "SUCCEEDED" and step.output == {
        "refund_id": f"rf_{refunds[0].pk}",
        "amount_cents": 700,
    }
    assert done.tool_calls == 2
    assert_history_intact(done)


def test_a_plain_write_cut_by_a_crash_is_settled_by_its_status_query(
    slow_world, celery_workers, tmp_path
):
    gate = tmp_path / "gate"
    task = submit(
        slow_world.tenant,
        [
            {
                "tool": "slow_notify",
                "args": {"customer": "Ada", "message": "shipped", "gate": str(gate)},
            },
            {"final": {"notified": True}},
        ],
    )
    _crash_mid_call(
        celery_workers, lambda: DemoNotification.objects.filter(customer="Ada").exists(), gate
    )

    done = wait_for(
        lambda: _finished(task.pk), timeout=RECOVERY_TIMEOUT_S, message="the task to finish"
    )
    assert done.status == TaskStatus.SUCCEEDED, celery_workers.logs()

    step = done.steps.get(step_no=1)
    ledger = ToolExecution.objects.get(idempotency_key=step.idempotency_key)
    notes = DemoNotification.objects.filter(customer="Ada")
    # Never replayed: one call, one message; the status query said it happened.
    assert [n.idempotency_key for n in notes] == [step.idempotency_key]
    assert len(ledger.attempts) == 1 and "outcome" not in ledger.attempts[0]
    assert ledger.status == LedgerStatus.SUCCEEDED
    assert ledger.status_answer["state"] == "succeeded"
    assert step.status == "SUCCEEDED" and step.output == {
        "notification_id": f"nt_{notes[0].pk}",
        "delivered": True,
    }
    assert not Event.objects.filter(
        task=done, type="result_uncertain"
    ).exists()  # no human was needed
    assert_history_intact(done)
