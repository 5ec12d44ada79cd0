"""The task's plain counters: writes that count and never move the version.

A model call is counted whether or not its decision commits (`task_charge`,
`task_usage_add`, `task_model_call_count`); the failures of a step or a model
while the task stands still are counted on the row, so the count holds across
slices, workers and restarts (`task_fault_count`, `task_model_failure_count`).
Each is one UPDATE with the increments as expressions (no read, no lock).
"""
from __future__ import annotations

from django.db.models import Case, F, Value, When

from ..models import Task


def task_charge(task_id: int, *, model_calls: int, tokens: int) -> None:
    """Count model calls whose decision did not commit, in a short commit of
    their own (plain counters: the version does not move)."""
    if model_calls:
        Task.objects.filter(pk=task_id).update(model_calls=F("model_calls") + model_calls,
                                               tokens=F("tokens") + tokens)


def task_model_call_count(task_id: int, *, calls: int = 1, tokens: int) -> None:
    """Count model calls that are not a decision's (a context summary's)."""
    Task.objects.filter(pk=task_id).update(model_calls=F("model_calls") + calls,
                                           tokens=F("tokens") + tokens)


def task_usage_add(task_id: int, amounts: dict[str, int]) -> None:
    """Add one call's usage and cost (`amounts`: counter name -> increment)."""
    Task.objects.filter(pk=task_id).update(**{k: F(k) + v for k, v in amounts.items()})


def task_model_failure_count(task_id: int, *, at: str) -> int:
    """Count one more failure of the task's model where it stands (`at`: its
    version and step count); the count, this failure included."""
    Task.objects.filter(pk=task_id).update(
        model_failures=Case(When(model_failure_at=at, then=F("model_failures") + 1),
                            default=Value(1)),
        model_failure_at=at)
    return Task.objects.filter(pk=task_id).values_list("model_failures", flat=True).first() or 1


def task_fault_count(task_id: int, *, owner: str, attempt: int, at: str) -> None:
    """Record the `attempt`-th error of a step where the task stands (`at`), if
    `owner` still holds its lease."""
    Task.objects.filter(pk=task_id, lease_owner=owner).update(fault_attempts=attempt, fault_at=at)
