"""Replies the model refused (a provider's safety filter, `finish_reason`
"content_filter", or the model's own `refusal`): the gateway asked again and
then the fallback model (`gateway.openai_backend`); here they are put on the
task's timeline (`model_refused`, one event each, with what came next), and a
task no model would answer goes to a person (escalated), whatever its
`on_exhaustion`: a refusal is not a budget, and a person can rephrase the
goal, change the model, or cancel."""
from __future__ import annotations

from typing import Any

from django.db import transaction

from foundations.actors import Actor

from ..gateway import ModelRefused
from ..snapshot import TaskSnapshot
from ..store.events import event_note
from ..store.tasks import task_transition
from .results import STOP, StepResult
from .stopping import failure_snapshot, known


def refusals_noted(snap: TaskSnapshot, refusals: tuple[dict[str, Any], ...]) -> None:
    """One `model_refused` event per refused reply. Written on their own, at
    the task's current version: the refusals happened (and were charged)
    whether or not the decision commits."""
    for refusal in refusals:
        event_note(task_id=snap.id, type="model_refused", actor=Actor.worker("gateway"),
                   payload=dict(refusal))


def refused_to_person(snap: TaskSnapshot, exc: ModelRefused) -> StepResult:
    """Every model asked refused: the task is escalated to a person."""
    detail = {"message": str(exc), "refusals": list(exc.refusals)}
    with transaction.atomic():
        refusals_noted(snap, exc.refusals)
        task_transition(task_id=snap.id, event="escalated", actor=Actor.worker("gateway"),
                        expected_version=snap.version, known=known(snap),
                        payload={"reason": "content_filter", "detail": detail},
                        fields={"failure_detail": failure_snapshot(snap, detail)})
    return STOP
