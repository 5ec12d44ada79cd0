"""The step state machine, and every write of a step's status.

`STEP_TRANSITIONS` is the single table of which status a step may move to from
which; `step_guard` checks one move against it (a refused move is a 409 and
writes nothing). Every write of a step's status goes through here:
`step_create` (a step is born in one of `BORN_AS`), `step_move` (one step,
its UPDATE conditioned on the statuses the table allows to reach the target,
so a concurrent writer cannot be overwritten either), and `close_open_steps`
(a task that ends: its open steps end as `open_steps_end_as` says), and
`step_keep_late` (a late result kept on its step, which may be discarded). The
one-statement commits (`store.commits`) check `step_guard` and condition their
SQL the same way (`sources_of`).
"""
from __future__ import annotations

from datetime import datetime
from functools import cache
from typing import Any, cast

from django.utils import timezone

from foundations.errors import conflict

from ..keys import idempotency_key
from ..models import Step, StepStatus
from ..models.tasks import OPEN_STEP_STATUSES

S = StepStatus
# What a step may be born as: running (a tool call, a question), waiting for an
# approval, or already settled (an invalid or refused decision, a final answer).
BORN_AS = frozenset({S.RUNNING, S.PENDING_APPROVAL, S.FAILED, S.SUCCEEDED})
# status -> the statuses it may move to. SUCCEEDED, FAILED, REJECTED and
# DISCARDED are final. A call retried or left uncertain may run again (its own
# RETRYING/UNCERTAIN again: another attempt); a person resolving an uncertain
# call may send it back to RUNNING; a task that ends fails or discards its open steps.
STEP_TRANSITIONS: dict[str, frozenset[str]] = {
    S.PENDING_APPROVAL: frozenset({S.RUNNING, S.SUCCEEDED, S.REJECTED, S.FAILED, S.DISCARDED}),
    S.RUNNING: frozenset({S.SUCCEEDED, S.FAILED, S.RETRYING, S.UNCERTAIN, S.DISCARDED}),
    S.RETRYING: frozenset({S.SUCCEEDED, S.FAILED, S.RETRYING, S.UNCERTAIN, S.DISCARDED}),
    S.UNCERTAIN: frozenset({S.SUCCEEDED, S.FAILED, S.RETRYING, S.UNCERTAIN, S.RUNNING,
                            S.DISCARDED}),
    S.SUCCEEDED: frozenset(),
    S.FAILED: frozenset(),
    S.REJECTED: frozenset(),
    S.DISCARDED: frozenset(),
}
assert set(STEP_TRANSITIONS) == set(S) and set(OPEN_STEP_STATUSES) == {
    s for s, to in STEP_TRANSITIONS.items() if to}, "every open status, and only those, moves on"


def step_allowed(source: str, target: str) -> bool:
    return target in STEP_TRANSITIONS.get(source, ())


def step_guard(source: str, target: str, *, step_id: int | None = None) -> None:
    """Refuse (409) a move the table does not allow."""
    if not step_allowed(source, target):
        raise conflict("illegal_step_transition",
                       f"a step cannot move from {source} to {target}",
                       step_id=step_id, status=source, to=target)


@cache
def sources_of(target: str) -> tuple[str, ...]:
    """The statuses from which a step may move to `target`."""
    return tuple(s for s, to in STEP_TRANSITIONS.items() if target in to)


def step_create(**fields: Any) -> Step:
    """A new step (its status one of `BORN_AS`)."""
    if fields["status"] not in BORN_AS:
        raise conflict("illegal_step_transition", f"a step is not born {fields['status']}",
                       to=fields["status"])
    return Step.objects.create(**fields)


def step_keyed(step: Step, reused: str | None = None) -> None:
    """Give a new tool step its idempotency key (made from its id), or `reused`
    (a retried task's call the chain already made)."""
    step.idempotency_key = reused or idempotency_key(
        task_id=step.task_id, step_id=step.pk, tool=step.tool, args=cast(dict[str, Any], step.args))
    Step.objects.filter(pk=step.pk).update(idempotency_key=step.idempotency_key)


def step_move(step_id: int, target: str, **fields: Any) -> None:
    """Move one step to `target` with `fields`, from whatever status it has,
    if the table allows it; else 409 and nothing is written."""
    if Step.objects.filter(pk=step_id, status__in=sources_of(target)).update(
            status=target, **fields) != 1:
        status = Step.objects.filter(pk=step_id).values_list("status", flat=True).first()
        step_guard(str(status), target, step_id=step_id)
        raise conflict("step_moved_on", "the step changed meanwhile", step_id=step_id)


def step_keep_late(step_id: int, late: dict[str, Any], *, task_ended: bool) -> tuple[str, bool]:
    """Keep a result that arrived too late on its step, never applied: (the
    step's status now, whether another executor had already settled it, in
    which case the step keeps what was applied). An open step of a task that
    ended is discarded. The row is locked for this instant only."""
    fresh = Step.objects.select_for_update().get(pk=step_id)
    duplicate = fresh.status in (S.SUCCEEDED, S.FAILED, S.REJECTED)
    if not duplicate:
        fresh.late_output = late
        if task_ended and step_allowed(fresh.status, S.DISCARDED):
            fresh.status = S.DISCARDED
        fresh.save(update_fields=["late_output", "status"])
    return fresh.status, duplicate


def open_steps_end_as(event: str, payload: dict[str, Any]) -> tuple[StepStatus, dict[str, Any]]:
    """The status and error an open step is left with when `event` ends its task."""
    if event == "task_canceled":
        return S.DISCARDED, {
            "type": "canceled", "message": str(payload.get("reason") or "task canceled")}
    return S.FAILED, {"type": "task_ended", "message": f"the task ended ({event})"}


def close_open_steps(task_id: int, *, event: str, payload: dict[str, Any],
                     now: datetime | None = None) -> None:
    """A task that ended leaves no step open (a late tool result is then
    discarded at commit). Every open status may reach both endings."""
    status, error = open_steps_end_as(event, payload)
    Step.objects.filter(task_id=task_id, status__in=OPEN_STEP_STATUSES).update(
        status=status, error=error, finished_at=now or timezone.now())
