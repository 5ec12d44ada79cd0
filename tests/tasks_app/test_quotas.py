"""Tenant quotas: weighted fair admission between saturated tenants, a tenant's
own running limit, and spend limits priced from real model calls (the fake
OpenAI-compatible server): the `spend_warning` webhook once per period at 80 %,
a 429 on submission at 100 % (or a queued task, per the quota), the dashboard's
banner; set by the operator's command, not by the tenant's API."""
from __future__ import annotations

from collections import Counter
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.db import transaction
from rest_framework.test import APIClient

from accounts_app.models import Role, TenantQuota
from accounts_app.services.accounts import api_key_create
from accounts_app.services.quotas import quota_set
from foundations.actors import SYSTEM
from notify_app.services.sweep import spend_warnings_emit
from notify_app.signing import verify
from tasks_app.machine import TaskStatus
from tasks_app.models import Task
from tasks_app.services.demo import demo_agent_ensure, demo_tools_ensure
from tasks_app.services.tasks import task_cancel
from tests.factories import TenantFactory, submit
from tests.fakes.fixtures import openai_agent
from tests.fakes.openai_server import reply
from tests.fakes.webhook_receiver import WebhookReceiver
from tests.helpers import drive
from tests.notify_app.conftest import drain

pytestmark = pytest.mark.django_db(transaction=True)

SCRIPT = [{"final": {}}]
PRICES = {"input_per_mtok": "2500", "output_per_mtok": "10000"}  # dear, for round figures


@pytest.fixture
def limits(settings):  # type: ignore[no-untyped-def]
    def set_limits(**limits: int) -> None:
        settings.TETHER = {**settings.TETHER, **limits}

    return set_limits


def _tenant(name: str):  # type: ignore[no-untyped-def]
    tenant = TenantFactory(name=name)
    demo_tools_ensure(tenant)
    demo_agent_ensure(tenant, on_exhaustion="fail")
    return tenant


def _client(user) -> APIClient:  # type: ignore[no-untyped-def]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_key_create(user=user)}")
    return client


def test_two_saturated_tenants_of_weights_3_and_1_are_admitted_3_to_1(world, limits):
    limits(MAX_RUNNING_TASKS=8, MAX_RUNNING_PER_TENANT=1000)
    heavy, light = world.tenant, _tenant("t-light")
    quota_set(tenant_id=heavy.pk, weight=3)
    quota_set(tenant_id=light.pk, weight=1)
    # The light tenant's queue is behind the heavy one's: FIFO would start
    # only heavy tasks until their queue ran out.
    with transaction.atomic():
        for i in range(400):
            submit(heavy, SCRIPT, goal=f"heavy {i}")
        for i in range(400):
            submit(light, SCRIPT, goal=f"light {i}")

    running = Task.objects.filter(status=TaskStatus.RUNNING)
    assert Counter(running.values_list("tenant_id", flat=True)) == {heavy.pk: 6, light.pk: 2}

    # End the oldest running task, 300 times: each end frees a slot, and
    # admission (after the commit) gives it to a waiting tenant.
    first_admitted = Task.objects.filter(status=TaskStatus.CREATED).order_by("id").first()
    assert first_admitted is not None
    for _ in range(300):
        oldest = running.order_by("started_at", "id").first()
        assert oldest is not None
        task_cancel(task_id=oldest.pk, actor=SYSTEM, reason="make room")
    started = Counter(Task.objects.exclude(started_at=None).exclude(status=TaskStatus.CREATED)
                      .values_list("tenant_id", flat=True))
    total = started[heavy.pk] + started[light.pk]
    assert total == 308  # the first 8, and one per end
    assert 0.70 <= started[heavy.pk] / total <= 0.80, started  # 3:1 is 0.75
    # both still waiting: the light tenant was not starved, the heavy one not held back
    assert Task.objects.filter(tenant=light, status=TaskStatus.CREATED).exists()
    assert Task.objects.filter(tenant=heavy, status=TaskStatus.CREATED).exists()


def test_a_tenant_quota_sets_its_own_running_limit(world, limits):
    limits(MAX_RUNNING_TASKS=50, MAX_RUNNING_PER_TENANT=10)
    other = _tenant("t-other")
    quota_set(tenant_id=world.tenant.pk, max_running=2)
    ours = [submit(world.tenant, SCRIPT) for _ in range(4)]
    theirs = [submit(other, SCRIPT) for _ in range(4)]

    statuses = [Task.objects.get(pk=t.pk).status for t in ours + theirs]
    assert statuses == ["RUNNING"] * 2 + ["CREATED"] * 2 + ["RUNNING"] * 4


