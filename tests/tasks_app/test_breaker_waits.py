"""Tasks and circuit breakers, run in-process against real fakes at the edge (an
HTTP tool server, an OpenAI-compatible server): an open breaker holds the call,
the task waits without calling or spending retries, and the probe's success
closes the breaker and wakes the waiting tasks. Also: the per-tool retry
delays, and the model's backoff growing across slices."""
from __future__ import annotations

import pytest
from django.utils import timezone

from tasks_app.machine import TaskStatus
from tasks_app.models import Event, Step, StepStatus, Task
from tasks_app.runner.backoff import backoff_s
from tasks_app.runner.breaker_waits import tool_admit, tool_record
from tasks_app.runner.hops import CallerHop
from tasks_app.runner.loop import run_slice, slice_of
from tasks_app.services.admission import admit_created_tasks
from tasks_app.services.dispatch import MANUAL_QUEUE
from tasks_app.snapshot import TaskSnapshot
from tests.factories import submit
from tests.fakes.fixtures import openai_agent, openai_server  # noqa: F401 - fixture
from tests.fakes.http_tool_server import FakeToolServer, Recorded, Reply
from tests.fakes.openai_server import error, reply
from tests.fakes.runtime import add_agent, add_tool, fake_http  # noqa: F401 - fixture
from tests.helpers import drive
from tests.system.history import assert_history_intact
from tools_app.executor import OutcomeKind, ToolOutcome
from tools_app.executor.types import ToolSpec
from tools_app.models import Breaker, BreakerState, BreakerWaiter, LedgerStatus, ToolExecution

pytestmark = pytest.mark.django_db(transaction=True)

FINAL = {"final": {"ok": True}}


class Downstream:
    """The fake's /lookup answers 503 while `down`, else 200."""

    def __init__(self, fake: FakeToolServer) -> None:
        self.down = True
        self.fake = fake
        fake.on("POST", "/lookup", self._answer)

    def _answer(self, request: Recorded) -> Reply:
        return Reply(503, {"error": "down"}) if self.down else Reply(200, {"ok": True})

    def calls_of(self, task_id: int) -> int:
        return sum(1 for r in self.fake.requests_to("POST", "/lookup")
                   if r.headers.get("x-tether-task") == str(task_id))


def _lookup_tool(world, fake: FakeToolServer, **fields) -> None:  # type: ignore[no-untyped-def]
    add_tool(world.tenant, "lookup", kind="http", url=fake.url("/lookup"), target="",
             **{"max_retries": 5, "retry_delays_s": [0],
                "breaker": {"failures": 2, "cooldown_s": 60}, **fields})
    add_agent(world.tenant, "looker", ["lookup"])


def _task(world):  # type: ignore[no-untyped-def]
    task = submit(world.tenant, [{"tool": "lookup", "args": {"q": "x"}}, FINAL], agent="looker")
    admit_created_tasks()
    return task


def _types(task_id: int) -> list[str]:
    return list(Event.objects.filter(task_id=task_id, type__startswith="breaker_")
                .order_by("id").values_list("type", flat=True))


def _cool_down_ends(breaker_id: int) -> None:
    """The cool-down is a minute, so a slow machine never sees it end before the
    test has checked that calls are held; here it ends now."""
    Breaker.objects.filter(pk=breaker_id).update(open_until=timezone.now())


def _breaker() -> Breaker:
    return Breaker.objects.get(kind="tool", name="lookup")


def test_an_open_tool_breaker_holds_calls_and_its_probe_wakes_the_waiting_tasks(
        world, fake_http):  # noqa: F811
    downstream = Downstream(fake_http)
    _lookup_tool(world, fake_http)
    a, b = _task(world), _task(world)

    assert run_slice(a.pk).ended == "later"  # 503: retried at once (retry_delays_s [0])
    assert run_slice(a.pk).ended == "later"  # 503 again: the second failure opens it
    assert _breaker().state == BreakerState.OPEN
    assert _types(a.pk) == ["breaker_opened"]
    step_a = Step.objects.get(task=a, step_no=1)
    assert step_a.attempt == 2 and downstream.calls_of(a.pk) == 2

    # While it is open, neither task calls, nor spends a retry.
    assert run_slice(a.pk).ended == "later"
    assert run_slice(b.pk).ended == "later"
    assert downstream.calls_of(a.pk) == 2 and downstream.calls_of(b.pk) == 0
    assert Step.objects.get(pk=step_a.pk).attempt == 2
    step_b = Step.objects.get(task=b, step_no=1)
    assert (step_b.status, step_b.attempt) == (StepStatus.RUNNING, 0)
    ledger_b = ToolExecution.objects.get(idempotency_key=step_b.idempotency_key)
    assert (ledger_b.status, ledger_b.attempts, ledger_b.claimed_by) == (
        LedgerStatus.FAILED_RETRYABLE, [], "")  # the claim was given back: no attempt
    assert _types(a.pk) == ["breaker_opened", "breaker_waiting"]
    assert _types(b.pk) == ["breaker_waiting"]
    waiting = Task.objects.get(pk=b.pk)
    assert waiting.lease_owner == "" and waiting.next_run_at >= _breaker().open_until
    assert Task.objects.get(pk=b.pk).tool_calls == 0

    # The downstream is back; after the cool-down, one task probes and closes it.
    downstream.down = False
    MANUAL_QUEUE.clear()
    _cool_down_ends(_breaker().pk)
    run_slice(a.pk)
    assert _breaker().state == BreakerState.CLOSED
    assert b.pk in [task_id for task_id, _delay in MANUAL_QUEUE]  # woken at once
    assert _types(b.pk) == ["breaker_waiting", "breaker_closed"]
    assert not BreakerWaiter.objects.exists()

    for task in (a, b):
        done = drive(task.pk)
        assert done.status == TaskStatus.SUCCEEDED, done.failure_detail
        assert_history_intact(done)
    assert downstream.calls_of(a.pk) == 3 and downstream.calls_of(b.pk) == 1


