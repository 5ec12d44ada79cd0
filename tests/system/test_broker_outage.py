"""Submission is durable when the broker is down.

The broker is the test's own `redis-server` on a free port, stopped while a
client submits through the API (or replaced by a socket that accepts and never
answers, a broker that hangs): the answer is 201 with the committed task, the
failed enqueue is logged, and nothing else happens. Once the broker is back and
a real worker (with its beat, so the recovery sweep runs) is up, the task runs
to the end exactly once: one task, one run of each step, one ledger entry.
"""

from __future__ import annotations

import logging
import shutil
import socket
import subprocess
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from accounts_app.models import Role
from accounts_app.services.accounts import api_key_create
from tasks_app.machine import TaskStatus
from tasks_app.models import Event, Step, Task
from tests.helpers import wait_for
from tests.processes import CeleryWorkers, free_port, port_open
from tools_app.models import ToolExecution

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

SCRIPT = [
    {"tool": "lookup_order", "args": {"order_id": "A-1"}, "reason": "need the order"},
    {"final": {"answer": "delivered"}},
]


class OwnRedis:
    """A `redis-server` of the test's own on a fixed port, stopped and started
    at will (a shared Redis must never be stopped by a test)."""

    def __init__(self, port: int, log_path: Path) -> None:
        self.port = port
        self.log_path = log_path
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail("redis-server is not installed")
        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen(
                [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_for(lambda: port_open("127.0.0.1", self.port), timeout=20,
                 message=f"redis-server on port {self.port}")

    def stop(self) -> None:
        if self.popen is None:
            return
        self.popen.kill()
        self.popen.wait(timeout=10)
        self.popen = None
        wait_for(lambda: not port_open("127.0.0.1", self.port), timeout=10,
                 message="the broker's port to close")


OWN_PORT = free_port()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[OwnRedis]:
    """Up when the `celery_workers` fixture (requested after it) purges it."""
    redis = OwnRedis(OWN_PORT, tmp_path / "redis.log")
    redis.start()
    try:
        yield redis
    finally:
        redis.stop()


class SilentBroker:
    """Accepts connections on the broker's port and never answers."""

    def __init__(self, port: int) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(64)

    def close(self) -> None:
        with suppress(OSError):
            self.sock.close()


@pytest.mark.parametrize("celery_workers", [f"redis://127.0.0.1:{OWN_PORT}/0"], indirect=True,
                         ids=["own-redis"])
@pytest.mark.parametrize("outage", ["down", "silent"])
def test_a_task_submitted_while_the_broker_is_out_is_201_and_runs_once_it_is_back(
    world: Any, own_redis: OwnRedis, celery_workers: CeleryWorkers, caplog: Any, outage: str
) -> None:
    own_redis.stop()
    silent = SilentBroker(own_redis.port) if outage == "silent" else None
    client = APIClient()
    key = api_key_create(user=world.users[Role.REQUESTER])
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    body = {"goal": "submitted during an outage", "agent": "support", "script": SCRIPT}
    try:
        with caplog.at_level(logging.WARNING, logger="tasks_app.services.dispatch"):
            response = client.post("/api/v1/tasks", body, format="json")
    finally:
        if silent is not None:
            silent.close()

    assert response.status_code == 201, response.content
    task_id = response.json()["id"]
    assert list(Task.objects.values_list("id", flat=True)) == [task_id]
    assert any(f"could not enqueue task {task_id}" in r.getMessage() for r in caplog.records)
    # Admitted (a free slot) but never sent: nobody holds it, nothing ran.
    assert Task.objects.get(pk=task_id).status == TaskStatus.RUNNING
    assert not Step.objects.filter(task_id=task_id).exists()

    own_redis.start()
    celery_workers.start(beat=True)  # its beat runs the recovery sweep every second
    task = wait_for(
        lambda: (t := Task.objects.get(pk=task_id)).status == TaskStatus.SUCCEEDED and t,
        timeout=90, message="the task to succeed once the broker is back",
    )
    assert task.result == {"answer": "delivered"}
    assert Task.objects.count() == 1
    assert list(Step.objects.filter(task_id=task_id).order_by("step_no")
                .values_list("step_no", "tool")) == [(1, "lookup_order"), (2, "")]
    assert ToolExecution.objects.filter(task_id=task_id).count() == 1
    started = Event.objects.filter(task_id=task_id, type="task_started").count()
    assert started == 1


@pytest.mark.parametrize("celery_workers", [f"redis://127.0.0.1:{OWN_PORT}/0"], indirect=True,
                         ids=["own-redis"])
def test_a_compensation_lost_to_a_broker_outage_runs_once_it_is_back(
    world: Any, own_redis: OwnRedis, celery_workers: CeleryWorkers, caplog: Any,
    monkeypatch: Any,
) -> None:
    """A task that wrote fails while the broker is down: its compensation's message
    is never sent. Once the broker is back, the recovery sweep hands it out and
    the write is undone once."""
    from django.conf import settings

    from tasks_app.services.tasks import task_fail_by_operator
    from tests.factories import actor_of, submit
    from tests.fakes.runtime import add_agent, add_tool
    from tools_app.models import DemoNotification

    add_tool(world.tenant, "undo_note", "undo_note", side_effect="write", max_retries=0)
    add_tool(world.tenant, "note", "note", side_effect="write", max_retries=0,
             compensation_tool="undo_note")
    add_agent(world.tenant, "payer", ["note"])
    monkeypatch.setitem(settings.TETHER, "COMPENSATION_RESWEEP_S", 1.0)
    celery_workers.start(env={"TETHER_COMPENSATION_RESWEEP_S": "1"})
    task = submit(world.tenant, [
        {"tool": "note", "args": {"to": "ada", "text": "charged"}},
        {"ask": "Charge again?"},
    ], agent="payer")
    wait_for(lambda: Task.objects.get(pk=task.pk).status == TaskStatus.WAITING_FOR_INPUT,
             timeout=60, message="the task to write, then ask")

    own_redis.stop()
    operator = actor_of(world.users[Role.OPERATOR])
    with caplog.at_level(logging.ERROR, logger="tasks_app.services.dispatch"):
        task_fail_by_operator(task_id=task.pk, actor=operator, reason="wrong customer")
    assert any(f"could not enqueue the compensation of task {task.pk}" in r.getMessage()
               for r in caplog.records)
    assert Task.objects.get(pk=task.pk).compensation_due_at is not None
    undone = DemoNotification.objects.filter(customer="undo")
    assert not undone.exists()

    own_redis.start()  # the worker reconnects; its sweep finds the compensation due
    wait_for(lambda: Task.objects.get(pk=task.pk).compensation_due_at is None, timeout=60,
             message="the compensation to run once the broker is back")
    note_step = Step.objects.get(task_id=task.pk, step_no=1)
    assert [u.message for u in undone] == [note_step.idempotency_key]
    assert Event.objects.filter(task_id=task.pk, type="compensation_succeeded").count() == 1
