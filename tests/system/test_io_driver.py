"""The driver with real worker processes and a fake edge (model and HTTP tool,
`benchmarks.edge_server`) that answers any number of calls at once.

A task waiting on a call holds no process or thread: one worker process (a
prefork pool of one) has a hundred model calls out at once; a kill -9 of it
with calls in flight loses no task and repeats no write; a cancel fences the
results of every call it catches in flight; a python tool that blocks does
not hold up the other tasks' calls. The edge's gates hold the calls in flight
while the test acts, so nothing here depends on timing.
"""

from __future__ import annotations

import pytest

from foundations.actors import SYSTEM
from tasks_app.machine import TaskStatus
from tasks_app.models import Event, Step, Task
from tasks_app.services.tasks import task_cancel_many
from tests.factories import ToolFactory
from tests.fakes.fixtures import openai_agent
from tests.helpers import wait_for
from tests.system.io_world import (
    LAST_SEEN,
    ONE_PROCESS,
    ROOMY,
    TOOL_CALLS,
    EdgeModel,
    all_ended,
    assert_done_once,
    in_flight,
    submit_io,
)

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_one_worker_process_has_a_hundred_model_calls_in_flight(io_world, edge, celery_workers):
    edge.hold("model")
    celery_workers.start(**ONE_PROCESS, env=ROOMY)
    ids = submit_io(io_world, 100)
    try:
        wait_for(lambda: in_flight(edge, "model", 100), timeout=120,
                 message="100 model calls in flight at once on one worker process")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {LAST_SEEN}") from None
    assert edge.snapshot()["model_peak"] == 100
    edge.release("model")
    tasks = wait_for(lambda: all_ended(ids), timeout=60, message="every task to end")
    assert_done_once(tasks, edge)
    assert edge.snapshot()["model_calls"] == 100 * (TOOL_CALLS + 1)


def test_kill_9_with_calls_in_flight_loses_no_task_and_repeats_no_write(
    io_world, edge, celery_workers
):
    edge.hold("tool")
    first = celery_workers.start(**ONE_PROCESS, env=ROOMY)
    ids = submit_io(io_world, 60)
    wait_for(lambda: in_flight(edge, "tool", 60), timeout=120,
             message="60 tool calls in flight")
    first.kill()  # the whole process group, at once
    assert not first.alive()
    edge.release("tool")  # the downstream does what it was asked; nobody hears it
    wait_for(lambda: edge.snapshot()["tool_in_flight"] == 0, timeout=30,
             message="the orphaned calls to finish downstream")
    celery_workers.start(beat=True, env=ROOMY)
    tasks = wait_for(lambda: all_ended(ids), timeout=240, message="every task to end")
    # The calls cut by the crash were plain writes: settled by their status query,
    # never sent again.
    assert_done_once(tasks, edge)
    assert edge.snapshot()["tool_calls"] == 60 * TOOL_CALLS


def test_a_cancel_fences_every_callin_flight(io_world, edge, celery_workers):
    edge.hold("tool")
    celery_workers.start(**ONE_PROCESS, env=ROOMY)
    ids = submit_io(io_world, 50)
    wait_for(lambda: in_flight(edge, "tool", 50), timeout=120,
             message="50 tool calls in flight")
    assert task_cancel_many(task_ids=ids, actor=SYSTEM)["canceled"] == ids
    edge.release("tool")

    def fenced() -> bool:
        return Event.objects.filter(task_id__in=ids, type="result_discarded").count() == 50

    wait_for(fenced, timeout=120, message="every late result to be discarded")
    for task in Task.objects.filter(pk__in=ids):
        assert task.status == TaskStatus.CANCELED
        step = Step.objects.get(task=task, kind="tool")  # no step after the cancel
        assert step.late_output is not None and step.late_output["kind"] == "ok"
        assert step.output is None  # kept for audit, never applied
    assert edge.snapshot()["model_calls"] == 50  # nobody asked the model again


def test_a_blocking_python_tool_does_not_hold_up_the_other_tasks(
    io_world, edge, celery_workers, tmp_path
):
    ToolFactory(tenant=io_world.tenant, name="blocking_lookup",
                target="tests.system.slow_tools.blocking_lookup",
                args_schema={"type": "object"}, side_effect="read", timeout_s=60, max_retries=0)
    openai_agent(io_world.tenant, EdgeModel(edge), name="blocking", tools=["blocking_lookup"],
                 max_concurrent_tasks=1000,
                 model={"timeout_s": 60, "max_retries": 0})
    gate = tmp_path / "gate"
    celery_workers.start(**ONE_PROCESS, env={**ROOMY, "EDGE_TEST_GATE": str(gate)})
    blocked = submit_io(io_world, 4, agent="blocking")
    wait_for(lambda: Step.objects.filter(task_id__in=blocked, tool="blocking_lookup",
                                         status="RUNNING").count() == 4,
             timeout=120, message="four python tools blocking their threads")
    others = submit_io(io_world, 30)
    tasks = wait_for(lambda: all_ended(others), timeout=240,
                     message="the other tasks to end while the python tools block")
    # All the others' model and tool calls went out and came back meanwhile.
    assert not gate.exists()
    assert Step.objects.filter(task_id__in=blocked, status="RUNNING").count() == 4
    assert_done_once(tasks, edge)
    gate.touch()
    ended = wait_for(lambda: all_ended(blocked), timeout=120, message="the blocked tasks")
    assert all(t.status == TaskStatus.SUCCEEDED for t in ended)