def test_a_business_error_is_an_answer_and_never_opens_the_breaker(world, fake_http):  # noqa: F811
    fake_http.on("POST", "/lookup", Reply(404, {"error": "no such order"}))
    _lookup_tool(world, fake_http)
    for _ in range(3):
        task = drive(_task(world).pk)
        assert task.status == TaskStatus.SUCCEEDED
    assert not Breaker.objects.exists()


def test_a_tool_retry_policy_fails_fast_then_cools_down(world, fake_http):  # noqa: F811
    Downstream(fake_http)
    _lookup_tool(world, fake_http, max_retries=3, retry_delays_s=[0, 30],
                 breaker={"enabled": False})
    task = _task(world)
    run_slice(task.pk)
    run_slice(task.pk)
    delays = [e.payload["delay_s"] for e in
              Event.objects.filter(task=task, type="retryable_error").order_by("id")]
    assert delays[0] == 0 and 30 <= delays[1] <= 33
    step = Step.objects.get(task=task, step_no=1)
    assert step.status == StepStatus.RETRYING and step.attempt == 2
    assert (step.next_attempt_at - timezone.now()).total_seconds() > 25
    assert run_slice(task.pk).ended == "later"  # still cooling down: no call
    assert len(fake_http.requests_to("POST", "/lookup")) == 2
    assert not Breaker.objects.exists()  # disabled for this tool


def test_an_open_model_breaker_holds_the_call_without_counting_it(
        world, openai_server):  # noqa: F811
    openai_agent(world.tenant, openai_server,
                 model={"max_retries": 0, "breaker": {"failures": 2, "cooldown_s": 60}})
    openai_server.push(error(503), error(503), model="primary")
    task = submit(world.tenant, None, agent="llm", goal="Say done")
    other = submit(world.tenant, None, agent="llm", goal="Say done too")
    admit_created_tasks()

    run_slice(task.pk)
    run_slice(task.pk)  # the second failure opens it
    breaker = Breaker.objects.get(kind="model", name="primary")
    assert breaker.state == BreakerState.OPEN and breaker.target == openai_server.base_url
    assert len(openai_server.requests) == 2
    assert Task.objects.get(pk=task.pk).model_calls == 2  # failed calls count

    assert run_slice(task.pk).ended == "later"
    assert run_slice(other.pk).ended == "later"
    assert len(openai_server.requests) == 2  # held: nobody called
    assert Task.objects.get(pk=task.pk).model_calls == 2
    assert Task.objects.get(pk=other.pk).model_calls == 0
    assert _types(task.pk) == ["breaker_opened", "breaker_waiting"]
    assert _types(other.pk) == ["breaker_waiting"]

    openai_server.push(reply('{"answer": "done"}'), reply('{"answer": "done too"}'))
    _cool_down_ends(breaker.pk)
    MANUAL_QUEUE.clear()
    done = drive(task.pk)
    assert done.status == TaskStatus.SUCCEEDED
    assert Breaker.objects.get(pk=breaker.pk).state == BreakerState.CLOSED
    assert other.pk in [task_id for task_id, _delay in MANUAL_QUEUE]
    assert _types(other.pk) == ["breaker_waiting", "breaker_closed"]
    assert drive(other.pk).status == TaskStatus.SUCCEEDED
    assert len(openai_server.requests) == 4


def test_a_held_primary_model_goes_straight_to_the_fallback(world, openai_server):  # noqa: F811
    openai_agent(world.tenant, openai_server, model={
        "max_retries": 0, "breaker": {"failures": 1, "cooldown_s": 60},
        "fallback": {"name": "backup"}})
    openai_server.push(error(503), model="primary")
    openai_server.push(reply('{"answer": "from the backup"}'), reply('{"answer": "again"}'),
                       model="backup")
    first = drive(submit(world.tenant, None, agent="llm", goal="One").pk)
    assert first.status == TaskStatus.SUCCEEDED  # the primary failed once and opened
    second = drive(submit(world.tenant, None, agent="llm", goal="Two").pk)
    assert second.status == TaskStatus.SUCCEEDED
    assert [r.model for r in openai_server.requests] == ["primary", "backup", "backup"]
    # every request counts against the budget, the failed one before the reply too
    assert (first.model_calls, second.model_calls) == (2, 1)


