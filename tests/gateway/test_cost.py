"""Cost: tasks run by the `openai` backend against the fake OpenAI-compatible
server (a real HTTP server), priced from the profile's `model.prices`; the
`max_cost` budget; the daily spend rollup; the task resource's usage."""
from __future__ import annotations

from decimal import Decimal

import pytest
from django.db.models import Sum
from django.utils import timezone
from rest_framework.test import APIClient

from accounts_app.models import Role
from accounts_app.services.accounts import api_key_create
from foundations.errors import DomainError
from tasks_app.console.selectors import spend_summary
from tasks_app.machine import TaskStatus
from tasks_app.models import DailySpend, Step, Task
from tasks_app.models.spend import SPEND_SHARDS
from tasks_app.pricing import PICO, pico_text
from tasks_app.services.tasks import task_resume
from tests.factories import actor_of, submit
from tests.fakes.fixtures import openai_agent
from tests.fakes.openai_server import error, reply
from tests.helpers import drive

pytestmark = pytest.mark.django_db(transaction=True)

PRICES = {"input_per_mtok": "2.5", "output_per_mtok": "10", "cached_input_per_mtok": "1.25"}
BACKUP_PRICES = {"input_per_mtok": 0.5, "output_per_mtok": 1.5}
LOOKUP = [("lookup_order", {"order_id": "A-1"})]


def _agent(world, server, **fields):  # type: ignore[no-untyped-def]
    model = {"prices": PRICES, "max_retries": 0,
             "fallback": {"name": "backup", "prices": BACKUP_PRICES}}
    return openai_agent(world.tenant, server, model=model, **fields)


def _dollars(pico: int) -> Decimal:
    return Decimal(pico) / PICO


def test_cost_per_call_step_and_task_from_the_replies_usage(world, openai_server):
    _agent(world, openai_server)
    openai_server.push(
        # 600 uncached input at $2.5, 400 cached at $1.25, 200 output at $10 per Mtok
        reply("look", tool_calls=LOOKUP, usage=(1000, 200), cached=400),
        # 1500 input at $2.5, 100 output at $10
        reply('{"answer": "with Ada"}', usage=(1500, 100)),
    )
    task = drive(submit(world.tenant, None, agent="llm", goal="Where is A-1?").pk)

    assert task.status == TaskStatus.SUCCEEDED
    assert (task.input_tokens, task.output_tokens, task.cached_input_tokens) == (2500, 300, 400)
    assert task.tokens == 2800  # the total is kept as before
    assert _dollars(task.cost_pico) == Decimal("0.004") + Decimal("0.00475")
    first, final = Step.objects.filter(task=task).order_by("step_no")
    assert first.model_log["usage"] == {"input_tokens": 1000, "output_tokens": 200,
                                        "cached_input_tokens": 400, "cost": "0.004",
                                        "priced": True}
    assert final.model_log["usage"]["cost"] == "0.00475"

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_key_create(user=world.users['operator'])}")
    usage = client.get(f"/api/v1/tasks/{task.pk}").json()["usage"]
    assert usage["cost"] == "0.00875"
    assert (usage["input_tokens"], usage["output_tokens"], usage["cached_input_tokens"],
            usage["tokens"], usage["model_calls"]) == (2500, 300, 400, 2800, 2)
    steps = client.get(f"/api/v1/tasks/{task.pk}/steps").json()
    items = steps["results"] if isinstance(steps, dict) else steps
    assert [s["model_log"]["usage"]["cost"] for s in items] == ["0.004", "0.00475"]

    row = DailySpend.objects.get(tenant=world.tenant)
    assert (row.day, row.agent, row.model, row.calls) == (timezone.now().date(), "llm",
                                                          "primary", 2)
    assert (row.input_tokens, row.output_tokens, row.cached_input_tokens) == (2500, 300, 400)
    assert row.cost_pico == task.cost_pico


def test_the_fallback_model_is_priced_at_its_own_prices_and_rolls_up_apart(world, openai_server):
    _agent(world, openai_server)
    openai_server.push(error(400, "bad request"), model="primary")  # not retried: the fallback
    openai_server.push(reply('{"answer": "ok"}', usage=(2000, 1000)), model="backup")
    first = drive(submit(world.tenant, None, agent="llm", goal="one").pk)
    openai_server.push(reply('{"answer": "ok"}', usage=(10, 10)), model="primary")
    second = drive(submit(world.tenant, None, agent="llm", goal="two").pk)

    assert first.status == second.status == TaskStatus.SUCCEEDED
    # 2000 * $0.5 + 1000 * $1.5 per Mtok
    assert _dollars(first.cost_pico) == Decimal("0.0025")
    assert _dollars(second.cost_pico) == Decimal("0.000125")
    rows = {r.model: r for r in DailySpend.objects.filter(tenant=world.tenant)}
    assert set(rows) == {"primary", "backup"}
    assert (rows["backup"].calls, rows["backup"].cost_pico) == (1, first.cost_pico)
    assert (rows["primary"].calls, rows["primary"].cost_pico) == (1, second.cost_pico)


