"""A worker killed (SIGKILL, its whole process group) while the model streams
a decision: the tokens were live, nothing was recorded; a new worker, with
the recovery sweep, asks again and the task completes, its decision recorded
once. A client following the stream over a real server sees every event once,
and the end."""

from __future__ import annotations

import pytest

from accounts_app.models import Role
from accounts_app.services.accounts import api_key_create
from tasks_app.machine import TaskStatus
from tasks_app.models import Event, Step, Task
from tests.factories import submit
from tests.fakes.fixtures import (
    openai_agent,
    openai_server,  # noqa: F401 - the fixture
)
from tests.fakes.openai_server import reply
from tests.helpers import wait_for
from tests.live.server import asgi_server  # noqa: F401 - the fixture

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

LOOKUP = ("lookup_order", {"order_id": "A-1"})


def test_a_worker_killed_mid_stream_leaves_no_half_decision(
        world, openai_server, celery_workers, asgi_server):  # noqa: F811
    openai_agent(world.tenant, openai_server, name="llm",
                 model={"stream": True, "timeout_s": 120})
    openai_server.push(
        reply("Let me look the order up.", tool_calls=[LOOKUP]),  # cut by the kill
        reply("Let me look the order up.", tool_calls=[LOOKUP]),  # asked again after it
        reply('{"answer": "A-1 is with Ada"}'))
    hold = openai_server.hold(after=10)
    task = submit(world.tenant, None, agent="llm", goal="Where is order A-1?")
    key = api_key_create(user=world.users[Role.REQUESTER])
    stream = asgi_server.stream(f"/api/v1/tasks/{task.pk}/stream", key=key)
    stream.wait(lambda seen: seen, message="the replayed task_created")

    first = celery_workers.start()
    assert hold.reached.wait(60), celery_workers.logs()
    stream.wait(lambda seen: any(m.event == "tokens" for m in seen), message="live tokens")
    first.kill()
    assert not first.alive()
    hold.release()  # what the held stream still sends goes to a dead socket
    assert not Step.objects.filter(task=task).exists()
    assert not Event.objects.filter(task=task, type="decision_recorded").exists()

    celery_workers.start(beat=True)
    done = wait_for(lambda: (t := Task.objects.get(pk=task.pk)).is_terminal and t,
                    timeout=150, message="the task to finish after recovery")
    assert done.status == TaskStatus.SUCCEEDED, celery_workers.logs()
    assert done.result == {"answer": "A-1 is with Ada"}
    steps = list(Step.objects.filter(task=task).order_by("step_no").values_list(
        "step_no", "decision"))
    assert [no for no, _ in steps] == [1, 2]
    assert steps[0][1]["tool"] == "lookup_order" and steps[0][1]["args"] == {"order_id": "A-1"}
    assert Event.objects.filter(task=task, type="decision_recorded").count() == 1
    assert len(openai_server.requests) == 3

    messages = stream.wait_end(timeout=60)
    ids = [m.json()["id"] for m in messages if m.event == "message"]
    assert ids == list(Event.objects.filter(task=task).order_by("id").values_list("id", flat=True))
    assert messages[-1].event == "end" and messages[-1].json()["status"] == "SUCCEEDED"
