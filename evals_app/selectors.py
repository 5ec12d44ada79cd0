"""Reads of evaluations, always within the caller's tenant."""
from __future__ import annotations

from django.db.models import QuerySet

from .models import Evaluation, EvaluationTask


def evaluations_of(tenant_id: int, *, agent: str | None = None) -> QuerySet[Evaluation]:
    qs = Evaluation.objects.filter(tenant_id=tenant_id).select_related("agent")
    return qs.filter(agent__name=agent) if agent else qs


def evaluation_of(tenant_id: int, evaluation_id: int) -> Evaluation | None:
    return evaluations_of(tenant_id).filter(pk=evaluation_id).first()


def evaluation_tasks(evaluation: Evaluation) -> QuerySet[EvaluationTask]:
    return evaluation.tasks.order_by("id")


def progress_of(evaluation: Evaluation) -> dict[str, int]:
    total = evaluation.tasks.count()
    done = evaluation.tasks.filter(done=True).count()
    return {"tasks": total, "done": done}


def replay_of(evaluation: Evaluation, recorded_task_id: int) -> EvaluationTask | None:
    """The evaluation's replay of one recorded task (None: it replayed no such task)."""
    return evaluation.tasks.filter(recorded_task_id=recorded_task_id).first()
