"""The task's plain counters: writes that count and never move the version.

A model call is counted whether or not its decision commits (`task_charge`,
`bill_write`, `task_model_call_count`); the failures of a step or a model
while the task stands still are counted on the row, so the count holds across
slices, workers and restarts (`task_fault_count`, `task_model_failure_count`).
Each is one UPDATE with the increments as expressions (no read, no lock).
"""
from __future__ import annotations

from django.db.models import Case, F, Value, When

from ..models import Task
from .backends import backend
from .spend import Bill, rollup_params, rollup_sql


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


def bill_write(task_id: int, bill: Bill) -> None:
    """A model call's bill on its own (`spend`: its decision did not commit, or
    the call is not a decision's): the task's usage counters and the day's
    rollup at once, as the backend writes them (on PostgreSQL one statement,
    the UPDATE as a CTE before the upsert)."""
    backend().usage_add(task_id, bill.task,
                        with_statement=(rollup_sql(from_task=False) + " RETURNING 1",
                                        rollup_params(bill)))


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


def task_tool_call_count(task_id: int) -> None:
    """A reply's card a reviewer answered in the tool's place, before the task
    runs again (the last card's decision counts it in its transition)."""
    Task.objects.filter(pk=task_id).update(tool_calls=F("tool_calls") + 1)
