"""The tool calls of one model reply run together, driven in this process
(`tests.helpers.drive`) against the fake model server and a fake HTTP
downstream: overlap, the `PARALLEL_TOOL_CALLS` bound, the order of the
results the model sees next, and the cards of a reply decided one by one.
The same behaviours with real worker processes, a kill and a cancel:
tests/system/test_parallel_calls.py."""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from approvals_app.models import Approval
from approvals_app.services.decisions import approval_decide
from foundations.actors import SYSTEM
from tasks_app.machine import TaskStatus
from tasks_app.models import Event, Step
from tasks_app.runner.loop import run_slice
from tasks_app.services.admission import admit_created_tasks
from tasks_app.services.replay import task_replay
from tasks_app.services.tasks import task_cancel
from tests.factories import actor_of, submit
from tests.fakes.fixtures import openai_agent
from tests.fakes.http_tool_server import FakeToolServer, Recorded, Reply
from tests.fakes.openai_server import FakeOpenAI, reply
from tests.fakes.runtime import InThread, add_tool
from tests.helpers import drive, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

LATENCY_S = 0.2


class Reads:
    """`/read` takes `LATENCY_S`; each call's (arrived, answered) is kept."""

    def __init__(self) -> None:
        self.server = FakeToolServer()
        self.intervals: list[tuple[float, float]] = []
        self.release = threading.Event()
        self.held: list[Any] = []  # the orders `/held` received
        self._lock = threading.Lock()
        self.server.on("POST", "/read", self._read)
        self.server.on("POST", "/held", self._held)
        self.server.on("POST", "/write", lambda r: Reply(200, {"done": r.body}))

    def _read(self, request: Recorded) -> Reply:
        arrived = time.monotonic()
        time.sleep(LATENCY_S)  # the service's latency, not a synchronisation
        with self._lock:
            self.intervals.append((arrived, time.monotonic()))
        return Reply(200, {"order": request.body.get("order")})

    def _held(self, request: Recorded) -> Reply:
        with self._lock:
            self.held.append(request.body.get("order"))
        return Reply(200, {"order": request.body.get("order")}, hold=self.release)

    def most_at_once(self) -> int:
        """The most calls in progress at one instant, from the intervals."""
        edges = sorted([(a, 1) for a, _ in self.intervals] + [(b, -1) for _, b in self.intervals])
        level = peak = 0
        for _, change in edges:
            level += change
            peak = max(peak, level)
        return peak


@pytest.fixture
def reads() -> Iterator[Reads]:
    service = Reads()
    yield service
    service.server.close()


@pytest.fixture
def model() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    yield server
    server.close()


def _setup(world: Any, reads: Reads, model: FakeOpenAI) -> None:
    add_tool(world.tenant, "r_read", kind="http", url=reads.server.url("/read"),
             side_effect="read", timeout_s=10.0, max_retries=0)
    add_tool(world.tenant, "r_held", kind="http", url=reads.server.url("/held"),
             side_effect="read", timeout_s=20.0, max_retries=0)
    add_tool(world.tenant, "r_pay", kind="http", url=reads.server.url("/write"),
             side_effect="idempotent_write", timeout_s=10.0, max_retries=0,
             requires_approval=True, risk="high")
    openai_agent(world.tenant, model, tools=["r_read", "r_held", "r_pay"])


def _results(model: FakeOpenAI, n: int) -> list[dict[str, Any]]:
    return [m for m in model.requests[n].body["messages"] if m["role"] == "tool"]


def test_the_reads_of_one_reply_overlap_and_come_back_in_the_reply_order(world, reads, model):
    _setup(world, reads, model)
    orders = [f"A-{i}" for i in range(5)]
    model.push(reply("five", tool_calls=[("r_read", {"order": o}) for o in orders]),
               reply('{"answer": "done"}'))
    task = drive(submit(world.tenant, None, agent="llm", goal="five reads").pk)

    assert task.status == TaskStatus.SUCCEEDED
    assert reads.most_at_once() == 5
    results = _results(model, 1)
    assert [m["tool_call_id"] for m in results] == [f"step_{n}" for n in range(1, 6)]
    assert [json.loads(m["content"])["output"]["order"] for m in results] == orders
    assert len({s.idempotency_key for s in Step.objects.filter(task=task, kind="tool")}) == 5
    assert task_replay(task.pk).problems == ()


