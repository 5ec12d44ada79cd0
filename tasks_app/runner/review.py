"""A final answer a reviewer accepted (`recording._final_for_review`: the model's
confidence was below the agent's `min_confidence`). The approval moved its
step to RUNNING and the task back to RUNNING; the task's next step accepts
the answer as it was shown, with no model call. An answer sent back (the
approval rejected) is a REJECTED step the model reads, with the comment."""
from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from foundations.actors import Actor

from ..models import Step, StepKind, StepStatus
from ..snapshot import TaskSnapshot
from ..store.steps import step_move
from ..store.tasks import task_transition
from .results import STOP, StepResult
from .stopping import known


def accepted_final(step: Step | None) -> Step | None:
    """`step`, when it is a final answer a reviewer accepted."""
    if step is None or step.kind != StepKind.FINAL or step.status != StepStatus.RUNNING:
        return None
    return step


def accept_reviewed(snap: TaskSnapshot, step: Step, actor: Actor) -> StepResult:
    """The task SUCCEEDED with the answer the reviewer accepted (a database phase)."""
    result = (step.decision or {}).get("result")
    with transaction.atomic():
        step_move(step.pk, StepStatus.SUCCEEDED, finished_at=timezone.now())
        task_transition(task_id=snap.id, event="final_accepted", actor=actor,
                        expected_version=snap.version, known=known(snap),
                        payload={"step_no": step.step_no, "reviewed": True},
                        fields={"result": result})
    return STOP