def test_the_operator_sets_the_quota_and_the_tenants_admin_cannot(world):
    call_command("tenant_quota", world.tenant.name, max_running=5, weight=2,
                 daily_spend=Decimal("10"), over_spend="queue")
    quota = TenantQuota.objects.get(tenant=world.tenant)
    assert (quota.max_running, quota.weight, quota.daily_spend_limit, quota.over_spend) == (
        5, 2, Decimal("10.00"), "queue")
    call_command("tenant_quota", world.tenant.name, daily_spend=None)
    assert TenantQuota.objects.get(tenant=world.tenant).daily_spend_limit is None

    admin = _client(world.users[Role.ADMIN])
    for method in ("put", "patch", "post"):
        refused = getattr(admin, method)("/api/v1/quota", {"weight": 100}, format="json")
        assert refused.status_code in (404, 405), refused.content
    assert TenantQuota.objects.get(tenant=world.tenant).weight == 2


def _spend(world, server, *, calls: int) -> None:  # type: ignore[no-untyped-def]
    """A task whose `calls` model replies cost $3.50 each (1,000 input and
    100 output tokens), run to its end by the real runner."""
    server.push(*[reply("look", tool_calls=[("lookup_order", {"order_id": "A-1"})],
                        usage=(1000, 100)) for _ in range(calls - 1)],
                reply('{"answer": "done"}', usage=(1000, 100)))
    task = drive(submit(world.tenant, None, agent="llm", goal="spend").pk)
    assert task.status == TaskStatus.SUCCEEDED


def test_spend_warning_at_80_percent_once_then_429_at_the_limit(
        world, openai_server, webhook_receiver: WebhookReceiver):
    openai_agent(world.tenant, openai_server, model={"prices": PRICES, "max_retries": 0})
    quota_set(tenant_id=world.tenant.pk, daily_spend_limit=Decimal("10"))
    admin = _client(world.users[Role.ADMIN])
    hook = admin.post("/api/v1/webhooks", {"url": webhook_receiver.url(),
                                           "events": ["spend_warning"]}, format="json")
    assert hook.status_code == 201, hook.content
    requester = _client(world.users[Role.REQUESTER])

    _spend(world, openai_server, calls=2)  # $7: 70 %
    assert spend_warnings_emit() == 0
    _spend(world, openai_server, calls=1)  # $10.50: over 80 %, and over the limit
    assert spend_warnings_emit() == 1
    assert spend_warnings_emit() == 0  # once per period

    drain()
    [received] = webhook_receiver.all()
    body = received.json
    assert body["type"] == "spend_warning"
    assert body["request"] == {"kind": "spend", "period": "day", "limit": "10.00",
                               "spent": "10.50", "url": body["request"]["url"]}
    assert verify(hook.json()["secret"], received.raw, received.headers["x-tether-signature"])

    refused = requester.post("/api/v1/tasks", {"agent": "support", "goal": "more",
                                               "script": SCRIPT}, format="json")
    assert refused.status_code == 429, refused.content
    error = refused.json()["error"]
    assert error["code"] == "spend_limit_reached"
    assert error["details"]["period"] == "day" and error["details"]["limit"] == "10.00"
    assert int(refused["Retry-After"]) > 0
    batch = requester.post("/api/v1/tasks/batch", {"tasks": [
        {"agent": "support", "goal": "more", "script": SCRIPT, "idempotency_key": "b-1"}]},
        format="json")
    assert batch.status_code == 429, batch.content

    page = admin_console(world).get("/")
    assert b'data-quota="reached"' in page.content

    # A quota that queues takes the task and starts nothing of the tenant's.
    quota_set(tenant_id=world.tenant.pk, over_spend="queue")
    queued = requester.post("/api/v1/tasks", {"agent": "support", "goal": "later",
                                              "script": SCRIPT}, format="json")
    assert queued.status_code == 201, queued.content
    assert Task.objects.get(pk=queued.json()["id"]).status == TaskStatus.CREATED
    # a raised limit lets it start at the next admission
    quota_set(tenant_id=world.tenant.pk, daily_spend_limit=Decimal("100"))
    submit(world.tenant, SCRIPT)
    assert Task.objects.get(pk=queued.json()["id"]).status == TaskStatus.RUNNING


def test_the_dashboard_shows_the_quota_and_the_80_percent_banner(world, openai_server):
    openai_agent(world.tenant, openai_server, model={"prices": PRICES, "max_retries": 0})
    quota_set(tenant_id=world.tenant.pk, max_running=7, daily_spend_limit=Decimal("8"))
    _spend(world, openai_server, calls=2)  # $7: 87.5 %

    page = admin_console(world).get("/")
    assert page.status_code == 200
    assert b'data-quota="warning"' in page.content
    assert b"of 7" in page.content
    assert b"$7.00 of $8.00 \xc2\xb7 88 %" in page.content


def admin_console(world):  # type: ignore[no-untyped-def]
    from django.test import Client

    client = Client()
    client.force_login(world.users[Role.ADMIN])
    return client
