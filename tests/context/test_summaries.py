"""The context builder and summaries: bounded context over long tasks,
summary versions with the events they cover, rollback, model summaries."""
from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from foundations.errors import DomainError
from tasks_app.context.builder import build_context
from tasks_app.context.summaries import summary_list, summary_maybe_create, summary_rollback
from tasks_app.machine import TaskStatus
from tasks_app.models import ContextSummary, Event, Task
from tasks_app.runner.breaker_waits import summary_guard
from tasks_app.runner.step import Next, advance_one_step
from tasks_app.services.admission import admit_created_tasks
from tasks_app.services.demo import demo_agent_ensure, demo_tools_ensure
from tasks_app.snapshot import TaskSnapshot
from tests.factories import TenantFactory, actor_of, submit
from tests.fakes.fixtures import openai_agent
from tests.fakes.openai_server import error, reply
from tools_app.models import Breaker, BreakerState
from tools_app.registry import tool_specs

pytestmark = pytest.mark.django_db(transaction=True)

LONG = {"max_steps": 1000, "max_model_calls": 1000, "max_tool_calls": 1000,
        "no_progress_repeats": 0, "no_progress_window": 0}


def _long_agent(tenant, name="long"):  # type: ignore[no-untyped-def]
    return demo_agent_ensure(tenant, name=name, on_exhaustion="fail", **LONG)


def _script(n: int) -> list[dict]:
    calls = [{"tool": "lookup_order", "args": {"order_id": "A-1" if i % 2 else "A-2"},
              "reason": f"look {i}"} for i in range(n)]
    return [*calls, {"final": {"done": n}}]


def _context(task_id: int):  # type: ignore[no-untyped-def]
    snap = TaskSnapshot.of(Task.objects.get(pk=task_id))
    specs = tool_specs(tenant_id=snap.tenant_id, names=list(snap.agent.get("tools") or []))
    return build_context(snap, tools=specs)


def _advance_to(task_id: int, steps: int) -> Task:
    task = Task.objects.get(pk=task_id)
    while task.steps_count < steps and task.status == TaskStatus.RUNNING:
        result = advance_one_step(task_id=task_id, owner="test")
        task = Task.objects.get(pk=task_id)
        assert result.next is Next.CONTINUE or task.status != TaskStatus.RUNNING, result
    assert task.steps_count == steps
    return task


def test_context_size_and_queries_stay_bounded_over_a_200_step_task(world):
    _long_agent(world.tenant)
    task = submit(world.tenant, _script(200), agent="long", goal="Look up orders, many times")
    admit_created_tasks()

    sizes: dict[int, int] = {}
    queries: dict[int, int] = {}
    for n in range(1, 201):
        _advance_to(task.pk, n)
        with CaptureQueriesContext(connection) as captured:
            context = _context(task.pk)
        sizes[n], queries[n] = context.size_chars(), len(captured)
        assert len(context.window) <= 16  # W + threshold

    assert queries[10] == queries[200]
    assert len(set(queries.values())) == 1, "building the context costs the same at every step"
    assert max(sizes.values()) < 20_000
    assert sizes[200] <= 1.2 * max(sizes[n] for n in range(20, 60))
    # The old steps live in summaries, the context shows the newest only.
    context = _context(task.pk)
    assert context.summary is not None and context.window[-1]["step_no"] == 200
    assert context.summary.data["covers_until_step"] >= 200 - 16
    versions = ContextSummary.objects.filter(task=task).count()
    assert versions >= 20
    assert Event.objects.filter(task=task, type="context_summarized").count() == versions


def test_each_summary_version_records_the_events_of_the_steps_it_folds_in(world):
    _long_agent(world.tenant)
    task = submit(world.tenant, _script(40), agent="long", goal="Look up orders")
    admit_created_tasks()
    _advance_to(task.pk, 40)

    rows = list(ContextSummary.objects.filter(task=task).order_by("version"))
    assert len(rows) >= 2
    first, second = rows[0], rows[1]
    assert first.covers_until_step == 8 and second.covers_until_step == 16
    covered_steps = {e.payload.get("step_no") for e in Event.objects.filter(pk__in=first.event_ids)}
    assert covered_steps - {None} == set(range(1, 9))
    assert min(second.event_ids) > max(first.event_ids)
    second_steps = {e.payload.get("step_no") for e in Event.objects.filter(pk__in=second.event_ids)}
    assert second_steps - {None} == set(range(9, 17))
    assert "- step 16 lookup_order" in second.text and "- step 1 lookup_order" in second.text
    assert second.created_by == "summarizer:deterministic"


