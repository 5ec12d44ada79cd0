"""The step state machine (`store.steps`): the table of allowed moves, its one
guard, and the guarded write every step status goes through."""
from __future__ import annotations

import pytest

from foundations.errors import DomainError, ErrorKind
from tasks_app.models import Step, StepStatus
from tasks_app.models.tasks import OPEN_STEP_STATUSES
from tasks_app.store.steps import (
    BORN_AS,
    STEP_TRANSITIONS,
    sources_of,
    step_allowed,
    step_create,
    step_guard,
    step_move,
)
from tests.factories import submit

S = StepStatus
ALLOWED = [
    (S.PENDING_APPROVAL, S.RUNNING),  # approved
    (S.PENDING_APPROVAL, S.REJECTED),  # rejected, or expired
    (S.PENDING_APPROVAL, S.SUCCEEDED),  # a reviewer responded instead of the tool
    (S.RUNNING, S.SUCCEEDED),
    (S.RUNNING, S.FAILED),
    (S.RUNNING, S.RETRYING),
    (S.RUNNING, S.UNCERTAIN),
    (S.RETRYING, S.RETRYING),  # another attempt
    (S.RETRYING, S.SUCCEEDED),
    (S.UNCERTAIN, S.RUNNING),  # a reviewer asked for a retry with the same key
    (S.UNCERTAIN, S.FAILED),
    *[(open_, end) for open_ in OPEN_STEP_STATUSES for end in (S.FAILED, S.DISCARDED)],
]
REFUSED = [
    *[(final, to) for final in (S.SUCCEEDED, S.FAILED, S.REJECTED, S.DISCARDED) for to in S],
    (S.RUNNING, S.PENDING_APPROVAL),
    (S.RUNNING, S.REJECTED),
    (S.RUNNING, S.RUNNING),
    (S.RETRYING, S.PENDING_APPROVAL),
    (S.PENDING_APPROVAL, S.RETRYING),
    (S.PENDING_APPROVAL, S.UNCERTAIN),
]


@pytest.mark.parametrize(("source", "target"), ALLOWED)
def test_allowed_moves(source: str, target: str) -> None:
    assert step_allowed(source, target)
    assert source in sources_of(target)
    step_guard(source, target)  # does not raise


@pytest.mark.parametrize(("source", "target"), REFUSED)
def test_refused_moves(source: str, target: str) -> None:
    assert not step_allowed(source, target)
    assert source not in sources_of(target)
    with pytest.raises(DomainError) as refused:
        step_guard(source, target)
    assert (refused.value.kind, refused.value.code) == (ErrorKind.CONFLICT,
                                                        "illegal_step_transition")


def test_the_table_covers_every_status_and_only_open_ones_move() -> None:
    assert set(STEP_TRANSITIONS) == set(S)
    assert {s for s, to in STEP_TRANSITIONS.items() if to} == set(OPEN_STEP_STATUSES)
    assert {S.RUNNING, S.PENDING_APPROVAL, S.FAILED, S.SUCCEEDED} == BORN_AS


@pytest.mark.django_db
def test_a_refused_move_writes_nothing(world) -> None:
    task = submit(world.tenant, [{"final": {"ok": True}}])
    step = step_create(task_id=task.pk, step_no=1, kind="tool", status=S.RUNNING,
                       tool="lookup_order", args={})
    step_move(step.pk, S.SUCCEEDED, output={"ok": True})

    with pytest.raises(DomainError) as refused:
        step_move(step.pk, S.RETRYING, error={"type": "late"})

    assert refused.value.code == "illegal_step_transition"
    assert Step.objects.filter(pk=step.pk).values_list("status", "output", "error").get() == (
        S.SUCCEEDED, {"ok": True}, None)


@pytest.mark.django_db
def test_a_step_is_born_only_in_a_birth_status(world) -> None:
    task = submit(world.tenant, [{"final": {"ok": True}}])
    with pytest.raises(DomainError):
        step_create(task_id=task.pk, step_no=1, kind="tool", status=S.RETRYING, tool="x")
    assert not Step.objects.filter(task_id=task.pk).exists()
