"""What a commit says (`Commit` and its parts) and what it wrote (`Committed`).

A `Commit` says what one transaction does to a task known at a version (see
`writes`); a backend (`backends`) writes it. Kept apart from `writes` so that
the backends, which `writes` calls, can name these without importing it.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from foundations.actors import Actor

from ..models import Step
from .spend import Bill


@dataclass(frozen=True)
class TaskAt:
    """The task as the writer read it: the commit holds only if it is still so."""

    id: int
    tenant_id: int
    trace_id: str
    version: int
    status: str


@dataclass(frozen=True)
class NewStep:
    fields: dict[str, Any]  # its columns but `task`; with `keyed`, but its key
    keyed: tuple[str, dict[str, Any]] | None = None  # (tool, args): key made from its new id


@dataclass(frozen=True)
class StepMove:
    step_id: int
    source: str  # its status as the writer read it
    fields: dict[str, Any]  # "status" included


@dataclass(frozen=True)
class LedgerRecord:
    key: str
    owner: str
    fields: dict[str, Any]  # `ledger.recorded_fields`


@dataclass(frozen=True)
class Commit:
    task: TaskAt
    # the event's type; with `transition`, the state machine's event. None: no
    # event (a step the task records without telling anybody: a source read back)
    event: str | None
    actor: Actor
    payload: dict[str, Any]  # a transition's also gets "from" and "to"
    transition: bool = False
    set: dict[str, Any] = field(default_factory=dict)  # task columns := value
    add: dict[str, int] = field(default_factory=dict)  # task columns += n
    new_step: NewStep | None = None
    move: StepMove | None = None
    claim: dict[str, Any] | None = None  # the new step's ledger row, but its key and step
    record: LedgerRecord | None = None
    payload_key: bool = False  # the event's payload also carries the new step's key
    bill: Bill | None = None  # the spend of the model call the commit records (`spend`)
    # What the caller writes in the same transaction once the rows are written
    # and before the event's hooks run (an approval or a question opened for
    # the new step: the hooks, notifications, find it). Given the new step.
    then: Callable[[Step | None, int], None] | None = None  # (new step, version after)


@dataclass(frozen=True)
class Committed:
    version: int
    event_id: int | None  # None: the commit wrote no event
    target: str  # the task's status now
    step: Step | None  # the new step as written
    recorded: bool  # the ledger record was written (the claim held)
