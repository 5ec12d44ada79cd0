"""Bounded failures (`runner.faults`): a step that raises an unexpected error
is tried again a bounded number of times with backoff, then the task fails
with the error (or escalates); every model call counts against the budget,
whether or not its decision commits.

The unexpected error is a real one: a schema stored before today's rules (a
row written directly, as an older release could have), which the validator
refuses to apply."""
from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from foundations.actors import SYSTEM
from tasks_app.machine import TaskStatus
from tasks_app.models import Step, Task
from tasks_app.runner.faults import trimmed_traceback
from tasks_app.runner.loop import run_slice
from tasks_app.services.admission import admit_created_tasks
from tasks_app.services.tasks import task_cancel, task_resume
from tests.factories import actor_of, submit
from tests.fakes.fixtures import openai_agent
from tests.fakes.openai_server import FakeOpenAI, Scripted, error, reply
from tests.fakes.runtime import InThread, add_agent, assert_log_consistent
from tests.helpers import drive, wait_for
from tools_app.models import Tool

pytestmark = pytest.mark.django_db(transaction=True)

SELF_REF = {"type": "object", "$ref": "#"}  # recursed forever before the rules existed
RETRIES = 2
FAULTS_LOGGER = "tasks_app.runner.faults"


@pytest.fixture(autouse=True)
def _two_retries(settings: Any) -> None:
    settings.TETHER = {**settings.TETHER, "STEP_ERROR_RETRIES": RETRIES}


def _fault_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == FAULTS_LOGGER and r.levelno == logging.ERROR]


def _stored_hostile_args_schema(world: Any) -> None:
    Tool.objects.filter(tenant=world.tenant, name="lookup_order").update(args_schema=SELF_REF)


def test_a_step_that_keeps_raising_is_retried_then_the_task_fails_with_the_error(
        world: Any, caplog: pytest.LogCaptureFixture) -> None:
    _stored_hostile_args_schema(world)
    add_agent(world.tenant, "plain", ["lookup_order"], on_exhaustion="fail")
    task = drive(submit(world.tenant, [{"tool": "lookup_order", "args": {"order_id": "A-1"}},
                                       {"final": {"ok": True}}], agent="plain").pk)

    assert task.status == TaskStatus.FAILED
    assert task.failure_reason == "step_error"
    detail = task.failure_detail["detail"]
    assert detail["type"] == "step_error" and detail["attempts"] == RETRIES + 1
    assert detail["error"].startswith("SchemaRefused: ") and "cycle" in detail["error"]
    assert task.steps_count == 0 and not Step.objects.filter(task=task).exists()
    # One log line per attempt, each with one short traceback.
    lines = _fault_lines(caplog)
    assert len(lines) == RETRIES + 1
    assert [f"attempt {n} of {RETRIES + 1}" in line for n, line in enumerate(lines, 1)] == [
        True] * (RETRIES + 1)
    assert all(line.count("Traceback (most recent call last)") == 1 for line in lines)
    assert "the task stops" in lines[-1]
    assert_log_consistent(task.pk)


def test_with_escalate_the_task_waits_for_a_person_and_a_resume_starts_counting_afresh(
        world: Any, caplog: pytest.LogCaptureFixture) -> None:
    _stored_hostile_args_schema(world)
    add_agent(world.tenant, "careful", ["lookup_order"], on_exhaustion="escalate")
    script = [{"tool": "lookup_order", "args": {"order_id": "A-1"}}, {"final": {"ok": True}}]
    task = drive(submit(world.tenant, script, agent="careful").pk)

    assert task.status == TaskStatus.WAITING_FOR_HUMAN
    assert task.failure_detail["detail"]["attempts"] == RETRIES + 1
    assert len(_fault_lines(caplog)) == RETRIES + 1

    # The operator resumes without mending anything: a full round of attempts again.
    task_resume(task_id=task.pk, actor=actor_of(world.users["operator"]))
    task = drive(task.pk)
    assert task.status == TaskStatus.WAITING_FOR_HUMAN
    assert len(_fault_lines(caplog)) == 2 * (RETRIES + 1)

    # Mended, the task goes on from where it stood.
    Tool.objects.filter(tenant=world.tenant, name="lookup_order").update(
        args_schema={"type": "object"})
    task_resume(task_id=task.pk, actor=actor_of(world.users["operator"]))
    task = drive(task.pk)
    assert task.status == TaskStatus.SUCCEEDED
    assert_log_consistent(task.pk)


