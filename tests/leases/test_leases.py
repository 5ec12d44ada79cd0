"""Resource leases in one process (the real runner, real PostgreSQL): a call
whose resource is held waits without holding a worker and is woken by the
release; other resources run in parallel; templates are checked at registration."""
from __future__ import annotations

import pytest
from django.test import Client

from foundations.errors import DomainError
from tasks_app.machine import TaskStatus
from tasks_app.models import Event, LeaseWaiter, ResourceLease, Step
from tasks_app.runner.step import Next
from tasks_app.services.dispatch import MANUAL_QUEUE
from tests.api.conftest import Tenancy
from tests.factories import submit
from tests.fakes import python_tools
from tests.fakes.runtime import InThread, add_agent, add_tool, advance, assert_log_consistent
from tests.helpers import drive, wait_for
from tools_app.models import DemoRefund, ToolExecution
from tools_app.resources import MAX_RESOURCE, render_resource
from tools_app.services import tool_create

pytestmark = pytest.mark.django_db(transaction=True)

SCHEMA = {"type": "object",
          "properties": {"order_id": {"type": "string"}, "amount_cents": {"type": "integer"},
                         "gate": {"type": "string"}},
          "required": ["order_id", "amount_cents", "gate"]}


@pytest.fixture
def orders(main: Tenancy) -> Tenancy:
    add_tool(main.tenant, "slow_refund", "blocking_refund", args_schema=SCHEMA,
             side_effect="idempotent_write", resource="order:{order_id}", max_retries=0)
    add_agent(main.tenant, "orders", ["slow_refund"])
    MANUAL_QUEUE.clear()
    return main


def _refund(tenant, order_id: str, cents: int, gate: str):  # type: ignore[no-untyped-def]
    return submit(tenant, [{"tool": "slow_refund", "args": {"order_id": order_id,
                                                            "amount_cents": cents, "gate": gate}},
                           {"final": {"ok": True}}], agent="orders")


def test_a_busy_resource_makes_the_call_wait_without_a_worker_until_released(orders, other):
    holder = _refund(orders.tenant, "A-1", 100, "a")
    waiter = _refund(orders.tenant, "A-1", 200, "b")
    elsewhere = _refund(orders.tenant, "A-2", 300, "c")

    running = InThread(lambda: advance(holder.pk, owner="executor-a"))
    wait_for(lambda: python_tools.gate("a").entries == 1, message="the holder's call to start")

    # same resource: the step returns at once (no thread waits), the task comes back later
    result = advance(waiter.pk, owner="executor-b")
    assert result.next is Next.LATER
    assert result.note == f"waiting for resource order:A-1, held by task {holder.pk} step 1"
    assert python_tools.gate("b").entries == 0
    (waiting,) = Event.objects.filter(task=waiter, type="lease_waiting")
    assert waiting.payload["held_by"] == {"task": holder.pk, "step_no": 1}
    key = Step.objects.get(task=waiter, step_no=1).idempotency_key
    row = ToolExecution.objects.get(idempotency_key=key)
    assert row.status == "FAILED_RETRYABLE" and row.attempts[-1]["outcome"] == "not_called"
    leases = orders.client("operator").get("/api/v1/leases").json()
    (lease,) = [x for x in leases if x["resource"] == "order:A-1"]
    assert lease["holder"]["task"] == holder.pk and lease["fencing_token"] == 1
    assert [w["task"] for w in lease["waiters"]] == [waiter.pk]
    assert other.client("operator").get("/api/v1/leases").json() == []  # tenant-scoped
    assert orders.client("requester").get("/api/v1/leases").status_code == 403
    console = Client()
    console.force_login(orders.users["operator"])
    page = console.get(f"/tasks/{waiter.pk}/").content.decode()
    assert "waiting for resource <code>order:A-1</code>" in page
    assert f">task {holder.pk}</a> step 1" in page

    # another resource runs in parallel with the holder
    parallel = InThread(lambda: advance(elsewhere.pk, owner="executor-c"))
    wait_for(lambda: python_tools.gate("c").entries == 1, message="the other order's call")

    python_tools.gate("a").release.set()
    assert running.join().next is Next.CONTINUE
    assert waiter.pk in [t for t, _ in MANUAL_QUEUE]  # woken by the release
    assert LeaseWaiter.objects.filter(task_id=waiter.pk).exists()  # until it takes the lease
    python_tools.gate("b").release.set()
    python_tools.gate("c").release.set()
    parallel.join()

    done = drive(waiter.pk)
    assert done.status == TaskStatus.SUCCEEDED
    assert not LeaseWaiter.objects.filter(task_id=waiter.pk).exists()
    tokens = [e.payload["token"] for e in Event.objects.filter(
        type="lease_acquired", payload__resource="order:A-1").order_by("id")]
    assert tokens == [1, 2]  # monotonic per resource
    released = Event.objects.filter(type="lease_released", payload__resource="order:A-1")
    assert released.count() == 2
    lease = ResourceLease.objects.get(tenant_id=orders.tenant.pk, resource="order:A-1")
    assert lease.holder_key == "" and lease.fencing_token == 2
    assert DemoRefund.objects.filter(order_id="A-1").count() == 2  # two different refunds
    for task in (holder, waiter):
        assert_log_consistent(task.pk)


@pytest.mark.django_db  # one thread: no real commits needed
@pytest.mark.parametrize("template,problem", [
    ("order:{order}", "not an argument"),
    ("order:{note}", "must be a required argument"),
    ("order:{order_id", "placeholders only"),
    ("order:{order_id}}", "placeholders only"),
    ("x" * 201, "at most 200"),
])
def test_a_bad_resource_template_is_refused_at_registration(orders, template, problem):
    schema = {"type": "object", "properties": {"order_id": {"type": "string"},
                                               "note": {"type": "string"}},
              "required": ["order_id"]}
    with pytest.raises(DomainError) as refused:
        tool_create(tenant_id=orders.tenant.pk, name="bad", kind="python",
                    target="tools_app.demo.tools.issue_refund", args_schema=schema,
                    resource=template)
    assert any(problem in m for m in refused.value.details["resource"])
    response = orders.client("admin").post("/api/v1/tools", {
        "name": "bad", "kind": "python", "target": "tools_app.demo.tools.issue_refund",
        "args_schema": schema, "resource": template}, format="json")
    assert response.status_code == 400 and "resource" in response.json()["error"]["details"]


@pytest.mark.django_db  # one thread: no real commits needed
def test_resources_render_canonically_and_bounded():
    assert render_resource("order:{order_id}", {"order_id": 7}) == "order:7"
    assert render_resource("order:{order_id}", {"order_id": "7"}) == "order:7"
    assert (render_resource("a:{x}", {"x": {"b": 1, "a": 2}})
            == render_resource("a:{x}", {"x": {"a": 2, "b": 1}}))
    long_a, long_b = ("k:{x}", {"x": "y" * 500}), ("k:{x}", {"x": "y" * 499 + "z"})
    a, b = render_resource(*long_a), render_resource(*long_b)
    assert len(a) <= MAX_RESOURCE and len(b) <= MAX_RESOURCE and a != b
    assert render_resource("", {"x": 1}) == ""
