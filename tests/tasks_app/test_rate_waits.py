"""Tasks and rate limits, run in-process against real fakes at the edge (an
HTTP tool server, an OpenAI-compatible server) and the real Redis: a call
whose slot is ahead is not made, the task notes that it waits and is handed
back holding no lease and spending no retry; its slot is kept for it, in the
order the tasks arrived. Also: the limits' field errors through the API."""
from __future__ import annotations

from typing import Any

import pytest

from accounts_app.models import Role
from tasks_app.models import AgentProfile, Event, Step, StepStatus, Task
from tasks_app.runner.loop import run_slice
from tasks_app.services.admission import admit_created_tasks
from tests.factories import submit
from tests.fakes.fixtures import openai_agent, openai_server  # noqa: F401 - fixture
from tests.fakes.http_tool_server import Reply
from tests.fakes.openai_server import reply
from tests.fakes.runtime import add_agent, add_tool, fake_http  # noqa: F401 - fixture
from tests.processes import REDIS_BROKER_URL
from tools_app.models import Tool, ToolExecution

pytestmark = pytest.mark.django_db(transaction=True)

FINAL = {"final": {"ok": True}}


@pytest.fixture(autouse=True)
def shared_buckets(settings: Any) -> None:
    settings.TETHER = {**settings.TETHER, "RATE_LIMIT_URL": REDIS_BROKER_URL,
                       "RATE_LIMIT_PERIOD_S": 60.0}


def _waits(task_id: int) -> list[dict[str, Any]]:
    return list(Event.objects.filter(task_id=task_id, type="rate_limit_waiting")
                .order_by("id").values_list("payload", flat=True))


def test_a_tool_over_its_requests_per_minute_waits_without_calling(
        world, fake_http) -> None:  # noqa: F811
    fake_http.on("POST", "/lookup", lambda request: Reply(200, {"ok": True}))
    add_tool(world.tenant, "lookup", kind="http", url=fake_http.url("/lookup"), target="",
             rate_limit={"requests_per_minute": 2})  # one call each 30 s
    add_agent(world.tenant, "looker", ["lookup"])
    tasks = [submit(world.tenant, [{"tool": "lookup", "args": {"n": i}}, FINAL],
                    agent="looker") for i in range(3)]
    admit_created_tasks()

    assert run_slice(tasks[0].pk).ended == "stop"  # called at once, and finished
    assert len(fake_http.requests_to("POST", "/lookup")) == 1
    for task in tasks[1:]:
        assert run_slice(task.pk).ended == "later"
    assert len(fake_http.requests_to("POST", "/lookup")) == 1  # neither called
    second, third = (_waits(t.pk) for t in tasks[1:])
    assert [w["kind"] for w in second + third] == ["tool", "tool"]
    # served in arrival order: the third's slot is one interval after the second's
    assert second[0]["wait_s"] == pytest.approx(30.0, abs=1.0)
    assert third[0]["wait_s"] == pytest.approx(60.0, abs=1.0)
    waiting = Task.objects.get(pk=tasks[1].pk)
    assert waiting.lease_owner == "" and waiting.tool_calls == 0
    step = Step.objects.get(task=waiting, step_no=1)
    assert (step.status, step.attempt) == (StepStatus.RUNNING, 0)  # no retry spent
    ledger = ToolExecution.objects.get(idempotency_key=step.idempotency_key)
    assert (ledger.attempts, ledger.claimed_by) == ([], "")  # the claim was given back
    # Coming back early (a wake-up), it keeps its slot: no second reservation, no call
    assert run_slice(tasks[1].pk).ended == "later"
    assert len(fake_http.requests_to("POST", "/lookup")) == 1
    assert len(_waits(tasks[1].pk)) == 1


def test_a_model_call_over_its_limit_waits_and_is_not_sent(
        world, openai_server) -> None:  # noqa: F811
    openai_server.responder = lambda received: reply("done")
    openai_agent(world.tenant, openai_server, name="limited",
                 model={"max_tokens": 50, "rate_limit": {"requests_per_minute": 1}})
    first = submit_model_task(world, "first")
    second = submit_model_task(world, "second")
    assert run_slice(first.pk).ended == "stop"
    assert run_slice(second.pk).ended == "later"
    assert len(openai_server.requests) == 1
    assert openai_server.requests[0].body["max_tokens"] == 50
    (wait,) = _waits(second.pk)
    assert wait["kind"] == "model" and wait["name"] == "primary"
    assert wait["wait_s"] == pytest.approx(60.0, abs=1.0)
    assert wait["limit"] == {"requests_per_minute": 1}
    task = Task.objects.get(pk=second.pk)
    assert task.model_calls == 0 and task.lease_owner == ""  # a wait is not a call


def submit_model_task(world: Any, goal: str) -> Task:
    from foundations.actors import SYSTEM
    from tasks_app.services.tasks import task_submit

    task = task_submit(tenant_id=world.tenant.pk, requester_id=None, agent="limited", goal=goal,
                       input={}, script=None, actor=SYSTEM).task
    admit_created_tasks()
    return task


ADMIN = Role.ADMIN
AGENT = {"name": "llm", "model": {"backend": "openai", "name": "m1",
                                  "base_url": "http://127.0.0.1:9/v1",
                                  "fallback": {"name": "m2"}},
         "tools": []}


