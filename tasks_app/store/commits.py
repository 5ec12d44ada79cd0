"""The commits of the runner's common steps, and admission's start, each a
`writes.Commit`: one SQL statement on PostgreSQL, the ORM in one transaction
on SQLite (the embedded mode), the same rows either way.

A tool step commits twice (docs/explanation/write-path.md): its decision before the tool
runs, its outcome after. Each commit writes several rows, and each is fenced
by the task's version and status: when the check fails nothing at all is
written (None or False), when it holds everything is written at once.

1. `commit_decision`: the task's counters (version unchanged: a decision is not
   a transition) and the spend of the model call that made it (`spend.Bill`),
   the step (its idempotency key computed from the step's new id,
   `keys.idempotency_key_around`), the `decision_recorded` event and the
   ledger row claimed by this executor.
2. `commit_outcome`: the `step_succeeded` transition (version + 1, counters,
   no-progress state), the ledger's record of the call (while this executor's
   claim holds: `ledger.record_while`), the step's result and the event.
3. `commit_final`: an accepted final answer, once per task: the
   `final_accepted` transition with the result, the counters and the spend, the final
   step, the event, and what every task that ends does (`effects`).
4. `commit_start`: admission's `task_started`, with the start and deadline.
5. `commit_recorded`: a decision of every other kind (`runner.recording`): an
   invalid decision, a source read back, a question, a call that needs
   approval, a refusal, a failure, another app's kind: its step, the
   counters and spend, the event (or none) and, when the decision moves the
   task, its transition; what the caller opens for the step (a question, an
   approval) in the same transaction (`Commit.then`).

Retries and the rarer writes of a person's decision go through
`tasks.task_transition` and `steps`.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from django.utils import timezone

from foundations.actors import SYSTEM, Actor
from tools_app.executor.ledger import Claim, claim_row, recorded_fields
from tools_app.executor.types import OutcomeKind, ToolCall, ToolContext, ToolOutcome, ToolSpec

from ..machine import TaskStatus
from ..models import Step, StepKind, StepStatus
from .spend import Bill
from .writes import Commit, Committed, LedgerRecord, NewStep, StepMove, TaskAt, write


class TaskView(Protocol):
    """What a commit needs of the task as the runner read it (`tasks_app.snapshot`)."""

    @property
    def id(self) -> int: ...
    @property
    def tenant_id(self) -> int: ...
    @property
    def trace_id(self) -> str: ...
    @property
    def version(self) -> int: ...
    @property
    def status(self) -> str: ...
    @property
    def steps_count(self) -> int: ...


def _at(snap: TaskView) -> TaskAt:
    return TaskAt(id=snap.id, tenant_id=snap.tenant_id, trace_id=snap.trace_id,
                  version=snap.version, status=snap.status)


def _spent(model_calls: int, tokens: int) -> dict[str, int]:
    return {"steps_count": 1, "model_calls": model_calls, "tokens": tokens}


# --- the decision ------------------------------------------------------------------


@dataclass(frozen=True)
class DecisionCommitted:
    step: Step  # as written (the memo's current step from now on)
    claim: Claim | None  # None: a reused key, whose ledger row exists (ask the ledger)


def commit_decision(snap: TaskView, *, decision: dict[str, Any], model_log: dict[str, Any],
                    tool: str, args: dict[str, Any], reason: str, spec: ToolSpec,
                    model_calls: int, tokens: int, owner: str, actor: Actor,
                    reused_key: str | None = None,
                    bill: Bill | None = None) -> DecisionCommitted | None:
    """Record a tool-call decision and claim its key; None when the task moved on.

    With `reused_key` (a retried task's call the chain already made,
    `retries.lineage`) the step takes that key and nothing is claimed: its
    ledger row exists, and the call asks it first."""
    now = timezone.now()
    step_no = snap.steps_count + 1
    fields = {"step_no": step_no, "kind": StepKind.TOOL.value, "status": StepStatus.RUNNING.value,
              "decision": decision, "model_log": model_log, "tool": tool, "args": args,
              "attempt": 0, "output_hash": "", "started_at": now}
    claim = None if reused_key else claim_row(
        tenant_id=snap.tenant_id, task_id=snap.id, tool=tool, args=args or {}, owner=owner,
        timeout_s=spec.timeout_s, now=now)
    done = write(Commit(
        task=_at(snap), event="decision_recorded", actor=actor,
        payload={"step_no": step_no, "tool": tool, "args": args, "reason": reason},
        add=_spent(model_calls, tokens), bill=bill, claim=claim, payload_key=True,
        new_step=(NewStep({**fields, "idempotency_key": reused_key}) if reused_key
                  else NewStep(fields, keyed=(tool, args or {})))))
    if done is None or done.step is None:
        return None
    step = done.step
    call = ToolCall(spec=spec, args=dict(args), context=ToolContext(
        idempotency_key=step.idempotency_key, task_id=snap.id, step_id=step.pk,
        tenant_id=snap.tenant_id, trace_id=snap.trace_id))
    return DecisionCommitted(step=step, claim=None if claim is None else Claim(
        call=call, owner=owner, attempts=claim["attempts"]))


# --- the outcome -------------------------------------------------------------------


@dataclass(frozen=True)
class OutcomeCommitted:
    version: int
    ledger_recorded: bool  # False: the claim no longer held (recorded for audit separately)


def commit_outcome(snap: TaskView, step: Step, outcome: ToolOutcome, *,
                   fields: dict[str, Any], output_hash: str, claim: Claim | None,
                   actor: Actor) -> OutcomeCommitted | None:
    """Commit a call's result (or business error) as `step_succeeded`; with `claim`,
    the ledger's record of it too. None when the version moved on (nothing written).

    `fields`: the task's new `per_tool`, `last_call_hash`, `repeat_count` and
    `stale_steps`."""
    assert outcome.kind in (OutcomeKind.OK, OutcomeKind.BUSINESS)
    ok = outcome.kind is OutcomeKind.OK
    now = timezone.now()
    settled = {"status": StepStatus.SUCCEEDED.value if ok else StepStatus.FAILED.value,
               "output": outcome.result if ok else None, "error": None if ok else outcome.error,
               "output_hash": output_hash, "finished_at": now,
               "latency_ms": outcome.latency_ms, "next_attempt_at": None}
    done = write(Commit(
        task=_at(snap), event="step_succeeded", actor=actor, transition=True,
        payload={"step_no": step.step_no, "tool": step.tool, "step_status": settled["status"],
                 "latency_ms": outcome.latency_ms, "from_ledger": outcome.from_ledger,
                 **({} if ok else {"error": outcome.error})},
        set=fields, add={"tool_calls": 1},
        move=StepMove(step_id=step.pk, source=step.status, fields=settled),
        record=None if claim is None else LedgerRecord(
            key=step.idempotency_key, owner=claim.owner,
            fields=recorded_fields(claim, outcome, now))))
    if done is None:
        return None
    for name, value in settled.items():
        setattr(step, name, value)
    return OutcomeCommitted(version=done.version,
                            ledger_recorded=claim is None or done.recorded)


# --- the final answer -------------------------------------------------------------


def commit_final(snap: TaskView, *, decision: dict[str, Any], model_log: dict[str, Any],
                 result: Any, model_calls: int, tokens: int, actor: Actor,
                 bill: Bill | None = None) -> bool:
    """Accept a validated final answer: the task SUCCEEDED with its result.
    False when the version moved on (nothing written)."""
    now = timezone.now()
    step_no = snap.steps_count + 1
    return write(Commit(
        task=_at(snap), event="final_accepted", actor=actor, transition=True,
        payload={"step_no": step_no}, set={"result": result}, add=_spent(model_calls, tokens),
        bill=bill,
        new_step=NewStep({"step_no": step_no, "kind": StepKind.FINAL.value,
                          "status": StepStatus.SUCCEEDED.value, "decision": decision,
                          "model_log": model_log, "output": result, "started_at": now,
                          "finished_at": now}))) is not None


# --- the start --------------------------------------------------------------------


def commit_start(*, task_id: int, tenant_id: int, trace_id: str, version: int,
                 started_at: datetime, deadline_at: datetime) -> bool:
    """`task_started` from the CREATED row admission just read; False when the
    task moved on meanwhile (canceled while it waited). Inside admission's
    transaction: no savepoint (a refusal writes nothing)."""
    return write(Commit(
        task=TaskAt(id=task_id, tenant_id=tenant_id, trace_id=trace_id, version=version,
                    status=TaskStatus.CREATED), event="task_started", actor=SYSTEM,
        transition=True, payload={}, set={"started_at": started_at, "deadline_at": deadline_at},
    ), savepoint=False) is not None


# --- every other kind of decision -----------------------------------------------------


def commit_recorded(snap: TaskView, *, step: dict[str, Any], event: str | None, actor: Actor,
                    payload: dict[str, Any] | None = None, transition: bool = False,
                    set: dict[str, Any] | None = None, model_calls: int, tokens: int,
                    bill: Bill | None = None, key: tuple[str, dict[str, Any]] | str | None = None,
                    then: Callable[[Step | None, int], None] | None = None) -> Committed | None:
    """A decision recorded with its step (`step`: its columns but its number),
    the counters and spend of the model call that made it, the event (None:
    none), and with `transition` the task's move by `event`. `key`: the step's
    idempotency key, made from its new id for (tool, args), or a retried
    task's key. `then(step, version)`: written in the same transaction before
    the event's hooks run. None when the task moved on (nothing written)."""
    fields = {"step_no": snap.steps_count + 1, **step}
    return write(Commit(
        task=_at(snap), event=event, actor=actor, payload=payload or {}, transition=transition,
        set=set or {}, add=_spent(model_calls, tokens), bill=bill, then=then,
        new_step=(NewStep(fields, keyed=key) if isinstance(key, tuple)
                  else NewStep({**fields, "idempotency_key": key} if key else fields))))
