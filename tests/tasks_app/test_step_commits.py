"""The runner's commits (`store.commits`): one SQL statement each on
PostgreSQL, the ORM in one transaction elsewhere (SQLite, the embedded mode).
Both must write the same rows, and neither may write anything when the
task's version moved on."""

from __future__ import annotations

from typing import Any

import pytest

from foundations.actors import Actor
from tasks_app.keys import idempotency_key
from tasks_app.machine import TaskStatus
from tasks_app.models import Event, Step, Task
from tasks_app.services.admission import admit_created_tasks
from tasks_app.services.tasks import task_cancel
from tasks_app.snapshot import TaskSnapshot
from tasks_app.store import commits, writes
from tasks_app.store.backends import ORM
from tests.factories import submit
from tests.helpers import drive
from tools_app.executor.ledger import call_claimed
from tools_app.models import LedgerStatus, ToolExecution
from tools_app.registry import tool_specs

SCRIPT = [
    {"tool": "lookup_order", "args": {"order_id": "A-1"}},
    {"tool": "lookup_order", "args": {"order_id": "Z-9"}},  # a business error
    {"tool": "lookup_order", "args": {"order_id": "A-2"}},
    {"final": {"ok": True}},
]


def _orm_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writes, "backend", lambda: ORM)


def _written(task_id: int) -> dict[str, Any]:
    """What a run wrote, without ids and clocks."""
    task = Task.objects.get(pk=task_id)
    steps = list(Step.objects.filter(task_id=task_id).order_by("step_no"))
    for step in steps:
        if step.kind == "tool":
            assert step.idempotency_key == idempotency_key(
                task_id=task_id, step_id=step.pk, tool=step.tool, args=step.args)
    events = list(Event.objects.filter(task_id=task_id).order_by("id"))
    keys = {s.idempotency_key: s.step_no for s in steps if s.idempotency_key}
    ledger = list(ToolExecution.objects.filter(task_id=task_id).order_by("id"))
    return {
        "task": {f: getattr(task, f) for f in (
            "status", "version", "steps_count", "model_calls", "tool_calls", "tokens", "per_tool",
            "last_call_hash", "repeat_count", "stale_steps", "result")},
        "steps": [(s.step_no, s.kind, s.status, s.decision,
                   {k: v for k, v in s.model_log.items() if k != "latency_ms"}, s.tool, s.args,
                   s.output, s.error, s.output_hash, s.attempt, s.latency_ms is not None,
                   s.finished_at is not None) for s in steps],
        "events": [(e.type, e.task_version, e.actor_role,
                    {k: (keys[v] if k == "idempotency_key" else v)
                     for k, v in e.payload.items() if k != "latency_ms"}) for e in events],
        "ledger": [(keys[x.idempotency_key], x.tool, x.args, x.status, x.result, x.error,
                    x.claimed_by, x.claimed_until, [a.get("outcome") for a in x.attempts])
                   for x in ledger],
    }


@pytest.mark.postgres_only("the one-statement commits (data-modifying CTEs) to compare with")
@pytest.mark.django_db(transaction=True)
def test_one_statement_and_orm_commits_write_the_same_rows(world, monkeypatch):
    fast = drive(submit(world.tenant, SCRIPT).pk)
    _orm_only(monkeypatch)
    orm = drive(submit(world.tenant, SCRIPT).pk)

    assert fast.status == orm.status == TaskStatus.SUCCEEDED
    written_fast, written_orm = _written(fast.pk), _written(orm.pk)
    assert written_fast == written_orm
    assert [row[3] for row in written_fast["ledger"]] == [
        LedgerStatus.SUCCEEDED, LedgerStatus.FAILED_FINAL, LedgerStatus.SUCCEEDED]
    assert [row[2] for row in written_fast["steps"]] == [
        "SUCCEEDED", "FAILED", "SUCCEEDED", "SUCCEEDED"]


def _admitted(world: Any) -> Task:
    """A RUNNING task nobody has advanced yet."""
    task = submit(world.tenant, SCRIPT)
    admit_created_tasks()
    task = Task.objects.get(pk=task.pk)
    assert task.status == TaskStatus.RUNNING and task.steps_count == 0
    return task


def _decide(snap: TaskSnapshot, world: Any) -> commits.DecisionCommitted | None:
    spec = tool_specs(tenant_id=snap.tenant_id, names=["lookup_order"])["lookup_order"]
    return commits.commit_decision(
        snap, decision={"kind": "tool_call", "tool": "lookup_order",
                        "args": {"order_id": "A-1"}, "reason": "", "cites": []},
        model_log={}, tool="lookup_order", args={"order_id": "A-1"}, reason="", spec=spec,
        model_calls=1, tokens=5, owner="test", actor=Actor.worker("test"))


