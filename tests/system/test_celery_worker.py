"""Production mode: real Celery workers on PostgreSQL, with a Redis (or
RabbitMQ) broker and the Redis channel layer, run scripted tasks to the end."""

from __future__ import annotations

import asyncio
import os
import threading

import pytest
from channels.layers import get_channel_layer
from django.db import transaction

from tasks_app.live.publish import tenant_group
from tasks_app.machine import TaskStatus
from tasks_app.models import Event, Task
from tests.factories import submit
from tests.helpers import wait_for
from tests.processes import RABBITMQ_BROKER_URL, REDIS_BROKER_URL
from tests.system.history import assert_history_intact

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

SCRIPT = [
    {"tool": "lookup_order", "args": {"order_id": "A-1"}, "reason": "need the order"},
    {"tool": "lookup_order", "args": {"order_id": "A-2"}},
    {"final": {"answer": "both orders delivered"}},
]


def _settled(task_id: int) -> Task | None:
    task = Task.objects.get(pk=task_id)
    return task if task.status not in (TaskStatus.CREATED, TaskStatus.RUNNING) else None


class GroupListener:
    """Subscribes to a group of the real channel layer and collects the events
    it delivers, in order, whether one per message (`tether.event`) or batched
    (`tether.events`), until an event of `until_type` arrives.

    The Redis pub/sub layer keeps a subscription on the event loop that made
    it and buffers nothing: the listener runs on one loop in its own thread,
    from before the task is submitted until it has what it waits for.
    """

    def __init__(self, group: str, *, until_type: str, timeout: float) -> None:
        self.group, self.until_type, self.timeout = group, until_type, timeout
        self.events: list[dict] = []
        self._subscribed = threading.Event()
        self._thread = threading.Thread(target=asyncio.run, args=(self._listen(),), daemon=True)

    def start(self) -> GroupListener:
        self._thread.start()
        assert self._subscribed.wait(10), "could not subscribe to the channel layer"
        return self

    def collected(self) -> list[dict]:
        self._thread.join(self.timeout + 5)
        return self.events

    async def _listen(self) -> None:
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add(self.group, channel)
        self._subscribed.set()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        try:
            while not any(e["type"] == self.until_type for e in self.events):
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    message = await asyncio.wait_for(layer.receive(channel), timeout=remaining)
                except TimeoutError:
                    break
                self.events.extend(message["events"] if message["type"] == "tether.events"
                                   else [message["event"]])
        finally:
            await layer.group_discard(self.group, channel)


def test_a_scripted_task_runs_to_success_on_a_real_worker(world, celery_workers):
    worker = celery_workers.start()
    listener = GroupListener(tenant_group(world.tenant.pk), until_type="final_accepted",
                             timeout=60).start()
    task = submit(world.tenant, SCRIPT)
    done = wait_for(lambda: _settled(task.pk), timeout=60, message="the task to finish")

    assert done.status == TaskStatus.SUCCEEDED, celery_workers.logs()
    assert done.result == {"answer": "both orders delivered"}
    assert [s.output["order_id"] for s in done.steps.order_by("step_no")[:2]] == ["A-1", "A-2"]
    assert (done.tool_calls, done.model_calls) == (2, 3)
    assert_history_intact(done)
    # The steps ran in the worker's processes (a worker id is "worker:HOST:PID:NONCE").
    step_pids = {
        int(actor.split(":")[-2])
        for actor in Event.objects.filter(task=done, type="step_succeeded").values_list(
            "actor", flat=True
        )
    }
    assert step_pids and all(os.getpgid(pid) == worker.pid for pid in step_pids)
    assert worker.alive()

    # Every event reached live subscribers across processes, in order, once.
    received = listener.collected()
    ids = [e["id"] for e in received if e["task_id"] == done.pk]
    assert ids == list(Event.objects.filter(task=done).order_by("id").values_list("id", flat=True))


def test_a_worker_goes_on_with_the_task_started_in_the_slot_it_freed(
        world, celery_workers, settings):
    """One task may run at a time: a task that ends hands its slot to the next
    in the same worker process, with no message through the broker (once per
    message: the next one is queued)."""
    limit = {"MAX_RUNNING_PER_TENANT": 1}
    settings.TETHER = {**settings.TETHER, **limit}
    # No sweeper: its admission of a freed slot would race the hand-off being counted.
    celery_workers.start(env={"TETHER_MAX_RUNNING_PER_TENANT": "1", "TETHER_SLICE_S": "30",
                              "TETHER_WORKER_SWEEP": "false"})
    with transaction.atomic():
        tasks = [submit(world.tenant, SCRIPT) for _ in range(4)]

    done = [wait_for(lambda t=t: _settled(t.pk), timeout=60, message="the tasks to finish")
            for t in tasks]

    assert [t.status for t in done] == [TaskStatus.SUCCEEDED] * 4, celery_workers.logs()
    stats = celery_workers.app.control.inspect(timeout=5).stats() or {}
    executed = sum(s.get("total", {}).get("tasks_app.tasks.advance_task", 0)
                   for s in stats.values())
    assert executed == 2  # the first and the third task's; the second and fourth were handed on


@pytest.mark.parametrize("celery_workers", [RABBITMQ_BROKER_URL], indirect=True, ids=["rabbitmq"])
def test_rabbitmq_works_as_the_broker(world, celery_workers):
    assert (
        celery_workers.broker_url.startswith("amqp")
        and celery_workers.broker_url != REDIS_BROKER_URL
    )
    celery_workers.start(beat=True)
    task = submit(world.tenant, SCRIPT)
    done = wait_for(lambda: _settled(task.pk), timeout=60, message="the task to finish")
    assert done.status == TaskStatus.SUCCEEDED, celery_workers.logs()
    assert done.result == {"answer": "both orders delivered"}
    assert_history_intact(done)
