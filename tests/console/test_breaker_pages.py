"""Circuit breakers in the console: the tools and agents pages show their
state, and a task waiting for one says which and until when."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.utils import timezone

from tasks_app.models import Role
from tasks_app.runner.loop import run_slice
from tasks_app.services.admission import admit_created_tasks
from tests.factories import submit
from tests.fakes.runtime import add_agent, add_tool
from tools_app.breakers import Target, admit, breaker_policy, record
from tools_app.models import Breaker, BreakerState

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
