"""Circuit breakers in the console: the tools and agents pages show their
state, and a task waiting for one says which and until when."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.utils import timezone

from accounts_app.models import Role
from tasks_app.runner.loop import run_slice
from tasks_app.services.admission import admit_created_tasks
from tests.factories import submit
from tests.fakes.runtime import add_agent, add_tool
from tools_app.breakers import Target, admit, breaker_policy, record
from tools_app.models import Breaker, BreakerState, Tool

pytestmark = pytest.mark.django_db(transaction=True)

NOWHERE = "http://127.0.0.1:9/lookup"  # nothing listens: every call is refused (transient)


def _client(user) -> Client:  # type: ignore[no-untyped-def]
    client = Client()
    client.force_login(user)
    return client


def test_a_waiting_task_and_the_tools_page_show_the_open_breaker(world):
    add_tool(world.tenant, "lookup", kind="http", url=NOWHERE, target="", max_retries=3,
             breaker={"failures": 1, "cooldown_s": 600})
    add_agent(world.tenant, "looker", ["lookup"])
    first = submit(world.tenant, [{"tool": "lookup", "args": {}}, {"final": {}}], agent="looker")
    second = submit(world.tenant, [{"tool": "lookup", "args": {}}, {"final": {}}], agent="looker")
    admit_created_tasks()
    run_slice(first.pk)  # refused: the breaker opens
    run_slice(second.pk)  # held: it waits
    breaker = Breaker.objects.get(name="lookup")
    assert breaker.state == BreakerState.OPEN

    operator = _client(world.users[Role.OPERATOR])
    page = operator.get(f"/tasks/{second.pk}/").content.decode()
    until = timezone.localtime(breaker.open_until).strftime("%H:%M:%S")
    text = re.sub(r"<[^>]+>", "", page)
    assert f"waiting: breaker of lookup open until {until}" in " ".join(text.split())
    assert "Waiting: breaker of tool lookup open" in text  # the timeline's event

    tools = re.sub(r"\s+", " ", operator.get("/tools/").content.decode())
    assert re.search(r'breaker-state">open</span>', tools)
    assert "1 task waiting" in tools
    detail = operator.get("/tools/lookup/").content.decode()
    assert "Circuit breaker" in detail and 'breaker-state">open' in detail


@pytest.mark.django_db  # one thread: no real commits needed
def test_the_agents_pages_show_the_model_breakers(world):
    admin = _client(world.users[Role.ADMIN])
    add_agent(world.tenant, "llm", ["lookup_order"], model={
        "backend": "openai", "name": "m1", "base_url": "http://127.0.0.1:9/v1",
        "fallback": {"name": "m2"}})
    target = Target.model(tenant_id=world.tenant.pk, base_url="http://127.0.0.1:9/v1", name="m1")
    policy = breaker_policy({"failures": 1})
    record(target, owner="w", failed=True, policy=policy,
           seen=admit(target, owner="w", probe_ttl_s=5))

    listing = admin.get("/agents/").content.decode()
    assert 'breaker-state">open' in listing
    detail = admin.get("/agents/llm/").content.decode()
    assert "Circuit breaker" in detail and 'breaker-state">open' in detail
    assert "Fallback&#x27;s breaker" in detail or "Fallback's breaker" in detail


@pytest.mark.django_db  # one thread: no real commits needed
def test_the_tool_form_keeps_the_retry_delays_and_breaker_and_refuses_nonsense(world):
    admin = _client(world.users[Role.ADMIN])
    add_tool(world.tenant, "lookup", kind="http", url=NOWHERE, target="", max_retries=3,
             retry_delays_s=[0, 30], breaker={"failures": 2})
    form = admin.get("/tools/lookup/edit/").content.decode()
    assert 'value="0, 30"' in form and "&quot;failures&quot;: 2" in form
    fields = {"description": "", "kind": "http", "url": NOWHERE,
              "args_schema": '{"type": "object"}', "side_effect": "read", "risk": "low",
              "timeout_s": "5", "max_retries": "3",
              "enabled": "on", "retry_delays_s": "0, 30", "breaker": '{"failures": 2}'}
    saved = admin.post("/tools/lookup/edit/", {**fields, "timeout_s": "7"})
    assert saved.status_code == 302
    tool = Tool.objects.get(tenant=world.tenant, name="lookup")
    assert (tool.timeout_s, tool.retry_delays_s, tool.breaker) == (7.0, [0.0, 30.0],
                                                                  {"failures": 2})
    for bad, field in (({"retry_delays_s": "soon"}, "retry_delays_s"),
                       ({"retry_delays_s": "-5"}, "retry_delays_s"),
                       ({"breaker": '{"failures": 0}'}, "breaker")):
        refused = admin.post("/tools/lookup/edit/", {**fields, **bad})
        assert refused.status_code == 400 and field in refused.context["form"].errors
    assert Tool.objects.get(pk=tool.pk).breaker == {"failures": 2}
