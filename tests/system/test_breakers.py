"""A downstream outage under many running tasks, on real Celery workers: the
tool's breaker opens after a run of failures, the tasks wait without calling
(at most two calls per task reach the downstream while it is open: the one in
flight when it opened, and a probe), and every task succeeds after the outage.
Call counts, not timings: how long it takes is the benchmark's
(`manage.py bench --only breaker`)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import datetime

import pytest
from django.db import transaction

from tasks_app.machine import TaskStatus
from tasks_app.models import Event, Task
from tests.factories import submit
from tests.fakes.http_tool_server import FakeToolServer, Recorded, Reply
from tests.fakes.runtime import add_agent, add_tool, fake_http  # noqa: F401 - fixture
from tests.helpers import wait_for
from tests.system.history import assert_history_intact
from tools_app.models import Breaker, BreakerState, BreakerWaiter

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

TASKS = 20
FAILURES = 3


class Outage:
    """/lookup answers 503 while `down`; every call is kept with its wall time."""

    def __init__(self, fake: FakeToolServer) -> None:
        self.down = True
        self.calls: list[tuple[float, str]] = []  # (time.time(), task id)
        self._lock = threading.Lock()
        fake.on("POST", "/lookup", self._answer)

    def _answer(self, request: Recorded) -> Reply:
        with self._lock:
            self.calls.append((time.time(), request.headers.get("x-tether-task", "")))
            down = self.down
        return Reply(503, {"error": "down"}) if down else Reply(200, {"ok": True})

    def end(self) -> float:
        with self._lock:
            self.down = False
            return time.time()

    def per_task_between(self, start: float, end: float) -> Counter[str]:
        with self._lock:
            return Counter(task for at, task in self.calls if start <= at <= end)


def _epoch(at: datetime) -> float:
    return at.timestamp()


def test_an_outage_opens_the_breaker_tasks_wait_without_calling_and_all_succeed(
        world, celery_workers, fake_http):  # noqa: F811
    outage = Outage(fake_http)
    add_tool(world.tenant, "lookup", kind="http", url=fake_http.url("/lookup"), target="",
             max_retries=10, retry_delays_s=[0.2],
             breaker={"failures": FAILURES, "cooldown_s": 1, "max_cooldown_s": 2})
    add_agent(world.tenant, "looker", ["lookup"], max_concurrent_tasks=TASKS)
    celery_workers.start(concurrency=2)
    with transaction.atomic():
        tasks = [submit(world.tenant, [{"tool": "lookup", "args": {"n": i}},
                                       {"final": {"n": i}}], agent="looker")
                 for i in range(TASKS)]

    breaker = wait_for(lambda: Breaker.objects.filter(name="lookup",
                                                      state=BreakerState.OPEN).first(),
                       timeout=60, message="the breaker to open")
    # The outage outlasts two failed probes (the cool-down doubles each time).
    wait_for(lambda: Breaker.objects.get(pk=breaker.pk).opened_count >= 3, timeout=60,
             message="two probes to fail")
    waiting = wait_for(lambda: BreakerWaiter.objects.filter(breaker=breaker).count() >= TASKS // 2
                       and BreakerWaiter.objects.filter(breaker=breaker).count(),
                       timeout=60, message="the tasks to wait for the breaker")
    ended_at = outage.end()

    done = wait_for(lambda: (rows := list(Task.objects.filter(pk__in=[t.pk for t in tasks])))
                    and all(t.status not in (TaskStatus.CREATED, TaskStatus.RUNNING)
                            for t in rows) and rows,
                    timeout=120, message="every task to finish")
    assert all(t.status == TaskStatus.SUCCEEDED for t in done), celery_workers.logs()
    for task in done:
        assert_history_intact(task)

    first_opened = (Event.objects.filter(type="breaker_opened").order_by("id")
                    .values_list("created_at", flat=True).first())
    assert first_opened is not None
    while_open = outage.per_task_between(_epoch(first_opened), ended_at)
    # A task calls while the breaker is open with the call it had in flight as
    # it opened and with a probe; each failed probe re-opens the breaker and
    # gives its task `breaker_opened`. A task given two probes makes one call
    # more, never a retry of its own.
    reopened_by = Counter(str(task_id) for task_id in Event.objects.filter(
        type="breaker_opened", created_at__gt=first_opened).values_list("task_id", flat=True))
    over = {task: calls for task, calls in while_open.items()
            if calls > 2 + max(0, reopened_by[task] - 1)}
    assert not over, (over, reopened_by)
    # Before it opened, the run of failures was short: the breaker stopped the storm.
    assert len(outage.calls) <= FAILURES + 2 * TASKS + TASKS, len(outage.calls)

    row = Breaker.objects.get(pk=breaker.pk)
    assert row.state == BreakerState.CLOSED and row.opened_count >= 3
    assert not BreakerWaiter.objects.exists()
    waited = set(Event.objects.filter(type="breaker_waiting").values_list("task_id", flat=True))
    assert len(waited) >= waiting
    woken = set(Event.objects.filter(type="breaker_closed").values_list("task_id", flat=True))
    # Each task that waited was woken when it closed, unless it came back by
    # itself at its probe time and was already done.
    assert len(waited - woken) <= len(waited) // 2, (waited, woken)
