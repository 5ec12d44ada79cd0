"""Several tool calls of one model reply, run together, on real worker
processes: the model is the fake OpenAI-compatible server, the tools call a
fake HTTP downstream (tests/fakes/http_tool_server.py), both in this process.

- five reads in one reply overlap at the downstream (each read's interval, as
  the downstream recorded it, overlaps every other's);
- three calls needing approval and two not: the two run before any decision,
  the three cards are decided one by one (reject, approve, edit) and the task
  waits until the last; the model's next request carries the five results in
  the reply's order;
- a worker killed (SIGKILL) with four writes of one reply in flight: another
  worker finishes the task and each key reached the downstream once (the cut
  calls are settled by their status query, never sent again);
- a cancel with four calls in flight fences every one of them: each result
  is discarded and kept, and the model is not asked again.

Nothing here depends on timing: the downstream holds its answers until the
test releases them, and the test polls with deadlines.
"""
from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from approvals_app.models import Approval
from approvals_app.services.decisions import approval_decide
from foundations.actors import SYSTEM
from tasks_app.machine import TaskStatus
from tasks_app.models import Event, Step, Task
from tasks_app.services.tasks import task_cancel
from tests.factories import actor_of, submit
from tests.fakes.downstream import Downstream
from tests.fakes.fixtures import openai_agent, openai_server  # noqa: F401 - a fixture
from tests.fakes.openai_server import FakeOpenAI, reply
from tests.fakes.runtime import add_tool
from tests.helpers import wait_for

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

RUN_TIMEOUT_S = 90.0
RECOVERY_TIMEOUT_S = 120.0
READ_LATENCY_S = 0.5


def _tools(world: Any, service: Downstream) -> None:
    add_tool(world.tenant, "par_read", kind="http", url=service.url("/read"),
             side_effect="read", timeout_s=20.0, max_retries=0)
    add_tool(world.tenant, "par_write", kind="http", url=service.url("/write"),
             side_effect="write", status_url=service.url("/write-status/{key}"),
             timeout_s=30.0, max_retries=0)
    add_tool(world.tenant, "par_refund", kind="http", url=service.url("/write"),
             side_effect="write", status_url=service.url("/write-status/{key}"),
             timeout_s=30.0, max_retries=0, requires_approval=True, risk="high")


def _agent(world: Any, server: FakeOpenAI) -> None:
    openai_agent(world.tenant, server, tools=["par_read", "par_write", "par_refund"],
                 model={"timeout_s": 30, "max_retries": 0})


def _tool_messages(server: FakeOpenAI, n: int) -> list[dict[str, Any]]:
    """The tool results the model's `n`-th request (0-based) carried, in order."""
    return [m for m in server.requests[n].body["messages"] if m["role"] == "tool"]


def _status(task_id: int) -> str:
    return str(Task.objects.values_list("status", flat=True).get(pk=task_id))


def _ended(task_id: int, timeout: float, workers: Any) -> Task:
    try:
        wait_for(lambda: Task.objects.get(pk=task_id).is_terminal, timeout=timeout,
                 interval=0.1, message=f"task {task_id} to end")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{workers.logs()}") from exc
    return Task.objects.get(pk=task_id)


@contextmanager
def _a_reply(world: Any, server: FakeOpenAI, calls: list[tuple[str, Any]], *,
             hold: bool = False) -> Iterator[tuple[Downstream, threading.Event]]:
    """The model's reply with `calls` (then a final answer), on a downstream
    whose reads take `READ_LATENCY_S`; with `hold`, its answers wait until the
    event is set (set on the way out, whatever happened)."""
    release = threading.Event()
    service = Downstream(read_latency_s=READ_LATENCY_S, hold=release if hold else None)
    try:
        _tools(world, service)
        _agent(world, server)
        server.push(reply("All at once.", tool_calls=calls), reply('{"answer": "done"}'))
        yield service, release
    finally:
        release.set()
        service.server.close()


