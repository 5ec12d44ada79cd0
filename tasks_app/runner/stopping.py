"""Stopping a task from a step: a budget, the deadline, no progress, retries or
a step's error attempts used up (`exhaust`: fail or escalate, as the profile
says), or an error that ends it (`fail`). Each is one guarded transition."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from foundations.actors import Actor

from ..snapshot import TaskSnapshot
from ..store.tasks import KnownTask, task_transition
from .results import STOP, StepResult


def known(snap: TaskSnapshot) -> KnownTask:
    return KnownTask(status=snap.status, tenant_id=snap.tenant_id, trace_id=snap.trace_id)


def failure_snapshot(snap: TaskSnapshot, detail: Any = None) -> dict[str, Any]:
    return {
        "detail": detail,
        "usage": {"steps": snap.steps_count, "model_calls": snap.model_calls,
                  "tool_calls": snap.tool_calls, "tokens": snap.tokens, "per_tool": snap.per_tool},
        "version": snap.version,
        "at": timezone.now().isoformat(),
    }


@dataclass(frozen=True)
class Exhaustion:
    """How a task stops when something is used up: the transition's event, its
    payload and the task's fields it sets."""

    event: str
    payload: dict[str, Any]
    fields: dict[str, Any]


def exhaustion(snap: TaskSnapshot, reason: str, *, detail: Any = None,
               step_no: int | None = None) -> Exhaustion:
    """Budget, deadline, no progress, retries or a step's error attempts used up:
    fail or escalate, as the profile says."""
    if snap.on_exhaustion == "escalate":
        event = "escalated"
        fields: dict[str, Any] = {"failure_detail": failure_snapshot(snap, detail)}
    else:
        event = {"deadline": "deadline_exceeded", "no_progress": "fatal_error",
                 "retries_exhausted": "fatal_error", "step_error": "fatal_error",
                 "completion_checks": "fatal_error",
                 }.get(reason, "budget_exhausted")
        fields = {"failure_reason": reason, "failure_detail": failure_snapshot(snap, detail)}
    payload = {"reason": reason, "detail": detail, **({"step_no": step_no} if step_no else {})}
    return Exhaustion(event, payload, fields)


def exhaust(snap: TaskSnapshot, reason: str, actor: Actor, *,
            counters: dict[str, Any] | None = None,
            detail: Any = None, step_no: int | None = None) -> StepResult:
    """`exhaustion`'s transition, on its own (a step's decision records its own with it)."""
    stop = exhaustion(snap, reason, detail=detail, step_no=step_no)
    task_transition(task_id=snap.id, event=stop.event, actor=actor, expected_version=snap.version,
                    known=known(snap), payload=stop.payload,
                    fields={**(counters or {}), **stop.fields})
    return STOP


def fail(snap: TaskSnapshot, reason: str, actor: Actor, *, detail: Any = None) -> StepResult:
    task_transition(task_id=snap.id, event="fatal_error", actor=actor,
                    expected_version=snap.version, known=known(snap),
                    payload={"reason": reason, "detail": detail},
                    fields={"failure_reason": reason,
                            "failure_detail": failure_snapshot(snap, detail)})
    return STOP
