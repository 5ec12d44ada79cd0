"""The slice memo: what one step leaves for the next must be what the next
step would have read from the database."""

from __future__ import annotations

from dataclasses import replace

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from foundations.actors import SYSTEM
from tasks_app.context.builder import gather
from tasks_app.models import ContextSummary, Event, Task
from tasks_app.runner.memo import SliceMemo
from tasks_app.runner.step import Next, advance_one_step
from tasks_app.services.admission import admit_created_tasks
from tasks_app.services.tasks import task_cancel
from tasks_app.snapshot import TaskSnapshot
from tasks_app.store.leases import lease_release, lease_take
from tests.factories import submit
from tools_app.models import ToolExecution

SCRIPT = [
    {"tool": "lookup_order", "args": {"order_id": "A-1"}, "reason": "look 1"},
    {"tool": "lookup_order", "args": {"order_id": "Z-9"}},  # a business error
    {"tool": "lookup_order", "args": {"order_id": "A-2"}},
    {"tool": "lookup_order", "args": {"order_id": "A-1"}},
    {"tool": "lookup_order", "args": {"order_id": "A-2"}},
    {"final": {"ok": True}},
]


def _sources_view(sources):  # type: ignore[no-untyped-def]
    return (
        sources.covered,
        [(s.step_no, s.status, s.output, s.error, s.output_hash, s.chars,
          int(s.reply_of) if s.reply_of not in (None, "") else None) for s in sources.recent],
        sources.human_facts,
    )


@pytest.mark.django_db(transaction=True)
def test_carried_state_matches_a_fresh_read_through_summaries(world, settings):
    # A window of 1 and a threshold of 2: summaries are made along the way.
    settings.TETHER = {**settings.TETHER, "CONTEXT_WINDOW_STEPS": 1, "SUMMARY_THRESHOLD_STEPS": 2}
    task = submit(world.tenant, SCRIPT)
    admit_created_tasks()
    assert lease_take(task_id=task.pk, owner="test")
    memo, compared = SliceMemo(), 0
    try:
        for _ in range(len(SCRIPT) - 1):
            assert advance_one_step(task_id=task.pk, owner="test", memo=memo).next is Next.CONTINUE
            assert memo.snap == TaskSnapshot.of(Task.objects.get(pk=task.pk))
            assert memo.current is not None
            assert memo.current.step_no == memo.snap.steps_count
            if memo.sources is not None:
                assert _sources_view(memo.sources) == _sources_view(gather(task.pk))
                compared += 1
    finally:
        lease_release(task_id=task.pk, owner="test")
    assert compared >= 3
    assert ContextSummary.objects.filter(task=task).count() >= 2


def _one_step_in(world):  # type: ignore[no-untyped-def]
    """A task with one step done in a slice of this test's, and its memo."""
    task = submit(world.tenant, SCRIPT)
    admit_created_tasks()
    assert lease_take(task_id=task.pk, owner="test")
    memo = SliceMemo()
    assert advance_one_step(task_id=task.pk, owner="test", memo=memo).next is Next.CONTINUE
    return task, memo


@pytest.mark.django_db(transaction=True)
def test_a_cancel_between_steps_is_seen_before_a_model_is_asked(world):
    task, memo = _one_step_in(world)
    # The agent's model is a real one: asking it costs, so the memo is checked first.
    assert memo.snap is not None
    memo.snap = replace(memo.snap, agent={**memo.snap.agent, "model": {"backend": "openai"}})
    assert not memo.decision_is_free()
    task_cancel(task_id=task.pk, actor=SYSTEM, reason="stop")

    assert advance_one_step(task_id=task.pk, owner="test", memo=memo).next is Next.STOP
    assert memo.snap is None and memo.sources is None
    assert Task.objects.get(pk=task.pk).steps_count == 1  # nothing decided after the cancel


@pytest.mark.django_db(transaction=True)
def test_a_cancel_between_free_decisions_is_fenced_by_the_decisions_commit(world):
    """A scripted decision costs nothing: no probe; the version-checked commit
    refuses it, nothing is written, no tool runs, and the next step stops."""
    task, memo = _one_step_in(world)
    assert memo.decision_is_free()
    task_cancel(task_id=task.pk, actor=SYSTEM, reason="stop")
    events = Event.objects.filter(task=task).count()

    assert advance_one_step(task_id=task.pk, owner="test", memo=memo).next is Next.CONTINUE
    assert memo.snap is None
    canceled = Task.objects.get(pk=task.pk)
    assert (canceled.status, canceled.steps_count) == ("CANCELED", 1)
    assert Event.objects.filter(task=task).count() == events
    assert ToolExecution.objects.filter(task_id=task.pk).count() == 1  # step 1's call only

    assert advance_one_step(task_id=task.pk, owner="test", memo=memo).next is Next.STOP


@pytest.mark.django_db(transaction=True)
def test_a_slices_first_step_reads_no_task_row_it_came_with_the_lease(world):
    task = submit(world.tenant, SCRIPT)
    admit_created_tasks()
    leased = lease_take(task_id=task.pk, owner="test")
    assert leased is not None

    with CaptureQueriesContext(connection) as ctx:
        result = advance_one_step(task_id=task.pk, owner="test", memo=SliceMemo(leased=leased))

    assert result.next is Next.CONTINUE
    assert Task.objects.get(pk=task.pk).steps_count == 1
    reads = [q["sql"] for q in ctx.captured_queries
             if q["sql"].lstrip().upper().startswith("SELECT") and "tasks_app_task" in q["sql"]]
    assert reads == []