@pytest.mark.parametrize(("model", "field"), [
    ({"rate_limit": {"tokens_per_minute": -5}}, "model.rate_limit"),
    ({"rate_limit": {"per_second": 5}}, "model.rate_limit"),
    ({"fallback": {"name": "m2", "rate_limit": "fast"}}, "model.fallback.rate_limit"),
    ({"max_tokens": 0}, "model.max_tokens"),
])
def test_a_nonsense_model_rate_limit_is_a_400(world, model: dict, field: str) -> None:
    from tests.api.conftest import client_for

    agent = {**AGENT, "model": {**AGENT["model"], **model}}
    response = client_for(world.users[ADMIN]).post("/api/v1/agents", agent, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["details"], response.json()
    assert not AgentProfile.objects.filter(tenant=world.tenant, name="llm").exists()


@pytest.mark.parametrize(("tool", "problem"), [
    ({"kind": "http", "rate_limit": {"tokens_per_minute": 100}}, "unknown field"),
    ({"kind": "http", "rate_limit": {"requests_per_minute": 0}}, "a whole number"),
    ({"kind": "python", "target": "tests.fakes.python_tools:echo",
      "rate_limit": {"requests_per_minute": 5}}, "only an http or mcp tool"),
])
def test_a_nonsense_tool_rate_limit_is_a_400(world, tool: dict, problem: str) -> None:
    from tests.api.conftest import client_for

    body = {"name": "limited", "url": "http://127.0.0.1:9/x", "args_schema": {"type": "object"},
            **tool}
    response = client_for(world.users[ADMIN]).post("/api/v1/tools", body, format="json")
    assert response.status_code == 400, response.content
    details = response.json()["error"]["details"]
    assert any(problem in message for message in details["rate_limit"]), details
    assert not Tool.objects.filter(tenant=world.tenant, name="limited").exists()


def test_a_tool_keeps_its_rate_limit(world) -> None:
    from tests.api.conftest import client_for

    client = client_for(world.users[ADMIN])
    body = {"name": "limited", "kind": "http", "url": "http://127.0.0.1:9/x",
            "args_schema": {"type": "object"}, "rate_limit": {"requests_per_minute": 30}}
    created = client.post("/api/v1/tools", body, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["rate_limit"] == {"requests_per_minute": 30}


def test_the_task_and_agent_pages_show_the_wait_and_the_limit(world, openai_server) -> None:  # noqa: F811
    import re

    from django.test import Client

    openai_server.responder = lambda received: reply("done")
    openai_agent(world.tenant, openai_server, name="limited",
                 model={"rate_limit": {"requests_per_minute": 1, "tokens_per_minute": 90000}})
    first, second = submit_model_task(world, "first"), submit_model_task(world, "second")
    run_slice(first.pk)
    assert run_slice(second.pk).ended == "later"

    client = Client()
    client.force_login(world.users[Role.OPERATOR])
    task_page = " ".join(re.sub(r"<[^>]+>", " ", client.get(f"/tasks/{second.pk}/")
                                .content.decode()).split())
    assert "Waiting for rate limit of model primary" in task_page
    assert re.search(r"expected wait (59|60)\.\d s", task_page), task_page
    agent_page = " ".join(re.sub(r"<[^>]+>", " ", client.get("/agents/limited/")
                                 .content.decode()).split())
    assert "Rate limit 1 requests · 90,000 tokens per minute" in agent_page
    # the second task's slot is about a minute ahead: a third call would wait behind it
    assert re.search(r"calls queued (1[01][0-9]|120)\.\d s ahead", agent_page), agent_page


@pytest.mark.django_db  # one thread: no real commits needed
def test_the_tool_form_keeps_the_rate_limit_and_refuses_nonsense(world) -> None:
    from django.test import Client

    admin = Client()
    admin.force_login(world.users[ADMIN])
    url = "http://127.0.0.1:9/lookup"
    add_tool(world.tenant, "lookup", kind="http", url=url, target="",
             rate_limit={"requests_per_minute": 30})
    form = admin.get("/tools/lookup/edit/").content.decode()
    assert "&quot;requests_per_minute&quot;: 30" in form
    assert "30 requests per minute" in admin.get("/tools/lookup/").content.decode()
    fields = {"description": "", "kind": "http", "url": url, "args_schema": '{"type": "object"}',
              "side_effect": "read", "risk": "low", "timeout_s": "5", "max_retries": "3",
              "enabled": "on", "rate_limit": '{"requests_per_minute": 30}'}
    saved = admin.post("/tools/lookup/edit/", {**fields, "timeout_s": "7"})
    assert saved.status_code == 302
    tool = Tool.objects.get(tenant=world.tenant, name="lookup")
    assert (tool.timeout_s, tool.rate_limit) == (7.0, {"requests_per_minute": 30})
    refused = admin.post("/tools/lookup/edit/",
                         {**fields, "rate_limit": '{"requests_per_minute": -1}'})
    assert refused.status_code == 400 and "rate_limit" in refused.context["form"].errors
    assert Tool.objects.get(pk=tool.pk).rate_limit == {"requests_per_minute": 30}