def test_a_result_schema_that_cannot_be_applied_fails_the_task_and_every_model_call_counts(
        world: Any, openai_server: FakeOpenAI, caplog: pytest.LogCaptureFixture) -> None:
    """The issue's case: the model was asked again at every retry, for as long
    as the deadline allowed, while `usage.model_calls` stayed 0."""
    openai_agent(world.tenant, openai_server, result_schema=SELF_REF)
    openai_server.responder = lambda received: reply('{"answer": "done"}', usage=(10, 5))
    task = drive(submit(world.tenant, None, agent="llm", goal="Say done").pk)

    assert task.status == TaskStatus.FAILED
    assert task.failure_reason == "step_error"
    assert "SchemaRefused" in task.failure_detail["detail"]["error"]
    assert len(openai_server.requests) == RETRIES + 1
    assert (task.model_calls, task.tokens) == (RETRIES + 1, 15 * (RETRIES + 1))
    assert task.failure_detail["usage"]["model_calls"] == RETRIES + 1
    assert len(_fault_lines(caplog)) == RETRIES + 1


def test_a_decision_that_cannot_commit_still_counts_its_model_call(
        world: Any, openai_server: FakeOpenAI) -> None:
    openai_agent(world.tenant, openai_server)
    asked, answer = threading.Event(), threading.Event()

    def held(received: Any) -> Scripted:
        asked.set()
        answer.wait(20)
        return reply('{"answer": "too late"}', usage=(30, 7))

    openai_server.responder = held
    task = submit(world.tenant, None, agent="llm", goal="Say done")
    admit_created_tasks()
    run = InThread(lambda: run_slice(task.pk))
    wait_for(asked.is_set, message="the model to be asked")
    task_cancel(task_id=task.pk, actor=SYSTEM)  # the decision's commit will find a new version
    answer.set()
    run.join()

    task = Task.objects.get(pk=task.pk)
    assert task.status == TaskStatus.CANCELED
    assert not Step.objects.filter(task=task).exists()
    assert (task.model_calls, task.tokens) == (1, 37)
    assert_log_consistent(task.pk)


def test_failed_model_calls_count_so_the_model_call_budget_ends_a_flapping_model(
        world: Any, openai_server: FakeOpenAI) -> None:
    openai_agent(world.tenant, openai_server, model={"max_retries": 0}, max_model_calls=3)
    openai_server.responder = lambda received: error(503, "overloaded")
    task = drive(submit(world.tenant, None, agent="llm", goal="Say done").pk)

    assert task.status == TaskStatus.FAILED
    assert task.failure_reason == "max_model_calls"
    assert len(openai_server.requests) == 3 and task.model_calls == 3


def test_a_traceback_thousands_of_frames_deep_is_logged_trimmed() -> None:
    def down(n: int) -> int:
        return down(n + 1) + 1

    try:
        down(0)
    except RecursionError as exc:
        text = trimmed_traceback(exc)
    assert "RecursionError" in text
    assert "frames left out" in text
    assert len(text.splitlines()) < 80


REFUSED_RELEASES = 2
REFUSE_RELEASES_SQL = f"""
CREATE SEQUENCE tether_test_refusals;
CREATE FUNCTION tether_test_refuse_release() RETURNS trigger AS $$
BEGIN
    IF NEW.lease_owner = '' AND OLD.lease_owner <> ''
       AND nextval('tether_test_refusals') <= {REFUSED_RELEASES} THEN
        RAISE EXCEPTION 'the database is going away (a test)';
    END IF;
    RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER tether_test_refuse_release BEFORE UPDATE ON {Task._meta.db_table}
    FOR EACH ROW EXECUTE FUNCTION tether_test_refuse_release();
"""
ALLOW_RELEASES_SQL = f"""
DROP TRIGGER tether_test_refuse_release ON {Task._meta.db_table};
DROP FUNCTION tether_test_refuse_release();
DROP SEQUENCE tether_test_refusals;
"""


@pytest.mark.postgres_only("a trigger stands for the database refusing statements")
def test_a_failed_step_hands_its_task_back_through_a_database_that_refuses_for_a_while(
        world: Any, caplog: pytest.LogCaptureFixture) -> None:
    """A database restart fails the step and then the release of its lease:
    the slice tries the release again rather than leave the task to the lease's
    expiry and the sweep (half a minute of nothing, seen after PostgreSQL restarts)."""
    from django.db import connection

    _stored_hostile_args_schema(world)
    add_agent(world.tenant, "plain", ["lookup_order"], on_exhaustion="fail")
    task = submit(world.tenant, [{"tool": "lookup_order", "args": {"order_id": "A-1"}},
                                 {"final": {"ok": True}}], agent="plain")
    admit_created_tasks()
    with connection.cursor() as cursor:
        cursor.execute(REFUSE_RELEASES_SQL)
    try:
        with caplog.at_level(logging.WARNING, logger="tasks_app.runner.loop"):
            report = run_slice(task.pk, owner="worker-under-test")
    finally:
        with connection.cursor() as cursor:
            cursor.execute(ALLOW_RELEASES_SQL)

    assert report.ended == "error"
    task = Task.objects.get(pk=task.pk)
    assert task.status == TaskStatus.RUNNING
    assert task.lease_owner == "" and task.next_run_at is not None  # handed back, to come back
    assert task.fault_attempts == 1
    refused = [r.getMessage() for r in caplog.records
               if "the database refused the hand-back" in r.getMessage()]
    assert len(refused) == REFUSED_RELEASES
