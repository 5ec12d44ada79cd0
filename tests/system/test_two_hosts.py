"""Two worker hosts, simulated on one machine: each host is a Celery worker
with its own host name (`TETHER_HOST_NAME`) and metrics directory, and a web
process serving `/metrics` from that directory, as Prometheus would scrape
each host; both hosts share the database, the broker and a Redis cache.

- Host A runs tasks; it is lost (its worker's process group killed) with two
  calls in flight; host B, started afterwards, recovers them from the
  database: every task finishes and each refund happens once.
- The ledger says which host ran each attempt; the two hosts' scrapes add
  up to the tool steps the database holds.
- The API throttle is one limit across both web processes (`CACHE_URL`).
"""
from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from accounts_app.models import Role
from accounts_app.services.accounts import api_key_create
from tasks_app.machine import TaskStatus
from tasks_app.models import Step, StepKind, StepStatus, Task
from tests.console.server import DaphneServer, daphne_servers
from tests.factories import submit
from tests.helpers import wait_for
from tests.processes import REDIS_BROKER_URL, database_url
from tests.system.test_crash_recovery import slow_world  # noqa: F401 - a fixture
from tools_app.models import DemoRefund, ToolExecution

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

TOKEN = "two-hosts-3c1d"


@pytest.fixture
def web(tmp_path: Path, settings: Any) -> Iterator[Callable[..., DaphneServer]]:
    from django.db import connection

    base = {"DATABASE_URL": database_url(connection.settings_dict),
            "CHANNEL_LAYER_URL": settings.CHANNEL_LAYER_URL,
            "TETHER_METRICS_TOKEN": TOKEN}
    with daphne_servers(tmp_path, base) as start:
        yield start


def _get(url: str, token: str, scheme: str = "Bearer") -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Authorization": f"{scheme} {token}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as res:  # noqa: S310 - local server
            return res.status, res.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _tool_steps_counted(server: DaphneServer) -> float:
    status, text = _get(f"{server.url}/metrics", TOKEN)
    assert status == 200, text
    return sum(s.value for family in text_string_to_metric_families(text)
               for s in family.samples
               if s.name == "tether_steps_total" and s.labels.get("kind") == "tool_call")


def _host(tmp_path: Path, name: str) -> dict[str, str]:
    metrics = tmp_path / f"metrics-{name}"
    metrics.mkdir()
    return {"TETHER_HOST_NAME": name, "PROMETHEUS_MULTIPROC_DIR": str(metrics)}


def _all_finished(*task_ids: int) -> bool:
    return not Task.objects.filter(pk__in=task_ids).exclude(
        status__in=(TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.CANCELED)).exists()


def test_a_lost_host_is_recovered_by_the_other_and_their_metrics_add_up(
        slow_world, celery_workers, web, tmp_path):  # noqa: F811 - the fixture
    host_a, host_b = _host(tmp_path, "host-a"), _host(tmp_path, "host-b")
    web_a, web_b = web(**host_a), web(**host_b)
    worker_a = celery_workers.start(env=host_a)

    quick = [submit(slow_world.tenant, [{"tool": "lookup_order", "args": {"order_id": "A-1"}},
                                        {"final": {"n": n}}]) for n in range(4)]
    wait_for(lambda: _all_finished(*(t.pk for t in quick)), timeout=90,
             message="host A to finish the quick tasks")

    gate = tmp_path / "gate"
    slow = [submit(slow_world.tenant, [
        {"tool": "lookup_order", "args": {"order_id": order}},
        {"tool": "slow_refund", "args": {"order_id": order, "amount_cents": 300,
                                         "gate": str(gate)}},
        {"final": {"refunded": order}}]) for order in ("A-1", "A-2")]
    wait_for(lambda: DemoRefund.objects.filter(order_id__in=("A-1", "A-2")).count() == 2,
             timeout=90, message="both slow calls to be in flight on host A")
    worker_a.kill()  # host A is lost, its two calls in flight
    gate.touch()
    celery_workers.start(env=host_b)

    every = [t.pk for t in quick + slow]
    wait_for(lambda: _all_finished(*every), timeout=150,
             message="host B to recover host A's tasks")
    statuses = set(Task.objects.filter(pk__in=every).values_list("status", flat=True))
    assert statuses == {TaskStatus.SUCCEEDED}, celery_workers.logs()
    # each refund once, though its call ran on both hosts with one key
    for order in ("A-1", "A-2"):
        assert DemoRefund.objects.filter(order_id=order).count() == 1
    for task in slow:
        step = Step.objects.get(task=task, step_no=2)
        owners = [a["owner"] for a in ToolExecution.objects.get(
            idempotency_key=step.idempotency_key).attempts]
        assert owners[0].startswith("host-a:") and owners[-1].startswith("host-b:"), owners

    # Each host's scrape counts the steps it finished; together, all of them.
    counted_a, counted_b = _tool_steps_counted(web_a), _tool_steps_counted(web_b)
    committed = Step.objects.filter(task_id__in=every, kind=StepKind.TOOL,
                                    status=StepStatus.SUCCEEDED).count()
    assert committed == 8
    assert counted_a == 6 and counted_b == 2, (counted_a, counted_b)  # 4 + 2 lookups; 2 refunds


def test_the_api_throttle_is_one_limit_across_web_hosts_with_a_shared_cache(world, web):
    cache = {"CACHE_URL": REDIS_BROKER_URL, "API_THROTTLE_RATE": "4/min"}
    web_a, web_b = web(TETHER_HOST_NAME="host-a", **cache), web(TETHER_HOST_NAME="host-b",
                                                                 **cache)
    key = api_key_create(user=world.users[Role.OPERATOR])
    import redis

    redis.Redis.from_url(REDIS_BROKER_URL).flushdb()  # no count left by an earlier run
    answers = [_get(f"{server.url}/api/v1/tasks", key, scheme="Token")[0]
               for server in (web_a, web_b, web_a, web_b, web_a, web_b)]
    assert answers == [200, 200, 200, 200, 429, 429], answers
