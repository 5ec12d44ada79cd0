"""A compensation runs beside the worker's slices, not on its Celery pool's
thread: while one hangs on a downstream that does not answer, the same worker
process (the only one) still takes and finishes other tasks; once the
downstream answers, the write is undone once."""

from __future__ import annotations

import pytest

from tasks_app.machine import TaskStatus
from tasks_app.models import Event, Step, Task
from tests.factories import submit
from tests.fakes.http_tool_server import Reply
from tests.fakes.runtime import add_agent, add_tool, fake_http  # noqa: F401 - fixture
from tests.helpers import wait_for

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_a_hanging_compensation_holds_no_worker_process(
        world, celery_workers, fake_http):  # noqa: F811
    answer = fake_http.hold()  # the compensating service takes the call and does not answer
    fake_http.on("POST", "/undo", Reply(200, {"undone": True}, hold=answer))
    add_tool(world.tenant, "undo_http", kind="http", url=fake_http.url("/undo"), target="",
             side_effect="write", max_retries=0, timeout_s=30)
    add_tool(world.tenant, "note", "note", side_effect="write", max_retries=0,
             compensation_tool="undo_http")
    add_tool(world.tenant, "deny", "deny")
    add_agent(world.tenant, "payer", ["note", "deny"])
    celery_workers.start(concurrency=1)  # one pool process: it must not be the one that waits

    failed = submit(world.tenant, [{"tool": "note", "args": {"to": "ada", "text": "charged"}},
                                   {"tool": "deny", "args": {}}], agent="payer")
    wait_for(lambda: fake_http.requests_to("POST", "/undo"), timeout=60,
             message="the compensation to call the service")
    assert Task.objects.get(pk=failed.pk).status == TaskStatus.FAILED

    # The compensation hangs (up to 15 s): other tasks go on meanwhile.
    others = [submit(world.tenant, [{"final": {"n": i}}]) for i in range(3)]
    wait_for(lambda: all(Task.objects.get(pk=t.pk).status == TaskStatus.SUCCEEDED
                         for t in others), timeout=10,
             message="other tasks to finish while the compensation hangs")
    assert not answer.is_set() and not Event.objects.filter(
        task_id=failed.pk, type__startswith="compensation_s").exists()

    answer.set()
    wait_for(lambda: Task.objects.get(pk=failed.pk).compensation_due_at is None, timeout=30,
             message="the compensation to end once the service answers")
    (done,) = Event.objects.filter(task_id=failed.pk, type="compensation_succeeded")
    assert done.payload["step_no"] == 1
    (call,) = fake_http.requests_to("POST", "/undo")
    assert call.body["original_key"] == Step.objects.get(task_id=failed.pk,
                                                         step_no=1).idempotency_key
