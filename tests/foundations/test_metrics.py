"""`/metrics` in this process: the token, the figures the database holds, and
the bounds on tenant-chosen label values."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from approvals_app.models import Approval
from approvals_app.services.decisions import approvals_expire
from config.metrics_db import MAX_AGENTS
from foundations.metrics import OTHER, _BoundedNames
from tasks_app.machine import TaskStatus
from tasks_app.services.admission import admit_created_tasks
from tasks_app.services.demo import demo_agent_ensure
from tests.factories import submit
from tests.helpers import drive

pytestmark = pytest.mark.django_db

REFUND = [{"tool": "issue_refund", "args": {"order_id": "A-1", "amount_cents": 100,
                                            "reason": "damaged"}},
          {"final": {"refunded": 100}}]


def _scrape(client, **headers) -> dict:  # type: ignore[no-untyped-def]
    res = client.get("/metrics", **headers)
    assert res.status_code == 200, res.content
    assert res["Content-Type"].startswith("text/plain")
    return {(s.name, frozenset(s.labels.items())): s.value
            for f in text_string_to_metric_families(res.content.decode()) for s in f.samples}


def _value(samples: dict, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


@pytest.mark.parametrize("header, status", [
    (None, 401),
    ("Bearer wrong", 401),
    ("Basic c2NyYXBlLXRva2Vu", 401),
    ("Bearer scrape-token", 200),
    ("bearer scrape-token", 200),
])
def test_the_token_is_asked_for_when_set(client, settings, header, status):
    settings.TETHER_METRICS_TOKEN = "scrape-token"
    res = client.get("/metrics", **({"HTTP_AUTHORIZATION": header} if header else {}))
    assert res.status_code == status
    if status == 401:
        assert res["WWW-Authenticate"].startswith("Bearer")
        assert b"tether_" not in res.content


def test_without_a_token_metrics_are_open_and_only_read(client, settings):
    settings.TETHER_METRICS_TOKEN = ""
    assert client.get("/metrics").status_code == 200
    assert client.post("/metrics").status_code == 405


def test_tasks_by_tenant_agent_and_status_with_a_bounded_number_of_agents(world, client):
    for i in range(MAX_AGENTS + 2):  # two agents more than are named
        demo_agent_ensure(world.tenant, name=f"agent-{i:02d}")
        submit(world.tenant, [{"final": {}}], agent=f"agent-{i:02d}")
    for _ in range(3):
        submit(world.tenant, [{"final": {}}])  # the busiest agent: `support`
    admit_created_tasks()
    drive(submit(world.tenant, [{"final": {"ok": True}}]).pk)

    samples = _scrape(client)
    tenant = world.tenant.name
    tasks = {labels: v for (name, labels), v in samples.items() if name == "tether_tasks"}
    assert sum(tasks.values()) == MAX_AGENTS + 2 + 3
    agents = {dict(labels)["agent"] for labels in tasks}
    assert len(agents) == MAX_AGENTS + 1 and "support" in agents and OTHER in agents
    assert sum(v for labels, v in tasks.items() if dict(labels)["agent"] == OTHER) == 3
    assert {dict(labels)["status"] for labels in tasks} == {TaskStatus.RUNNING}
    assert _value(samples, "tether_tasks", tenant=tenant, agent="support",
                  status=TaskStatus.RUNNING) == 3
    assert _value(samples, "tether_tasks", tenant=tenant, agent="support",
                  status=TaskStatus.SUCCEEDED) is None  # finished ones are counted as they end
    assert _value(samples, "tether_database_up") == 1


def test_the_admission_queue_and_its_oldest(world, client, settings):
    settings.TETHER = {**settings.TETHER, "MAX_RUNNING_TASKS": 1}
    submit(world.tenant, [{"final": {}}])
    assert len(admit_created_tasks()) == 1  # the only slot
    waiting = [submit(world.tenant, [{"final": {}}]) for _ in range(2)]
    assert {t.status for t in waiting} == {TaskStatus.CREATED}
    type(waiting[0]).objects.filter(pk=waiting[0].pk).update(
        created_at=timezone.now() - timedelta(minutes=10))

    samples = _scrape(client)
    assert _value(samples, "tether_admission_queue_depth") == 2
    assert 600 <= _value(samples, "tether_admission_queue_oldest_age_seconds") < 700


def test_human_requests_pending_their_oldest_and_approvals_past_their_sla(world, client):
    questions = [drive(submit(world.tenant, [{"ask": f"which one? {i}"}]).pk) for i in range(2)]
    assert {t.status for t in questions} == {TaskStatus.WAITING_FOR_INPUT}
    late, on_time = (drive(submit(world.tenant, REFUND).pk) for _ in range(2))
    assert late.status == on_time.status == TaskStatus.WAITING_FOR_APPROVAL
    an_hour_ago = timezone.now() - timedelta(hours=1)
    Approval.objects.filter(task=late).update(created_at=an_hour_ago, expires_at=an_hour_ago)
    Approval.objects.filter(task=on_time).update(expires_at=timezone.now() + timedelta(hours=1))
    tenant = world.tenant.name

    samples = _scrape(client)
    assert _value(samples, "tether_human_requests_pending", tenant=tenant, kind="question") == 2
    assert _value(samples, "tether_human_requests_pending", tenant=tenant, kind="approval") == 2
    assert 3600 <= _value(samples, "tether_human_requests_oldest_age_seconds", tenant=tenant,
                          kind="approval") < 3700
    assert _value(samples, "tether_human_requests_oldest_age_seconds", tenant=tenant,
                  kind="question") < 600
    assert _value(samples, "tether_approvals_overdue", tenant=tenant) == 1
    assert _value(samples, "tether_approvals_sla_breached_total", tenant=tenant) is None

    assert approvals_expire() == 1
    samples = _scrape(client)
    assert _value(samples, "tether_approvals_overdue", tenant=tenant) is None
    assert _value(samples, "tether_approvals_sla_breached_total", tenant=tenant) == 1
    assert _value(samples, "tether_human_requests_pending", tenant=tenant, kind="approval") == 1


def test_another_tenants_figures_are_labelled_with_its_own_name(world, client):
    from tests.factories import TenantFactory

    other = TenantFactory(name="t-other")
    demo_agent_ensure(other)
    submit(other, [{"final": {}}])
    samples = _scrape(client)
    assert _value(samples, "tether_tasks", tenant="t-other", agent="support",
                  status=TaskStatus.CREATED) == 1
    assert _value(samples, "tether_tasks", tenant=world.tenant.name, agent="support",
                  status=TaskStatus.CREATED) is None


def test_tenant_chosen_names_are_normalised_and_bounded():
    names = _BoundedNames(limit=4)
    assert names("lookup_order") == "lookup_order"
    assert names('evil"} 1\n# HELP x') == "evil_1_HELP_x"
    assert names("x" * 500) == "x" * 64
    assert names("") == "unknown"
    assert names("one-more") == OTHER  # the fifth distinct name
    assert names("lookup_order") == "lookup_order"  # a name already seen keeps its label


def test_the_dashboard_plots_only_series_that_metrics_exposes(client):
    import json
    import re
    from pathlib import Path

    from django.conf import settings

    res = client.get("/metrics")
    exposed = {f.name for f in text_string_to_metric_families(res.content.decode())}
    dashboard = json.loads((Path(settings.BASE_DIR) / "config/grafana/tether.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    used = {re.sub(r"_(bucket|count|sum|total)$", "", name)
            for expr in exprs for name in re.findall(r"\btether_\w+", expr)}
    assert len(exprs) >= 20
    assert used and used <= exposed, used - exposed
    assert {"tether_tasks", "tether_steps", "tether_model_call_duration_seconds",
            "tether_tool_calls", "tether_human_requests_pending"} <= used


def test_breaker_states_and_transitions(world, client):
    from tools_app.breakers import Target, admit, breaker_policy, record

    target = Target.tool(tenant_id=world.tenant.pk, name="lookup")
    policy = breaker_policy({"failures": 2, "cooldown_s": 60})
    for owner in ("a", "b"):
        record(target, owner=owner, failed=True, policy=policy,
               seen=admit(target, owner=owner, probe_ttl_s=5))
    samples = _scrape(client)
    labels = frozenset({"tenant": world.tenant.name, "kind": "tool", "name": "lookup"}.items())
    assert samples.get(("tether_breaker_state", labels)) == 2  # open
    assert _value(samples, "tether_breaker_transitions_total", kind="tool", change="opened") >= 1