def test_the_model_backoff_grows_across_slices(world, openai_server, settings):  # noqa: F811
    openai_agent(world.tenant, openai_server, model={"max_retries": 0,
                                                     "breaker": {"enabled": False}})
    openai_server.responder = lambda request: error(500)
    task = submit(world.tenant, None, agent="llm", goal="Say done")
    admit_created_tasks()
    counts, delays = [], []
    for _ in range(4):
        assert run_slice(task.pk).ended == "later"
        after = timezone.now()  # the delay was counted from before now: at most this much left
        row = Task.objects.get(pk=task.pk)
        counts.append(row.model_failures)
        delays.append((row.next_run_at - after).total_seconds())
    assert counts == [1, 2, 3, 4]  # counted on the task: it survives the slices
    cfg = settings.TETHER
    for n, delay in enumerate(delays, start=1):
        assert delay <= min(cfg["BACKOFF_MAX_S"], cfg["BACKOFF_BASE_S"] * 2 ** (n - 1))
    assert Task.objects.get(pk=task.pk).model_calls == 4


@pytest.mark.django_db  # one thread: no real commits needed
def test_an_mcp_tool_has_a_breaker_like_an_http_tool(world):  # type: ignore[no-untyped-def]
    task = submit(world.tenant, [FINAL])
    snap = TaskSnapshot.of(task)
    spec = ToolSpec(name="shop__record", kind="mcp", target="record",
                    url="http://127.0.0.1:9/mcp", breaker={"failures": 2, "cooldown_s": 60})
    for _ in range(2):
        gate = tool_admit(snap, spec, owner="w1")
        assert gate.allowed
        tool_record(snap, gate, ToolOutcome(kind=OutcomeKind.TRANSIENT,
                                            error={"type": "connect_error"}), owner="w1")

    assert not tool_admit(snap, spec, owner="w1").allowed  # open: no call is made
    assert Breaker.objects.get(kind="tool", name="shop__record").state == BreakerState.OPEN


@pytest.mark.django_db  # one thread: no real commits needed
def test_backoff_with_full_jitter_grows_then_stays_under_the_cap(settings):
    settings.TETHER = {**settings.TETHER, "BACKOFF_BASE_S": 1.0, "BACKOFF_MAX_S": 8.0}
    for attempt, ceiling in ((1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (9, 8.0)):
        samples = [backoff_s(attempt, full_jitter=True) for _ in range(300)]
        assert all(0 <= s <= ceiling for s in samples)
        assert max(samples) > ceiling * 0.75  # the whole range is used: it grows
        assert min(samples) < ceiling * 0.25  # full jitter: down to nothing


class _Phases(CallerHop):
    """The caller's hop, noting the name of each database phase it runs."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    async def __call__(self, fn, /, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.names.append(getattr(fn, "__name__", ""))
        return await super().__call__(fn, *args, **kwargs)


def test_a_model_breaker_is_asked_in_the_planning_phase_not_in_one_of_its_own(
        world, openai_server):  # noqa: F811
    openai_agent(world.tenant, openai_server, model={
        "max_retries": 0, "breaker": {"failures": 1, "cooldown_s": 60},
        "fallback": {"name": "backup"}})
    openai_server.push(reply('{"answer": "done"}'), error(503), model="primary")
    openai_server.push(reply('{"answer": "from the backup"}'), reply('{"answer": "again"}'),
                       model="backup")

    def run(task_id: int) -> list[str]:
        hop = _Phases()
        hop.drive(slice_of(task_id, hop=hop))
        return hop.names

    healthy = submit(world.tenant, None, agent="llm", goal="One")
    admit_created_tasks()
    assert run(healthy.pk) == ["lease_take", "plan_step", "record_model_reply", "lease_release"]
    assert Task.objects.get(pk=healthy.pk).status == TaskStatus.SUCCEEDED

    failing = submit(world.tenant, None, agent="llm", goal="Two")
    admit_created_tasks()
    assert run(failing.pk)[:4] == ["lease_take", "plan_step", "record", "admit"]  # the fallback's
    assert Breaker.objects.get(kind="model", name="primary").state == BreakerState.OPEN

    held = submit(world.tenant, None, agent="llm", goal="Three")
    admit_created_tasks()
    # the open primary is read ahead: no call to it, the backup's breaker asked
    assert run(held.pk) == ["lease_take", "plan_step", "admit", "record_model_reply",
                            "lease_release"]
    assert [r.model for r in openai_server.requests] == ["primary", "primary", "backup", "backup"]
