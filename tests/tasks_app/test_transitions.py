"""The transition table, every (state, event) pair, through the one service that
fires transitions."""
from __future__ import annotations

import pytest

from foundations.actors import SYSTEM
from foundations.errors import DomainError, ErrorKind
from tasks_app.machine import EVENTS, TERMINAL, TaskStatus, target_of
from tasks_app.models import Event, Task
from tasks_app.store.tasks import task_transition
from tests.factories import submit

PAIRS = [(status, event) for status in TaskStatus.values for event in EVENTS]
START_VERSION = 7


def _task_in(world, status: str) -> Task:  # type: ignore[no-untyped-def]
    task = submit(world.tenant, [{"final": {"ok": True}}])
    # test setup: put the row in an arbitrary state (services never do this)
    Task.objects.filter(pk=task.pk).update(status=status, version=START_VERSION)
    return Task.objects.get(pk=task.pk)


def _state(task_id: int) -> tuple[str, int, int, str]:
    task = Task.objects.get(pk=task_id)
    events = Event.objects.filter(task_id=task_id).count()
    return task.status, task.version, events, task.failure_reason


def test_the_table_covers_every_state_and_event():
    assert len(PAIRS) == 9 * 17
    allowed = [(s, e) for s, e in PAIRS if target_of(s, e)]
    # every non-terminal state can be canceled; terminal states accept nothing
    assert all(target_of(s, "task_canceled") == TaskStatus.CANCELED for s in TaskStatus.values
               if s not in TERMINAL)
    assert not [p for p in allowed if p[0] in TERMINAL]


@pytest.mark.django_db
@pytest.mark.parametrize(("status", "event"), PAIRS)
def test_transition(world, status, event):
    task = _task_in(world, status)
    before = _state(task.pk)
    last_event_id = Event.objects.filter(task_id=task.pk).order_by("-id").values_list("id",
                                                                                      flat=True)[0]
    target = target_of(status, event)

    if target is None:
        with pytest.raises(DomainError) as refused:
            task_transition(task_id=task.pk, event=event, actor=SYSTEM,
                            expected_version=START_VERSION)
        assert refused.value.kind == ErrorKind.CONFLICT
        assert refused.value.code == "illegal_transition"
        assert _state(task.pk) == before
        return

    done = task_transition(task_id=task.pk, event=event, actor=SYSTEM,
                           expected_version=START_VERSION,
                           payload={"reason": "table test"})
    task = Task.objects.get(pk=task.pk)  # refresh_from_db is refused on a protected fsm field
    assert (done.status, done.version) == (target, START_VERSION + 1)
    assert (task.status, task.version) == (target, START_VERSION + 1)
    new_events = list(Event.objects.filter(task_id=task.pk, id__gt=last_event_id))
    assert len(new_events) == 1
    (ev,) = new_events
    assert (ev.type, ev.task_version, ev.pk) == (event, START_VERSION + 1, done.event_id)
    assert ev.payload["from"] == status and ev.payload["to"] == target
    assert ev.payload["reason"] == "table test"
    if target in TERMINAL:
        assert task.finished_at is not None and task.lease_owner == ""


@pytest.mark.django_db
@pytest.mark.parametrize("event", ["no_such_event", "", "TASK_STARTED", "status"])
def test_an_unknown_event_is_refused_and_changes_nothing(world, event):
    task = _task_in(world, TaskStatus.RUNNING)
    before = _state(task.pk)
    with pytest.raises(DomainError) as refused:
        task_transition(task_id=task.pk, event=event, actor=SYSTEM)
    assert refused.value.code == "unknown_event"
    assert refused.value.kind == ErrorKind.CONFLICT  # refused with 409, like a disallowed one
    assert _state(task.pk) == before


@pytest.mark.django_db
@pytest.mark.parametrize("expected", [START_VERSION - 1, START_VERSION + 1, 0])
def test_a_stale_expected_version_is_refused(world, expected):
    task = _task_in(world, TaskStatus.RUNNING)
    before = _state(task.pk)
    with pytest.raises(DomainError) as refused:
        task_transition(task_id=task.pk, event="step_succeeded", actor=SYSTEM,
                        expected_version=expected)
    assert refused.value.kind == ErrorKind.CONFLICT
    assert refused.value.code == "stale_version"
    assert refused.value.details["current_version"] == START_VERSION
    assert _state(task.pk) == before


@pytest.mark.django_db
def test_fields_are_written_with_the_transition_and_only_then(world):
    task = _task_in(world, TaskStatus.RUNNING)
    task_transition(task_id=task.pk, event="fatal_error", actor=SYSTEM,
                    fields={"failure_reason": "because"})
    assert Task.objects.get(pk=task.pk).failure_reason == "because"
    with pytest.raises(DomainError):
        task_transition(task_id=task.pk, event="fatal_error", actor=SYSTEM,
                        fields={"failure_reason": "overwritten"})
    assert Task.objects.get(pk=task.pk).failure_reason == "because"


def _open_everything(task: Task) -> None:
    """Test setup: an open step and one open request of each kind."""
    from approvals_app.services import opening
    from tasks_app.models import Step, StepKind, StepStatus

    step = Step.objects.create(task=task, step_no=1, kind=StepKind.TOOL, status=StepStatus.RUNNING,
                               decision={}, model_log={}, tool="lookup_order", args={})
    common = {"task_id": task.pk, "tenant_id": task.tenant_id, "step_id": step.pk,
              "task_version": task.version}
    opening.approval_open(**common, tool="lookup_order", args={}, risk="high", reason="",
                          cites=[], sla_s=0)
    opening.question_open(**common, question="?")
    opening.reconciliation_open(**common, tool="lookup_order", args={}, idempotency_key="k" * 64,
                                status_answer=None, reason="uncertain")


@pytest.mark.django_db
def test_a_task_that_ends_closes_its_open_work_and_no_other_tasks(world):
    ending, other = _task_in(world, TaskStatus.RUNNING), _task_in(world, TaskStatus.RUNNING)
    _open_everything(ending)
    _open_everything(other)

    task_transition(task_id=ending.pk, event="fatal_error", actor=SYSTEM,
                    expected_version=START_VERSION)

    step = ending.steps.get()
    assert (step.status, step.error["type"]) == ("FAILED", "task_ended")
    assert step.finished_at is not None
    for related in ("approvals", "questions", "reconciliations"):
        assert set(getattr(ending, related).values_list("status", flat=True)) == {"canceled"}
    assert other.steps.get().status == "RUNNING"
    assert other.approvals.get().status == "pending"
    assert other.questions.get().status == "open"
    assert other.reconciliations.get().status == "open"


@pytest.mark.django_db
def test_a_canceled_task_discards_its_open_step(world):
    task = _task_in(world, TaskStatus.RUNNING)
    _open_everything(task)

    task_transition(task_id=task.pk, event="task_canceled", actor=SYSTEM,
                    expected_version=START_VERSION, payload={"reason": "not needed"})

    step = task.steps.get()
    assert (step.status, step.error) == ("DISCARDED", {"type": "canceled",
                                                       "message": "not needed"})
