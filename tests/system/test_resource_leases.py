"""Resource leases with real Celery workers and a downstream that records
concurrency per order (`tests.fakes.resource_downstream`).

- six tasks refunding order 7 never overlap; six tasks on six orders do;
- the holder's worker is killed mid-call: the next holder decides through the
  ledger: an idempotent write runs again once under its own key (one effect),
  a plain write goes to reconciliation (never replayed).
"""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from tasks_app.machine import TaskStatus
from tasks_app.models import Event, Step, Task
from tasks_app.services.demo import demo_agent_ensure
from tests.factories import ToolFactory, submit
from tests.fakes.http_tool_server import FakeToolServer
from tests.fakes.resource_downstream import OrderDownstream
from tests.helpers import wait_for
from tests.system.history import assert_history_intact
from tools_app.models import LedgerStatus, ToolExecution

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

SCHEMA = {"type": "object",
          "properties": {"order_id": {"type": "string"}, "amount_cents": {"type": "integer"}},
          "required": ["order_id", "amount_cents"]}
FINISH_TIMEOUT_S = 120.0


@pytest.fixture
def downstream() -> Iterator[tuple[OrderDownstream, str]]:
    server = FakeToolServer()
    shop = OrderDownstream()
    url = shop.serve(server)
    yield shop, url
    server.close()


def _world(world, url: str, *, side_effect: str, timeout_s: float = 10.0):  # type: ignore[no-untyped-def]
    ToolFactory(tenant=world.tenant, name="refund_order", kind="http", url=url,
                args_schema=SCHEMA, side_effect=side_effect, timeout_s=timeout_s,
                max_retries=0, resource="order:{order_id}")
    demo_agent_ensure(world.tenant, name="orders", on_exhaustion="fail", tools=["refund_order"])
    return world


def _refund(world, order: str, cents: int) -> Task:  # type: ignore[no-untyped-def]
    return submit(world.tenant, [
        {"tool": "refund_order", "args": {"order_id": order, "amount_cents": cents}},
        {"final": {"ok": True}}], agent="orders")


def _ended(ids: list[int]) -> bool:
    return not Task.objects.filter(pk__in=ids).exclude(
        status__in=[TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.CANCELED,
                    TaskStatus.WAITING_FOR_RECONCILIATION]).exists()


def test_one_order_is_refunded_one_call_at_a_time_and_six_orders_in_parallel(
        world, downstream, celery_workers):
    shop, url = downstream
    _world(world, url, side_effect="idempotent_write")
    celery_workers.start(concurrency=4)

    same = [_refund(world, "7", 100 + n).pk for n in range(6)]
    wait_for(lambda: _ended(same), timeout=FINISH_TIMEOUT_S, message="six refunds of order 7")
    assert set(Task.objects.filter(pk__in=same).values_list("status", flat=True)) == {
        TaskStatus.SUCCEEDED}, celery_workers.logs()
    assert shop.max_in_flight["7"] == 1  # never two calls on order 7 at once
    assert len([c for c in shop.calls if c[0] == "7"]) == 6
    fences = [int(f.rsplit("#", 1)[1]) for o, _, f in shop.calls if o == "7"]
    assert fences == sorted(fences) and len(set(fences)) == 6  # fencing tokens only grow
    assert Event.objects.filter(task_id__in=same, type="lease_waiting").exists()  # some waited

    spread = [_refund(world, str(100 + n), 100).pk for n in range(6)]
    wait_for(lambda: _ended(spread), timeout=FINISH_TIMEOUT_S, message="six orders")
    assert set(Task.objects.filter(pk__in=spread).values_list("status", flat=True)) == {
        TaskStatus.SUCCEEDED}
    assert shop.max_overall >= 2  # different orders ran at the same time
    assert all(shop.max_in_flight[str(100 + n)] == 1 for n in range(6))
    for task in Task.objects.filter(pk__in=same + spread):
        assert_history_intact(task)


@pytest.mark.parametrize("side_effect", ["idempotent_write", "write"])
def test_the_holder_killed_mid_call_is_settled_through_the_ledger(
        world, downstream, celery_workers, side_effect):
    shop, url = downstream
    _world(world, url, side_effect=side_effect, timeout_s=3.0)
    hold = shop.hold_next()
    first = celery_workers.start(concurrency=2)
    holder = _refund(world, "7", 100)
    wait_for(lambda: shop.calls, timeout=60, message="the holder's call to reach the downstream")
    waiter = _refund(world, "7", 200)
    wait_for(lambda: Event.objects.filter(task=waiter, type="lease_waiting").exists(),
             timeout=60, message="the second task to wait for order 7")

    first.kill()  # mid-call: the downstream has the refund, nobody has the answer
    hold.set()
    celery_workers.start(beat=True)  # the recovery sweep brings both tasks back

    wait_for(lambda: _ended([holder.pk, waiter.pk]), timeout=FINISH_TIMEOUT_S,
             message="both tasks to settle")
    key = Step.objects.get(task=holder, step_no=1).idempotency_key
    row = ToolExecution.objects.get(idempotency_key=key)
    assert Task.objects.get(pk=waiter.pk).status == TaskStatus.SUCCEEDED, celery_workers.logs()
    assert Event.objects.filter(task=holder, type="lease_expired").exists()
    assert shop.max_in_flight["7"] == 1
    holder = Task.objects.get(pk=holder.pk)
    if side_effect == "idempotent_write":
        # re-run once under its own key: two calls, one effect
        assert holder.status == TaskStatus.SUCCEEDED, celery_workers.logs()
        assert shop.calls_with(key) == 2
        assert row.status == LedgerStatus.SUCCEEDED
    else:
        # never replayed blindly: a person reconciles it
        assert holder.status == TaskStatus.WAITING_FOR_RECONCILIATION, celery_workers.logs()
        assert shop.calls_with(key) == 1
        assert row.status == LedgerStatus.UNCERTAIN
    assert len(shop.effects) == 2  # one refund per task
    assert_history_intact(Task.objects.get(pk=waiter.pk))