def test_an_operator_rolls_a_summary_back_and_the_next_one_is_built_on_it(world):
    _long_agent(world.tenant)
    task = submit(world.tenant, _script(60), agent="long", goal="Look up orders")
    admit_created_tasks()
    _advance_to(task.pk, 36)
    assert _context(task.pk).summary.id == "summary:v3"  # v1: steps 1-8, v2: 1-16, v3: 1-24
    version_before = Task.objects.get(pk=task.pk).version

    done = summary_rollback(task_id=task.pk, tenant_id=world.tenant.pk, version=1,
                            actor=actor_of(world.users["operator"]),
                            expected_version=version_before,
                            comment="v2 and v3 lost the refund amount")

    assert (done.version, done.from_version, done.deactivated) == (1, 3, (2, 3))
    context = _context(task.pk)
    assert context.summary.id == "summary:v1"
    assert [v["step_no"] for v in context.window] == list(range(21, 37))
    omitted = [item for item in context.pinned if item.id == "omitted"]
    assert omitted and "Steps 9-20" in omitted[0].text
    event = Event.objects.get(pk=done.event_id)
    assert event.type == "summary_rolled_back" and event.actor == "t-main-operator"
    assert event.payload["deactivated"] == [2, 3] and "refund" in event.payload["comment"]
    listed = summary_list(task_id=task.pk, tenant_id=world.tenant.pk)
    assert [(s["version"], s["active"], s["in_use"]) for s in listed] == [
        (3, False, False), (2, False, False), (1, True, True)]

    # The next step folds the backlog into a new version built on v1.
    _advance_to(task.pk, 37)
    fresh = ContextSummary.objects.get(task=task, active=True, version=4)
    built = Event.objects.filter(task=task, type="context_summarized").latest("id")
    assert built.payload["built_on"] == 1 and built.payload["from_step"] == 9
    assert fresh.covers_until_step == 37 - 8
    assert min(fresh.event_ids) > max(ContextSummary.objects.get(task=task, version=1).event_ids)
    context = _context(task.pk)
    assert context.summary.id == "summary:v4"
    assert not any(item.id == "omitted" for item in context.pinned)


def test_a_rollback_is_refused_for_a_wrong_version_another_tenant_or_a_requester(world):
    _long_agent(world.tenant)
    task = submit(world.tenant, _script(30), agent="long", goal="Look up orders")
    admit_created_tasks()
    _advance_to(task.pk, 30)
    operator = actor_of(world.users["operator"])
    active = ContextSummary.objects.filter(task=task, active=True).latest("version").version

    with pytest.raises(DomainError) as same:
        summary_rollback(task_id=task.pk, tenant_id=world.tenant.pk, version=active, actor=operator)
    assert same.value.kind == "invalid"
    other = TenantFactory(name="t-other")
    demo_tools_ensure(other)
    with pytest.raises(DomainError) as foreign:
        summary_rollback(task_id=task.pk, tenant_id=other.pk, version=1, actor=operator)
    assert foreign.value.kind == "not_found"
    with pytest.raises(DomainError) as requester:
        summary_rollback(task_id=task.pk, tenant_id=world.tenant.pk, version=1,
                         actor=actor_of(world.users["requester"]))
    assert requester.value.kind == "forbidden"
    with pytest.raises(DomainError) as stale:
        summary_rollback(task_id=task.pk, tenant_id=world.tenant.pk, version=1, actor=operator,
                         expected_version=0)
    assert stale.value.kind == "conflict"
    assert ContextSummary.objects.filter(task=task, active=True).latest("version").version == active
    assert not Event.objects.filter(task=task, type="summary_rolled_back").exists()


def _scripted_model(n_calls: int, *, summary_fails: bool = False):  # type: ignore[no-untyped-def]
    """Tool calls until `n_calls`, then a final answer; summary requests (no tools) answered."""
    state = {"calls": 0, "summaries": 0}

    def respond(request):  # type: ignore[no-untyped-def]
        if "tools" not in request.body:
            state["summaries"] += 1
            if summary_fails:
                return error(400, "no summaries today")
            return reply(f"Notes {state['summaries']}: looked up A-1 and A-2 repeatedly.",
                         usage=(50, 7))
        state["calls"] += 1
        if state["calls"] > n_calls:
            return reply('{"answer": "done"}')
        order = "A-1" if state["calls"] % 2 else "A-2"
        return reply(tool_calls=[("lookup_order", {"order_id": order})])

    return respond, state


