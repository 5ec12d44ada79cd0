"""What a step returns to its slice, and what deciding it cost.

`StepResult` tells the slice what to do next (go on, stop, come back after a
delay); `Spent` is one model call, its tokens and its spend (or nothing, for
a decision queued from an earlier reply), committed with the decision; `Stale` is raised
by a phase that found the task moved on under it (the step is re-read).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from django.db.models import F

from ..snapshot import TaskSnapshot
from ..store.counters import bill_write, task_charge
from ..store.spend import Bill, bill_rollup


class Next(StrEnum):
    CONTINUE = "continue"  # take another step now
    STOP = "stop"  # the task waits or ended: release the worker
    LATER = "later"  # come back after `delay_s` (backoff, or another executor is busy)


@dataclass(frozen=True)
class StepResult:
    next: Next
    delay_s: float = 0.0
    note: str = ""


CONTINUE = StepResult(Next.CONTINUE)
STOP = StepResult(Next.STOP)


class Stale(Exception):
    """The task moved on under us; roll back and re-read."""


@dataclass(frozen=True)
class Spent:
    """What deciding a step cost: one model call, its tokens and its spend
    (`bill`: None when the reply reported no usage), or nothing (a decision
    queued from an earlier reply)."""

    model_calls: int = 0
    tokens: int = 0
    bill: Bill | None = None

    def fields(self) -> dict[str, Any]:
        """The counters' updates, for the decision's guarded UPDATE (with the ORM:
        `roll_up` in the same transaction)."""
        fields: dict[str, Any] = {"steps_count": F("steps_count") + 1}
        if self.model_calls:
            fields.update(model_calls=F("model_calls") + self.model_calls,
                          tokens=F("tokens") + self.tokens)
        if self.bill is not None:
            fields.update({k: F(k) + n for k, n in self.bill.task.items()})
        return fields

    def roll_up(self) -> None:
        """The spend's rollup row, in the transaction of the decision whose
        guarded UPDATE adds `fields`."""
        if self.bill is not None:
            bill_rollup(self.bill)

    def charge(self, task_id: int) -> None:
        """Count the model call and its spend in short commits of their own, for
        a decision that did not commit (plain counters: the version does not move)."""
        task_charge(task_id, model_calls=self.model_calls, tokens=self.tokens)
        if self.bill is not None:
            bill_write(task_id, self.bill)

    def applied_to(self, snap: TaskSnapshot) -> TaskSnapshot:
        """The snapshot as the decision's commit left the row."""
        return replace(snap, steps_count=snap.steps_count + 1,
                       model_calls=snap.model_calls + self.model_calls,
                       tokens=snap.tokens + self.tokens)
