"""The task's plain counters: writes that count and never move the version.

A model call is counted whether or not its decision commits (`task_charge`,
`task_usage_add`, `task_model_call_count`); the failures of a step or a model
while the task stands still are counted on the row, so the count holds across
slices, workers and restarts (`task_fault_count`, `task_model_failure_count`).
Each is one UPDATE with the increments as expressions (no read, no lock).
"""
from __future__ import annotations

from functools import cache
from typing import Any

from django.db import connection, transaction
from django.db.models import Case, F, Value, When

from ..models import Task
from .sql import column, one_statement, run_one, table


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


def task_usage_add(task_id: int, amounts: dict[str, int], *,
                   with_statement: tuple[str, dict[str, Any]] | None = None) -> None:
    """Add one call's usage and cost (`amounts`: counter name -> increment).

    `with_statement`: SQL (named parameters, returning a row) that must commit
    with it (the spend rollup's upsert). On PostgreSQL the two are one statement,
    the UPDATE as a CTE before it: one round trip, not BEGIN, two statements and
    COMMIT. Elsewhere they share a transaction."""
    if with_statement is not None and one_statement():
        sql, params = with_statement
        run_one(_usage_cte(tuple(amounts)) + sql,
                {**params, "u_task_id": task_id, **{f"u_{k}": v for k, v in amounts.items()}})
        return
    with transaction.atomic():
        Task.objects.filter(pk=task_id).update(**{k: F(k) + v for k, v in amounts.items()})
        if with_statement is not None:
            with connection.cursor() as cursor:
                cursor.execute(*with_statement)


@cache
def _usage_cte(names: tuple[str, ...]) -> str:
    sets = ", ".join(f"{column(Task, k)} = {column(Task, k)} + %(u_{k})s" for k in names)
    return f"WITH usage AS (UPDATE {table(Task)} SET {sets} WHERE id = %(u_task_id)s) "


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