def test_an_unpriced_model_counts_tokens_and_costs_nothing(world, openai_server):
    openai_agent(world.tenant, openai_server)
    openai_server.push(reply('{"answer": "ok"}', usage=(70, 30)))
    task = drive(submit(world.tenant, None, agent="llm", goal="g").pk)
    assert (task.input_tokens, task.output_tokens, task.cost_pico) == (70, 30, 0)
    log = Step.objects.get(task=task).model_log["usage"]
    assert (log["cost"], log["priced"]) == ("0.00", False)


def test_the_daily_rollup_adds_up_across_tasks_of_the_same_day(world, openai_server):
    _agent(world, openai_server)
    for _ in range(3):
        openai_server.push(reply('{"answer": "ok"}', usage=(400, 100)))
    tasks = [drive(submit(world.tenant, None, agent="llm", goal=f"g{i}").pk) for i in range(3)]
    rows = DailySpend.objects.filter(tenant=world.tenant)
    # one row per shard (consecutive task ids: three), each task's on its own
    assert sorted(r.shard for r in rows) == sorted(t.pk % SPEND_SHARDS for t in tasks)
    total = rows.aggregate(calls=Sum("calls"), cost=Sum("cost_pico"), input=Sum("input_tokens"),
                           output=Sum("output_tokens"))
    assert total["calls"] == 3
    assert total["cost"] == sum(t.cost_pico for t in tasks) == 3 * (400 * 25 + 100 * 100) * 10**5
    assert (total["input"], total["output"]) == (1200, 300)
    # what the dashboard reads adds the shards up
    today = spend_summary(world.tenant.pk, today=timezone.now().date())
    assert today["today"] == pico_text(total["cost"])
    assert [(r.calls, r.cost) for r in today["today_by_agent"]] == [(3, pico_text(total["cost"]))]


def test_max_cost_fail_after_the_reply_that_went_over_runs_no_tool(world, openai_server):
    _agent(world, openai_server, max_cost="0.003")
    openai_server.push(reply("look", tool_calls=LOOKUP, usage=(1000, 200), cached=400))  # $0.004
    task = drive(submit(world.tenant, None, agent="llm", goal="g").pk)

    assert task.status == TaskStatus.FAILED
    assert task.failure_reason == "max_cost"
    assert task.tool_calls == 0 and len(openai_server.requests) == 1
    step = Step.objects.get(task=task)
    assert step.status == "FAILED" and step.error["budget"] == "max_cost"
    assert (step.error["used"], step.error["limit"]) == ("0.004", "0.003")


def test_max_cost_is_checked_before_the_next_model_call(world, openai_server):
    _agent(world, openai_server, max_cost="0.004")
    # an unknown tool: an invalid decision, fed back to the model... which is not asked again
    openai_server.push(reply("x", tool_calls=[("no_such_tool", {})], usage=(1000, 200), cached=400))
    task = drive(submit(world.tenant, None, agent="llm", goal="g").pk)
    assert task.status == TaskStatus.FAILED and task.failure_reason == "max_cost"
    assert len(openai_server.requests) == 1
    assert _dollars(task.cost_pico) == Decimal("0.004")


def test_max_cost_escalate_then_resume_with_more_budget_runs_the_refused_call(
        world, openai_server):
    _agent(world, openai_server, max_cost="0.003", on_exhaustion="escalate")
    openai_server.push(reply("look", tool_calls=LOOKUP, usage=(1000, 200), cached=400))
    task = drive(submit(world.tenant, None, agent="llm", goal="g").pk)
    assert task.status == TaskStatus.WAITING_FOR_HUMAN
    assert task.tool_calls == 0

    with pytest.raises(DomainError) as refused:
        task_resume(task_id=task.pk, actor=actor_of(world.users[Role.OPERATOR]),
                    extend={"max_cost": "-1"})
    assert refused.value.details["extend"][0].startswith("max_cost:")
    task_resume(task_id=task.pk, actor=actor_of(world.users[Role.OPERATOR]),
                extend={"max_cost": "0.01"})
    openai_server.push(reply('{"answer": "with Ada"}', usage=(1500, 100)))
    task = drive(task.pk)
    assert task.status == TaskStatus.SUCCEEDED
    assert task.tool_calls == 1 and task.budget_extension["max_cost"] == "0.01"
    assert len(openai_server.requests) == 2  # the refused call ran from the queue, not re-asked
    assert Task.objects.get(pk=task.pk).cost_pico == task.cost_pico


