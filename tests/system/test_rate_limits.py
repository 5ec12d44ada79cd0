"""Rate limits before the call, on real Celery workers and the fake model
server: a `tokens_per_minute` limit shared by two worker processes holds at
the server (it counts the tokens it received per window: never more than the
limit plus one call's reservation), waiting tasks hold no worker (another
agent's tasks go on meanwhile), and a 429's Retry-After holds the limit for
every task calling that endpoint. The limit's minute is shortened
(`TETHER_RATE_LIMIT_PERIOD_S`) so that a few windows pass quickly; counts and
the order of arrivals are asserted, never how long anything took."""

from __future__ import annotations

import json
import math
import threading
from typing import Any

import pytest
from django.db import transaction

from foundations.actors import SYSTEM
from tasks_app.machine import TaskStatus
from tasks_app.models import Event, Task
from tasks_app.services.tasks import task_submit
from tests.factories import submit
from tests.fakes.fixtures import openai_agent, openai_server  # noqa: F401 - a fixture
from tests.fakes.openai_server import FakeOpenAI, Received, Scripted, error, reply
from tests.fakes.runtime import add_agent
from tests.helpers import wait_for
from tests.processes import REDIS_BROKER_URL

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

PERIOD_S = 4.0
MAX_TOKENS = 16
COMPLETION_TOKENS = 5


def worker_env() -> dict[str, str]:
    return {"TETHER_RATE_LIMIT_URL": REDIS_BROKER_URL,
            "TETHER_RATE_LIMIT_PERIOD_S": str(PERIOD_S)}


class TokenCounter:
    """The fake provider's usage: the prompt's tokens counted from what it
    received (four characters a token), and a short answer; every request
    kept with its arrival time and tokens."""

    def __init__(self, server: FakeOpenAI) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[float, int]] = []  # (arrival, tokens)
        server.responder = self.answer

    def answer(self, received: Received) -> Scripted:
        body = received.body
        prompt = math.ceil(len(json.dumps([body.get("messages") or [], body.get("tools") or []],
                                          separators=(",", ":"))) / 4)
        with self.lock:
            self.seen.append((received.at, prompt + COMPLETION_TOKENS))
        return reply("done", usage=(prompt, COMPLETION_TOKENS))

    def most_in_a_window(self) -> int:
        """The most tokens received in any window of one period (each window
        starting at an arrival: every fixed window is inside one of these)."""
        with self.lock:
            seen = sorted(self.seen)
        return max(sum(t for at, t in seen if start <= at < start + PERIOD_S)
                   for start, _ in seen)

    def largest(self) -> int:
        with self.lock:
            return max(t for _, t in self.seen)


def ask(tenant: Any, goal: str) -> Task:
    """A task of the `limited` agent (a model's: no script)."""
    return task_submit(tenant_id=tenant.pk, requester_id=None, agent="limited", goal=goal,
                       input={}, script=None, actor=SYSTEM).task


def _finished(ids: list[int]) -> list[Task] | None:
    rows = list(Task.objects.filter(pk__in=ids))
    done = all(t.status not in (TaskStatus.CREATED, TaskStatus.RUNNING) for t in rows)
    return rows if done else None


def test_a_tokens_per_minute_limit_holds_across_two_workers_and_waiters_hold_no_worker(
        world, celery_workers, openai_server):  # noqa: F811
    counter = TokenCounter(openai_server)
    # tokens per period: four calls of this agent's, a call a second. A slot
    # further apart than a worker's stall under load, which would bunch calls.
    limit = 3000
    openai_agent(world.tenant, openai_server, name="limited", max_concurrent_tasks=100,
                 model={"max_tokens": MAX_TOKENS, "max_retries": 0,
                        "rate_limit": {"tokens_per_minute": limit}})
    add_agent(world.tenant, "free", [], max_concurrent_tasks=100)
    for _ in range(2):  # two worker processes, one slot each
        celery_workers.start(concurrency=1, env=worker_env())
    with transaction.atomic():
        limited = [ask(world.tenant, f"limited task {i}")
                   for i in range(16)]
    ids = [t.pk for t in limited]
    # some tasks wait for their slot...
    wait_for(lambda: Event.objects.filter(task_id__in=ids, type="rate_limit_waiting").count()
             >= 8, timeout=60, message="tasks to wait for the rate limit")
    # ...holding no worker: another agent's tasks run meanwhile, to the end
    with transaction.atomic():
        free = [submit(world.tenant, [{"final": {"n": i}}], agent="free") for i in range(10)]
    free_done = wait_for(lambda: _finished([t.pk for t in free]), timeout=60,
                         message="the other agent's tasks to finish")
    assert all(t.status == TaskStatus.SUCCEEDED for t in free_done)
    still_waiting = Task.objects.filter(pk__in=ids, status=TaskStatus.RUNNING)
    assert still_waiting.exists(), "the limited tasks should still be queued for their slots"
    # a waiting task holds no lease either
    waiting_ids = set(Event.objects.filter(task_id__in=ids, type="rate_limit_waiting")
                      .values_list("task_id", flat=True))
    assert still_waiting.filter(pk__in=waiting_ids, lease_owner="").exists()

    done = wait_for(lambda: _finished(ids), timeout=120, message="every limited task to finish")
    assert all(t.status == TaskStatus.SUCCEEDED for t in done), celery_workers.logs()
    assert len(counter.seen) == len(ids)  # each made one call: a wait is not a retry
    reservation = counter.largest() - COMPLETION_TOKENS + MAX_TOKENS
    most = counter.most_in_a_window()
    assert most <= limit + reservation, (most, limit, reservation)
    assert most >= limit - reservation, (most, limit)  # and the limit is used, not starved
    event = Event.objects.filter(task_id__in=ids, type="rate_limit_waiting").first()
    assert event is not None
    assert event.payload["name"] == "primary" and event.payload["wait_s"] > 0
    assert event.payload["limit"] == {"tokens_per_minute": limit}


def test_a_429_retry_after_holds_the_limit_for_every_task_of_the_endpoint(
        world, celery_workers, openai_server):  # noqa: F811
    openai_agent(world.tenant, openai_server, name="limited", max_concurrent_tasks=10,
                 model={"max_tokens": MAX_TOKENS, "max_retries": 2,
                        "rate_limit": {"requests_per_minute": 600}})
    retry_after = 3
    openai_server.push(error(429, "slow down", headers={"Retry-After": str(retry_after)}))
    openai_server.responder = lambda received: reply("done")
    celery_workers.start(concurrency=1, env=worker_env())
    first = ask(world.tenant, "first")
    # told 429, it waits for the Retry-After (the limit holds it, not its worker)
    wait_for(lambda: Event.objects.filter(task_id=first.pk, type="rate_limit_waiting").exists(),
             timeout=60, message="the first task to wait after its 429")
    second = ask(world.tenant, "second")
    done = wait_for(lambda: _finished([first.pk, second.pk]), timeout=60,
                    message="both tasks to finish")
    assert all(t.status == TaskStatus.SUCCEEDED for t in done), celery_workers.logs()
    told_at = openai_server.requests[0].at
    after = [r.at - told_at for r in openai_server.requests[1:]]
    assert len(after) == 2, after  # the first task's retry and the second task's call
    # neither called before the Retry-After: the limit held both
    assert min(after) >= retry_after - 0.1, after
    waited = Event.objects.filter(type="rate_limit_waiting").values_list("task_id", flat=True)
    assert set(waited) == {first.pk, second.pk}