@pytest.mark.parametrize("bound", [1, 2])
def test_a_reply_runs_at_most_parallel_tool_calls_at_once_in_its_order(
        world, reads, model, settings, bound):
    """1: one after another, as before calls ran together."""
    settings.TETHER = {**settings.TETHER, "PARALLEL_TOOL_CALLS": bound}
    _setup(world, reads, model)
    model.push(reply("five", tool_calls=[("r_read", {"order": f"A-{i}"}) for i in range(5)]),
               reply('{"answer": "done"}'))
    task = drive(submit(world.tenant, None, agent="llm", goal="five reads, bounded").pk)

    assert task.status == TaskStatus.SUCCEEDED
    assert len(reads.intervals) == 5
    assert reads.most_at_once() == bound
    assert [m["tool_call_id"] for m in _results(model, 1)] == [f"step_{n}" for n in range(1, 6)]


def test_the_cards_of_one_reply_are_decided_one_by_one_and_the_task_waits_for_the_last(
        world, reads, model):
    _setup(world, reads, model)
    model.push(reply("pay two, read one", tool_calls=[
        ("r_pay", {"to": "ada", "cents": 10}), ("r_read", {"order": "A-1"}),
        ("r_pay", {"to": "bob", "cents": 20})]), reply('{"answer": "done"}'))
    task = drive(submit(world.tenant, None, agent="llm", goal="pay").pk)

    assert task.status == TaskStatus.WAITING_FOR_APPROVAL
    assert len(reads.intervals) == 1  # the read ran before any decision
    first, second = Approval.objects.filter(task=task).order_by("step__step_no")
    reviewer = actor_of(world.users["reviewer"])
    approval_decide(approval_id=second.pk, tenant_id=world.tenant.pk, actor=reviewer,
                    decision="reject", comment="not bob")
    assert drive(task.pk).status == TaskStatus.WAITING_FOR_APPROVAL  # one card still open
    assert Event.objects.filter(task=task, type="approval_decided").count() == 1
    approval_decide(approval_id=first.pk, tenant_id=world.tenant.pk, actor=reviewer,
                    decision="approve", args={"to": "ada", "cents": 5})
    task = drive(task.pk)

    assert task.status == TaskStatus.SUCCEEDED
    results = [json.loads(m["content"]) for m in _results(model, 1)]
    assert results[0]["output"]["done"] == {"to": "ada", "cents": 5}
    assert results[1]["output"]["order"] == "A-1"
    assert results[2]["status"] == "REJECTED"
    assert task.tool_calls == 2
    assert task_replay(task.pk).problems == ()


def test_a_card_decided_on_a_stale_version_of_a_reply_is_still_bound_to_its_arguments(
        world, reads, model):
    """A reply's card is not bound to the task's version (its siblings move it),
    but to its step and arguments: an action changed since it was shown is refused."""
    _setup(world, reads, model)
    model.push(reply("pay two", tool_calls=[
        ("r_pay", {"to": "ada", "cents": 10}), ("r_pay", {"to": "bob", "cents": 20})]))
    task = drive(submit(world.tenant, None, agent="llm", goal="pay").pk)
    assert task.status == TaskStatus.WAITING_FOR_APPROVAL
    card = Approval.objects.filter(task=task).order_by("step__step_no").first()
    assert card is not None
    Step.objects.filter(pk=card.step_id).update(args={"to": "eve", "cents": 10_000})
    with pytest.raises(Exception) as refused:
        approval_decide(approval_id=card.pk, tenant_id=world.tenant.pk,
                        actor=actor_of(world.users["reviewer"]), decision="approve")
    assert getattr(refused.value, "code", "") == "stale_arguments"


def test_a_call_waiting_for_room_does_not_start_after_a_cancel(world, reads, model, settings):
    """Two of four calls go out (the bound); the task is canceled while they
    are held: their results are discarded, and the two that waited never start."""
    settings.TETHER = {**settings.TETHER, "PARALLEL_TOOL_CALLS": 2}
    _setup(world, reads, model)
    model.push(reply("four", tool_calls=[("r_held", {"order": f"H-{i}"}) for i in range(4)]))
    task = submit(world.tenant, None, agent="llm", goal="four held reads")
    admit_created_tasks()
    running = InThread(lambda: run_slice(task.pk))
    try:
        wait_for(lambda: len(reads.held) == 2, timeout=20, interval=0.02,
                 message="two calls in flight")
        task_cancel(task_id=task.pk, actor=SYSTEM, reason="enough")
    finally:
        reads.release.set()
    running.join()

    assert sorted(reads.held) == ["H-0", "H-1"]  # the first two; the others never went out
    steps = {s.args["order"]: s for s in Step.objects.filter(task=task, kind="tool")}
    assert {s.status for s in steps.values()} == {"DISCARDED"}  # closed by the cancel
    # the two sent answered too late: kept, never applied; the two others never ran
    assert [bool(steps[o].late_output) for o in ("H-0", "H-1", "H-2", "H-3")] == [
        True, True, False, False]
    assert all(s.output is None for s in steps.values())
    assert Event.objects.filter(task=task, type="result_discarded").count() == 2