@pytest.fixture(params=[
    pytest.param("one statement", marks=pytest.mark.postgres_only(
        "the one-statement commits (data-modifying CTEs)")),
    "orm",
])
def commit_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "orm":
        _orm_only(monkeypatch)
    return str(request.param)


@pytest.mark.django_db
def test_a_stale_version_writes_nothing(world, commit_path):
    task = _admitted(world)
    snap = TaskSnapshot.of(task)
    task_cancel(task_id=task.pk, actor=Actor(name="op", role="operator"), reason="test")
    before = _written(task.pk)

    assert _decide(snap, world) is None
    assert _written(task.pk) == before


@pytest.mark.django_db
def test_a_decision_checks_the_status_as_well_as_the_version(world, commit_path):
    task = _admitted(world)
    snap = TaskSnapshot.of(task)
    # The status moved without the version (no service does that: the check is
    # the commit's own, and both paths must make it).
    Task.objects.filter(pk=task.pk).update(status=TaskStatus.WAITING_FOR_INPUT)
    before = _written(task.pk)

    assert _decide(snap, world) is None
    assert _written(task.pk) == before


@pytest.mark.django_db(transaction=True)
def test_an_outcome_after_a_cancel_is_refused_and_changes_nothing(world, commit_path):
    task = _admitted(world)
    snap = TaskSnapshot.of(task)
    decided = _decide(snap, world)
    assert decided is not None
    assert ToolExecution.objects.get(task_id=task.pk).status == LedgerStatus.IN_PROGRESS
    outcome = call_claimed(decided.claim)
    task_cancel(task_id=task.pk, actor=Actor(name="op", role="operator"), reason="test")
    before = _written(task.pk)

    done = commits.commit_outcome(
        snap, decided.step, outcome, output_hash="h", claim=decided.claim,
        fields={"per_tool": {"lookup_order": 1}, "last_call_hash": "c", "repeat_count": 1,
                "stale_steps": 0},
        actor=Actor.worker("test"))

    assert done is None
    assert _written(task.pk) == before  # the ledger too: the runner records it separately


def _final(snap: TaskSnapshot) -> bool:
    return commits.commit_final(snap, decision={"kind": "final", "result": {"ok": True}},
                                model_log={}, result={"ok": True}, model_calls=1, tokens=3,
                                actor=Actor.worker("test"))


def _with_an_open_step(world: Any) -> Task:
    """A RUNNING task whose step 1 was left RETRYING (as by a crash)."""
    task = _admitted(world)
    step = Step.objects.create(task_id=task.pk, step_no=1, kind="tool", status="RETRYING",
                               tool="lookup_order", args={"order_id": "A-1"})
    Step.objects.filter(pk=step.pk).update(idempotency_key=idempotency_key(
        task_id=task.pk, step_id=step.pk, tool=step.tool, args=step.args))
    Task.objects.filter(pk=task.pk).update(steps_count=1)
    return Task.objects.get(pk=task.pk)


@pytest.mark.django_db
def test_a_final_answer_ends_the_task_and_closes_what_it_left_open(world, commit_path):
    task = _with_an_open_step(world)

    assert _final(TaskSnapshot.of(task)) is True

    done = Task.objects.get(pk=task.pk)
    assert (done.status, done.version, done.result) == (
        TaskStatus.SUCCEEDED, task.version + 1, {"ok": True})
    assert (done.steps_count, done.model_calls, done.tokens, done.lease_owner) == (2, 1, 3, "")
    assert done.finished_at is not None
    left, final = Step.objects.filter(task_id=task.pk).order_by("step_no")
    assert (left.status, left.error["type"]) == ("FAILED", "task_ended")
    assert (final.kind, final.status, final.output) == ("final", "SUCCEEDED", {"ok": True})
    event = Event.objects.filter(task_id=task.pk).latest("id")
    assert (event.type, event.task_version, event.payload) == (
        "final_accepted", done.version, {"from": "RUNNING", "to": "SUCCEEDED", "step_no": 2})


@pytest.mark.django_db
def test_a_final_answer_on_a_stale_version_writes_nothing(world, commit_path):
    task = _with_an_open_step(world)
    snap = TaskSnapshot.of(task)
    Task.objects.filter(pk=task.pk).update(version=task.version + 1)  # another writer
    before = _written(task.pk)

    assert _final(snap) is False
    assert _written(task.pk) == before
    assert Step.objects.get(task_id=task.pk, step_no=1).status == "RETRYING"