def test_five_reads_of_one_reply_overlap_at_the_downstream(
        world, openai_server, celery_workers):  # noqa: F811 - the fixture
    orders = [f"A-{i}" for i in range(5)]
    reads = [("par_read", {"order": o}) for o in orders]
    with _a_reply(world, openai_server, reads) as (service, _):
        celery_workers.start()
        task = _ended(submit(world.tenant, None, agent="llm", goal="Look up five").pk,
                      RUN_TIMEOUT_S, celery_workers)

    assert task.status == TaskStatus.SUCCEEDED, (task.failure_detail, celery_workers.logs())
    assert set(service.intervals) == set(orders)
    # every read was in progress at the downstream while every other one was
    latest_arrival = max(start for start, _ in service.intervals.values())
    first_answer = min(end for _, end in service.intervals.values())
    assert latest_arrival < first_answer, service.intervals
    steps = list(Step.objects.filter(task=task, kind="tool").order_by("step_no"))
    assert [s.args["order"] for s in steps] == orders
    assert len({s.idempotency_key for s in steps}) == 5
    # the model's next request carries the five results, in the reply's order
    assert len(openai_server.requests) == 2
    results = _tool_messages(openai_server, 1)
    assert [m["tool_call_id"] for m in results] == [f"step_{s.step_no}" for s in steps]
    assert [json.loads(m["content"])["output"]["order"] for m in results] == orders


def test_three_calls_need_approval_two_run_before_any_decision_each_card_decided_alone(
        world, openai_server, celery_workers):  # noqa: F811 - the fixture
    calls = [("par_refund", {"order": "R-1", "cents": 100}), ("par_read", {"order": "A-1"}),
             ("par_refund", {"order": "R-2", "cents": 200}), ("par_read", {"order": "A-2"}),
             ("par_refund", {"order": "R-3", "cents": 300})]
    with _a_reply(world, openai_server, calls) as (service, _):
        celery_workers.start()
        task_id = submit(world.tenant, None, agent="llm", goal="Refunds").pk

        wait_for(lambda: _status(task_id) == TaskStatus.WAITING_FOR_APPROVAL,
                 timeout=RUN_TIMEOUT_S, interval=0.1, message="the task to wait for its cards")
        # the two reads ran before anybody decided anything; no refund went out
        assert set(service.intervals) == {"A-1", "A-2"}
        assert not service.calls
        cards = list(Approval.objects.filter(task_id=task_id).order_by("step__step_no"))
        assert [(c.args["order"], c.status) for c in cards] == [
            ("R-1", "pending"), ("R-2", "pending"), ("R-3", "pending")]
        reviewer = actor_of(world.users["reviewer"])

        def decide(card: Approval, decision: str, **fields: Any) -> None:
            approval_decide(approval_id=card.pk, tenant_id=world.tenant.pk, actor=reviewer,
                            decision=decision, **fields)  # type: ignore[arg-type]

        # one by one, not in the reply's order; the task waits until the last
        decide(cards[2], "reject", comment="not this one")
        assert _status(task_id) == TaskStatus.WAITING_FOR_APPROVAL
        decide(cards[0], "approve")
        assert _status(task_id) == TaskStatus.WAITING_FOR_APPROVAL
        assert not service.calls  # an approved card waits for its siblings' decisions
        decide(cards[1], "approve", args={"order": "R-2", "cents": 150})  # edited
        task = _ended(task_id, RUN_TIMEOUT_S, celery_workers)

    assert task.status == TaskStatus.SUCCEEDED, (task.failure_detail, celery_workers.logs())
    # the approved refunds went out once each, the edited one with its new arguments
    assert sorted((b["order"], b["cents"]) for b in service.effects.values()) == [
        ("R-1", 100), ("R-2", 150)]
    assert set(service.calls.values()) == {1}
    decided = Event.objects.filter(task_id=task_id, type="approval_decided").count()
    assert decided == 2  # the first two decisions; the last one moved the task
    # the model's next request: five results, in the reply's order
    assert len(openai_server.requests) == 2
    results = [json.loads(m["content"]) for m in _tool_messages(openai_server, 1)]
    assert [m["tool_call_id"] for m in _tool_messages(openai_server, 1)] == [
        f"step_{n}" for n in range(1, 6)]
    assert results[0]["output"]["done"] == {"order": "R-1", "cents": 100}
    assert results[1]["output"]["order"] == "A-1"
    assert results[2]["output"]["done"] == {"order": "R-2", "cents": 150}
    assert results[3]["output"]["order"] == "A-2"
    assert results[4]["status"] == "REJECTED" and results[4]["error"]["type"] == "rejected"
    assert results[4]["error"]["comment"] == "not this one"