def test_openai_agents_are_summarized_by_the_model_and_the_request_stays_bounded(
        world, openai_server):
    openai_agent(world.tenant, openai_server, **LONG)
    respond, state = _scripted_model(40)
    openai_server.responder = respond
    task = submit(world.tenant, None, agent="llm", goal="Look up orders")
    admit_created_tasks()
    _advance_to(task.pk, 41)

    task = Task.objects.get(pk=task.pk)
    assert task.status == TaskStatus.SUCCEEDED
    summaries = list(ContextSummary.objects.filter(task=task).order_by("version"))
    assert summaries and all(s.created_by == "summarizer:model" for s in summaries)
    assert state["summaries"] == len(summaries)
    event = Event.objects.filter(task=task, type="context_summarized").latest("id")
    assert event.payload["method"] == "model" and event.payload["tokens"] == 57
    decision_tokens = sum(s.model_log.get("tokens", 0) for s in task.steps.all())
    assert task.tokens == decision_tokens + 57 * len(summaries)
    assert task.model_calls == len(openai_server.requests)  # summaries are model calls too

    decisions = [r for r in openai_server.requests if "tools" in r.body]
    sizes = [len(r.body["messages"]) for r in decisions]
    assert max(sizes) <= 2 + 2 * 16  # system, context, then at most W + threshold steps
    late = decisions[-1].body["messages"][1]["content"]
    assert f"[summary:v{len(summaries)}]" in late and "Notes" in late


def test_a_failing_model_summary_falls_back_to_the_deterministic_digest(world, openai_server):
    openai_agent(world.tenant, openai_server, model={"max_retries": 0}, **LONG)
    respond, state = _scripted_model(20, summary_fails=True)
    openai_server.responder = respond
    task = submit(world.tenant, None, agent="llm", goal="Look up orders")
    admit_created_tasks()
    _advance_to(task.pk, 21)

    first = ContextSummary.objects.filter(task_id=task.pk).order_by("version").first()
    assert first is not None and first.created_by == "summarizer:deterministic"
    assert "- step 8 lookup_order" in first.text
    event = Event.objects.filter(task_id=task.pk, type="context_summarized").first()
    assert "HTTP 400" in event.payload["model_error"]
    task = Task.objects.get(pk=task.pk)
    assert task.status == TaskStatus.SUCCEEDED
    assert task.model_calls == len(openai_server.requests)  # the failed call counts too


def test_a_summary_call_goes_through_the_models_breaker(world, openai_server, settings):
    """A summary's failed call counts towards the model's breaker like a decision's;
    while the breaker is open a summary is the deterministic digest, with no call."""
    openai_agent(world.tenant, openai_server,
                 model={"max_retries": 0, "breaker": {"failures": 1, "cooldown_s": 600}}, **LONG)
    respond, state = _scripted_model(40)

    def summaries_down(request):  # type: ignore[no-untyped-def]
        if "tools" not in request.body:
            state["summaries"] += 1
            return error(503, "summaries are down")
        return respond(request)

    openai_server.responder = summaries_down
    settings.TETHER = {**settings.TETHER, "SUMMARY_THRESHOLD_STEPS": 1000,
                       "SUMMARY_THRESHOLD_CHARS": 10**9}
    first, second = (submit(world.tenant, None, agent="llm", goal="Look up orders")
                     for _ in range(2))
    admit_created_tasks()
    for task in (first, second):
        _advance_to(task.pk, 20)
    assert not ContextSummary.objects.exists() and state["summaries"] == 0
    settings.TETHER = {**settings.TETHER, "SUMMARY_THRESHOLD_STEPS": 8}
    calls_before = {t.pk: Task.objects.get(pk=t.pk).model_calls for t in (first, second)}

    def summarize(task_id: int) -> ContextSummary | None:
        snap = TaskSnapshot.of(Task.objects.get(pk=task_id))
        return summary_maybe_create(task_id=task_id, guard=summary_guard(snap, owner="test"))

    made = summarize(first.pk)  # the call fails: an outage, and the breaker opens
    assert made is not None and made.created_by == "summarizer:deterministic"
    assert state["summaries"] == 1
    breaker = Breaker.objects.get(kind="model", name="primary")
    assert breaker.state == BreakerState.OPEN
    assert Task.objects.get(pk=first.pk).model_calls == calls_before[first.pk] + 1

    held = summarize(second.pk)  # the breaker holds the call: none is made, none counted
    assert held is not None and held.created_by == "summarizer:deterministic"
    assert state["summaries"] == 1
    assert Task.objects.get(pk=second.pk).model_calls == calls_before[second.pk]
    event = Event.objects.filter(task_id=second.pk, type="context_summarized").get()
    assert "circuit breaker" in event.payload["model_error"]