def test_spend_shows_on_the_dashboard_the_agents_page_and_metrics(world, openai_server):
    from django.test import Client
    from prometheus_client.parser import text_string_to_metric_families

    _agent(world, openai_server)
    openai_server.push(reply("look", tool_calls=LOOKUP, usage=(1000, 200), cached=400),
                       reply('{"answer": "with Ada"}', usage=(1500, 100)))
    task = drive(submit(world.tenant, None, agent="llm", goal="g").pk)
    assert task.status == TaskStatus.SUCCEEDED

    console = Client()
    console.force_login(world.users[Role.ADMIN])
    page = console.get("/").content.decode()
    assert '<strong data-stat="spend-today">$0.00875</strong>' in page
    assert f'data-spend-day="{timezone.now().date().isoformat()}">$0.00875<' in page
    assert "llm · primary" in page
    agents = console.get("/agents/llm/").content.decode()
    assert f'data-cost-per-task="{task.agent_version}">$0.00875<' in agents
    detail = console.get(f"/tasks/{task.pk}/").content.decode()
    assert "<span data-step-cost>$0.004</span>" in detail

    scraped = Client().get("/metrics").content.decode()
    samples = {(s.name, frozenset(s.labels.items())): s.value
               for f in text_string_to_metric_families(scraped) for s in f.samples}
    assert samples[("tether_tenant_spend_today_dollars",
                    frozenset({"tenant": world.tenant.name}.items()))] == pytest.approx(0.00875)
    assert samples[("tether_model_cost_dollars_total",
                    frozenset({"model": "primary"}.items()))] >= 0.00875


def test_context_summaries_made_by_the_model_are_priced_too(world, openai_server):
    from tasks_app.models import ContextSummary
    from tasks_app.services.admission import admit_created_tasks
    from tests.context.test_summaries import LONG, _advance_to, _scripted_model

    _agent(world, openai_server, **LONG)
    respond, state = _scripted_model(20)  # tool calls use (10, 5) tokens, summaries (50, 7)
    openai_server.responder = respond
    task = submit(world.tenant, None, agent="llm", goal="Look up orders")
    admit_created_tasks()
    task = _advance_to(task.pk, 21)

    assert task.status == TaskStatus.SUCCEEDED
    summaries = ContextSummary.objects.filter(task=task, created_by="summarizer:model").count()
    assert summaries == state["summaries"] > 0
    decisions = len(openai_server.requests) - summaries
    per_decision = (10 * 25 + 5 * 100) * 10**5  # pico-dollars at $2.5 / $10 per Mtok
    per_summary = (50 * 25 + 7 * 100) * 10**5
    assert task.cost_pico == decisions * per_decision + summaries * per_summary
    assert (task.input_tokens, task.output_tokens) == (10 * decisions + 50 * summaries,
                                                       5 * decisions + 7 * summaries)
    row = DailySpend.objects.get(tenant=world.tenant)
    assert (row.calls, row.cost_pico) == (len(openai_server.requests), task.cost_pico)


def test_a_reply_whose_decision_is_fenced_still_costs_once(world, openai_server):
    """The spend commits with the decision; a task canceled while its model
    answered fences the decision, and the call is billed on its own, once."""
    from tasks_app.services.admission import admit_created_tasks
    from tasks_app.services.tasks import task_cancel

    _agent(world, openai_server)
    task = submit(world.tenant, None, agent="llm", goal="g")
    admit_created_tasks()

    def cancel_then_answer(received):  # type: ignore[no-untyped-def]
        task_cancel(task_id=task.pk, actor=actor_of(world.users["operator"]), reason="enough")
        return reply("look", tool_calls=LOOKUP, usage=(1000, 200), cached=400)  # $0.004

    openai_server.responder = cancel_then_answer
    task = drive(task.pk)

    assert task.status == TaskStatus.CANCELED
    assert not Step.objects.filter(task=task).exists()  # the late decision was not recorded
    assert len(openai_server.requests) == 1 and task.model_calls == 1
    assert _dollars(task.cost_pico) == Decimal("0.004")
    assert (task.input_tokens, task.output_tokens, task.cached_input_tokens) == (1000, 200, 400)
    row = DailySpend.objects.get(tenant=world.tenant)
    assert (row.calls, row.cost_pico, row.input_tokens) == (1, task.cost_pico, 1000)


def test_a_publisher_that_fails_after_the_decision_committed_costs_nothing_twice(
        world, openai_server, caplog):
    """Publication runs after the commit; a publisher that raises is logged, the
    step goes on, and the model call is counted once (it was billed with its
    decision; a failure read as the decision's would bill it again)."""
    from tasks_app.store import hooks

    _agent(world, openai_server)
    openai_server.push(reply("look", tool_calls=LOOKUP, usage=(1000, 200)),
                       reply('{"answer": "with Ada"}', usage=(1000, 200)))
    seen: list[str] = []

    def broken(event):  # type: ignore[no-untyped-def]
        raise RuntimeError("the live feed is down")

    hooks._publishers.insert(0, broken)
    hooks.on_event_committed(lambda event: seen.append(event.type))
    try:
        task = drive(submit(world.tenant, None, agent="llm", goal="g").pk)
    finally:
        hooks._publishers.remove(broken)
        hooks._publishers.pop()
    assert task.status == TaskStatus.SUCCEEDED
    assert task.model_calls == 2 and task.input_tokens == 2000
    assert DailySpend.objects.get(tenant=world.tenant).calls == 2
    assert {"decision_recorded", "step_succeeded", "final_accepted"} <= set(seen)
    assert "the live feed is down" in caplog.text