def test_a_worker_killed_with_four_calls_of_one_reply_in_flight_makes_each_once(
        world, openai_server, celery_workers):  # noqa: F811 - the fixture
    writes = [("par_write", {"item": i}) for i in range(4)]
    with _a_reply(world, openai_server, writes, hold=True) as (service, release):
        first = celery_workers.start()
        task_id = submit(world.tenant, None, agent="llm", goal="Write four").pk
        wait_for(lambda: len(service.calls) == 4, timeout=RUN_TIMEOUT_S, interval=0.02,
                 message="four writes in flight at the downstream")
        first.kill()
        assert not first.alive()
        release.set()  # answers now go to a dead process
        celery_workers.start(beat=True)
        task = _ended(task_id, RECOVERY_TIMEOUT_S, celery_workers)

    assert task.status == TaskStatus.SUCCEEDED, (task.failure_detail, celery_workers.logs())
    steps = list(Step.objects.filter(task=task, kind="tool").order_by("step_no"))
    assert [s.status for s in steps] == ["SUCCEEDED"] * 4
    keys = {s.idempotency_key for s in steps}
    # each key reached the downstream once: settled by its status query, not sent again
    assert set(service.calls) == keys and set(service.calls.values()) == {1}, service.calls
    assert sorted(b["item"] for b in service.effects.values()) == [0, 1, 2, 3]
    results = _tool_messages(openai_server, len(openai_server.requests) - 1)
    assert [json.loads(m["content"])["output"]["item"] for m in results] == [0, 1, 2, 3]


def test_a_cancel_fences_every_call_of_the_reply_in_flight(
        world, openai_server, celery_workers):  # noqa: F811 - the fixture
    calls = [("par_write", {"item": 0}), ("par_read", {"order": "A-1"}),
             ("par_write", {"item": 1}), ("par_read", {"order": "A-2"})]
    with _a_reply(world, openai_server, calls, hold=True) as (service, release):
        celery_workers.start()
        task_id = submit(world.tenant, None, agent="llm", goal="Cancel me").pk
        wait_for(lambda: len(service.calls) == 2 and len(service.intervals) == 2,
                 timeout=RUN_TIMEOUT_S, interval=0.02, message="four calls in flight")
        task_cancel(task_id=task_id, actor=SYSTEM, reason="changed my mind")
        release.set()  # the calls in flight answer now, too late
        wait_for(lambda: Event.objects.filter(task_id=task_id,
                                              type="result_discarded").count() == 4,
                 timeout=RUN_TIMEOUT_S, interval=0.1, message="four late results discarded")

    task = Task.objects.get(pk=task_id)
    assert task.status == TaskStatus.CANCELED
    steps = list(Step.objects.filter(task_id=task_id, kind="tool").order_by("step_no"))
    assert [s.status for s in steps] == ["DISCARDED"] * 4
    assert all(s.output is None and s.late_output for s in steps)
    assert task.tool_calls == 0
    assert len(openai_server.requests) == 1  # the model was not asked again
