"""The commits of the runner's common steps, one SQL statement each.

A tool step commits twice (DESIGN.md "The loop"): its decision before the tool
runs, its outcome after. Each commit writes several rows, and each is fenced
by the task's version. Written with the ORM, one commit is a BEGIN, four or
five statements and a COMMIT, each a round trip. Here each commit is a single
statement whose parts are data-modifying CTEs, run as its own transaction:
every part hangs off the version-checked UPDATE of the task row, so when the
check fails nothing at all is written (the statement returns no row), and when
it holds everything is written at once.

1. `commit_decision`: the task's counters (version unchanged: a decision is not
   a transition), the step (its idempotency key computed in the statement from
   the step's new id, as `keys.idempotency_key` does), the `decision_recorded`
   event and the ledger row claimed by this executor.
2. `commit_outcome`: the `step_succeeded` transition (version + 1, counters,
   no-progress state), the ledger's record of the call (while this executor's
   claim holds), the step's result and the event.
3. `commit_final`: an accepted final answer, once per task: the
   `final_accepted` transition with the result and the counters, the final
   step, the event, and the closing of anything the task left open (as
   `services.transitions` does for every task that ends).

Everything else the runner commits (questions, approvals, invalid results,
failures, retries) goes through the services with the ORM; those are rare
next to tool steps. The events are published after commit like any other
(`services.events.event_announce`). Inside an enclosing transaction (tests, or
a caller's) the statement runs in a savepoint of it instead.

On SQLite (the embedded mode), which has no data-modifying CTEs, the same
rows are written with the ORM in one transaction: same result, more round
trips.
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from datetime import timedelta
from functools import cache
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from config.errors import DomainError, ErrorKind
from tools_app.executor.ledger import STATUS_OF, Claim, stored_error, with_outcome
from tools_app.executor.types import OutcomeKind, ToolCall, ToolContext, ToolOutcome, ToolSpec
from tools_app.models import LedgerStatus, ToolExecution

from ..keys import canonical_json, idempotency_key
from ..models import Event, Step, StepKind, StepStatus, Task
from ..prepared import fetch_one_prepared
from ..services.actors import Actor
from ..services.admission import admission_after_commit
from ..services.events import TRANSITION_EVENT_CTE, announce_written
from ..services.transitions import (
    KnownTask,
    close_open_work_ctes,
    close_open_work_params,
    fire_guard,
    open_steps_end_as,
    task_transition,
    task_update_guarded,
)
from ..snapshot import TaskSnapshot

DECISION_SQL = """
WITH task AS (
    UPDATE tasks_app_task
       SET steps_count = steps_count + 1, model_calls = model_calls + %(model_calls)s,
           tokens = tokens + %(tokens)s, updated_at = %(now)s
     WHERE id = %(task_id)s AND version = %(version)s AND status = %(status)s
 RETURNING id
), new_step AS (
    SELECT nextval(pg_get_serial_sequence('tasks_app_step', 'id')) AS id FROM task
), step AS (
    INSERT INTO tasks_app_step (id, task_id, step_no, kind, status, decision, model_log, tool,
                                args, idempotency_key, attempt, output_hash, started_at)
    SELECT new_step.id, %(task_id)s, %(step_no)s, %(kind)s, %(step_status)s, %(decision)s,
           %(model_log)s, %(tool)s, %(args)s,
           COALESCE(%(reused_key)s::text, encode(sha256(convert_to(
               %(key_head)s || new_step.id || %(key_tail)s, 'UTF8')), 'hex')),
           0, '', %(now)s
      FROM new_step
 RETURNING id, idempotency_key
), event AS (
    INSERT INTO tasks_app_event (task_id, tenant_id, task_version, type, payload, actor,
                                 actor_role, trace_id, created_at)
    SELECT %(task_id)s, %(tenant_id)s, %(version)s, 'decision_recorded',
           %(payload)s || jsonb_build_object('idempotency_key', step.idempotency_key),
           %(actor)s, %(actor_role)s, %(trace_id)s, %(now)s
      FROM step
 RETURNING id
), claim AS (
    INSERT INTO tools_app_toolexecution (idempotency_key, tenant_id, task_id, step_id, tool, args,
                                         status, attempts, claimed_by, claimed_until,
                                         created_at, updated_at)
    SELECT step.idempotency_key, %(tenant_id)s, %(task_id)s, step.id, %(tool)s, %(ledger_args)s,
           %(ledger_status)s, %(attempts)s, %(owner)s, %(claimed_until)s, %(now)s, %(now)s
      FROM step WHERE %(reused_key)s::text IS NULL
)
SELECT step.id, step.idempotency_key, event.id FROM step, event
"""

OUTCOME_SQL = """
WITH task AS (
    UPDATE tasks_app_task
       SET status = %(to)s, version = version + 1, updated_at = %(now)s,
           tool_calls = tool_calls + 1, per_tool = %(per_tool)s,
           last_call_hash = %(last_call_hash)s, repeat_count = %(repeat_count)s,
           stale_steps = %(stale_steps)s
     WHERE id = %(task_id)s AND version = %(version)s AND status = %(from)s
 RETURNING version
), ledger AS (
    UPDATE tools_app_toolexecution
       SET status = %(ledger_status)s, result = %(result)s, error = %(ledger_error)s,
           attempts = %(attempts)s, claimed_by = '', claimed_until = NULL, updated_at = %(now)s
     WHERE %(record)s AND idempotency_key = %(key)s AND claimed_by = %(owner)s
       AND status <> %(succeeded)s AND EXISTS (SELECT 1 FROM task)
 RETURNING id
), step AS (
    UPDATE tasks_app_step
       SET status = %(step_status)s, output = %(output)s, error = %(error)s,
           output_hash = %(output_hash)s, finished_at = %(now)s, latency_ms = %(latency_ms)s,
           next_attempt_at = NULL
     WHERE id = %(step_id)s AND EXISTS (SELECT 1 FROM task)
), {event}
SELECT task.version, event.id, (SELECT count(*) FROM ledger) FROM task, event
""".replace("{event}", TRANSITION_EVENT_CTE)


def _json(model: type[Any], field: str, value: Any) -> Any:
    """`value` adapted for a JSON column exactly as the ORM would write it."""
    return model._meta.get_field(field).get_db_prep_save(value, connection)


def _run(sql: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
    # Alone, the statement is its own transaction (no BEGIN/COMMIT round trips);
    # inside a caller's transaction, a savepoint keeps a failure from poisoning it.
    enclosing = transaction.atomic() if connection.in_atomic_block else nullcontext()
    with enclosing:
        return fetch_one_prepared(sql, params)


def _one_statement() -> bool:
    return connection.vendor == "postgresql"


class _Refused(Exception):
    """The version check failed: roll the ORM transaction back."""


# --- the decision ------------------------------------------------------------------


@dataclass(frozen=True)
class DecisionCommitted:
    step: Step  # as written (the memo's current step from now on)
    claim: Claim | None  # None: a reused key, whose ledger row exists (ask the ledger)


def commit_decision(snap: TaskSnapshot, *, decision: dict[str, Any], model_log: dict[str, Any],
                    tool: str, args: dict[str, Any], reason: str, spec: ToolSpec,
                    model_calls: int, tokens: int, owner: str, actor: Actor,
                    reused_key: str | None = None) -> DecisionCommitted | None:
    """Record a tool-call decision and claim its key; None when the version moved on.

    With `reused_key` (a retried task's call the chain already made,
    `retries.lineage`) the step takes that key and nothing is claimed: its
    ledger row exists, and the call asks it first."""
    now = timezone.now()
    step = Step(task_id=snap.id, step_no=snap.steps_count + 1, kind=StepKind.TOOL,
                status=StepStatus.RUNNING, decision=decision, model_log=model_log, tool=tool,
                args=args, attempt=0, output_hash="", started_at=now)
    attempts = [{"started_at": now.isoformat(), "owner": owner}]
    claimed_until = now + timedelta(
        seconds=spec.timeout_s + settings.TETHER["LEDGER_CLAIM_GRACE_S"])
    payload = {"step_no": step.step_no, "tool": tool, "args": args, "reason": reason}
    step.idempotency_key = reused_key or ""
    write = _decision_in_one_statement if _one_statement() else _decision_with_orm
    event_id = write(snap, step, payload=payload, model_calls=model_calls, tokens=tokens,
                     owner=owner, attempts=attempts, claimed_until=claimed_until, actor=actor,
                     now=now)
    if event_id is None:
        return None
    announce_written(event_id=event_id, task_id=snap.id, tenant_id=snap.tenant_id,
                     trace_id=snap.trace_id, task_version=snap.version, type="decision_recorded",
                     payload={**payload, "idempotency_key": step.idempotency_key}, actor=actor,
                     at=now)
    call = ToolCall(spec=spec, args=dict(args), context=ToolContext(
        idempotency_key=step.idempotency_key, task_id=snap.id, step_id=step.pk,
        tenant_id=snap.tenant_id, trace_id=snap.trace_id))
    claim = None if reused_key else Claim(call=call, owner=owner, attempts=attempts)
    return DecisionCommitted(step=step, claim=claim)


def _decision_in_one_statement(snap: TaskSnapshot, step: Step, *, payload: dict[str, Any],
                               model_calls: int, tokens: int, owner: str,
                               attempts: list[dict[str, Any]], claimed_until: Any, actor: Actor,
                               now: Any) -> int | None:
    row = _run(DECISION_SQL, {
        "task_id": snap.id, "tenant_id": snap.tenant_id, "trace_id": snap.trace_id,
        "version": snap.version, "status": snap.status, "now": now,
        "model_calls": model_calls, "tokens": tokens,
        "step_no": step.step_no, "kind": step.kind, "step_status": step.status,
        "decision": _json(Step, "decision", step.decision),
        "model_log": _json(Step, "model_log", step.model_log),
        "tool": step.tool, "args": _json(Step, "args", step.args),
        "key_head": f"{snap.id}|", "key_tail": f"|{step.tool}|{canonical_json(step.args)}",
        "reused_key": step.idempotency_key or None,
        "payload": _json(Event, "payload", payload),
        "actor": actor.name, "actor_role": actor.role,
        "ledger_args": _json(ToolExecution, "args", step.args or {}),
        "ledger_status": LedgerStatus.IN_PROGRESS.value,
        "attempts": _json(ToolExecution, "attempts", attempts),
        "owner": owner, "claimed_until": claimed_until,
    })
    if row is None:
        return None
    step.pk, step.idempotency_key, event_id = row
    return int(event_id)


def _decision_with_orm(snap: TaskSnapshot, step: Step, *, payload: dict[str, Any],
                       model_calls: int, tokens: int, owner: str,
                       attempts: list[dict[str, Any]], claimed_until: Any, actor: Actor,
                       now: Any) -> int | None:
    try:
        with transaction.atomic():
            fields: dict[str, Any] = {"steps_count": F("steps_count") + 1, "updated_at": now}
            if model_calls:
                fields.update(model_calls=F("model_calls") + model_calls,
                              tokens=F("tokens") + tokens)
            if not task_update_guarded(task_id=snap.id, version=snap.version, **fields):
                raise _Refused()
            reused = step.idempotency_key
            step.save(force_insert=True)
            if not reused:
                step.idempotency_key = idempotency_key(task_id=snap.id, step_id=step.pk,
                                                       tool=step.tool, args=step.args or {})
                Step.objects.filter(pk=step.pk).update(idempotency_key=step.idempotency_key)
            event = Event.objects.create(
                task_id=snap.id, tenant_id=snap.tenant_id, trace_id=snap.trace_id,
                task_version=snap.version, type="decision_recorded",
                payload={**payload, "idempotency_key": step.idempotency_key},
                actor=actor.name, actor_role=actor.role, created_at=now)
            if reused:
                return event.pk  # the key's ledger row exists: nothing to claim
            ToolExecution.objects.create(
                idempotency_key=step.idempotency_key, tenant_id=snap.tenant_id, task_id=snap.id,
                step_id=step.pk, tool=step.tool, args=step.args or {},
                status=LedgerStatus.IN_PROGRESS, attempts=attempts, claimed_by=owner,
                claimed_until=claimed_until)
    except _Refused:
        return None
    return event.pk


# --- the outcome -------------------------------------------------------------------


@dataclass(frozen=True)
class OutcomeCommitted:
    version: int
    ledger_recorded: bool  # False: the claim no longer held (recorded for audit separately)


def commit_outcome(snap: TaskSnapshot, step: Step, outcome: ToolOutcome, *,
                   fields: dict[str, Any], output_hash: str, claim: Claim | None,
                   actor: Actor) -> OutcomeCommitted | None:
    """Commit a call's result (or business error) as `step_succeeded`; with `claim`,
    the ledger's record of it too. None when the version moved on (nothing written).

    `fields`: the task's new `per_tool`, `last_call_hash`, `repeat_count` and
    `stale_steps`."""
    assert outcome.kind in (OutcomeKind.OK, OutcomeKind.BUSINESS)
    source, target = fire_guard(Task(pk=snap.id, status=snap.status, version=snap.version),
                                "step_succeeded")
    ok = outcome.kind is OutcomeKind.OK
    now = timezone.now()
    settled = {"status": StepStatus.SUCCEEDED if ok else StepStatus.FAILED,
               "output": outcome.result if ok else None, "error": None if ok else outcome.error,
               "output_hash": output_hash, "finished_at": now,
               "latency_ms": outcome.latency_ms, "next_attempt_at": None}
    payload = {"from": source, "to": target, "step_no": step.step_no, "tool": step.tool,
               "step_status": settled["status"], "latency_ms": outcome.latency_ms,
               "from_ledger": outcome.from_ledger, **({} if ok else {"error": outcome.error})}
    ledger_error = stored_error(outcome)
    record = None if claim is None else {
        "status": STATUS_OF[outcome.kind], "result": outcome.result, "error": ledger_error,
        "attempts": with_outcome(claim.attempts, outcome, ledger_error),
        "claimed_by": "", "claimed_until": None, "updated_at": now}
    write = _outcome_in_one_statement if _one_statement() else _outcome_with_orm
    written = write(snap, step, claim, source=source, target=target, fields=fields,
                    settled=settled, record=record, payload=payload, actor=actor, now=now)
    if written is None:
        return None
    version, event_id, recorded = written
    announce_written(event_id=event_id, task_id=snap.id, tenant_id=snap.tenant_id,
                     trace_id=snap.trace_id, task_version=version, type="step_succeeded",
                     payload=payload, actor=actor, at=now)
    for name, value in settled.items():
        setattr(step, name, value)
    return OutcomeCommitted(version=version, ledger_recorded=claim is None or recorded)


def _outcome_in_one_statement(snap: TaskSnapshot, step: Step, claim: Claim | None, *,
                              source: str, target: str, fields: dict[str, Any],
                              settled: dict[str, Any], record: dict[str, Any] | None,
                              payload: dict[str, Any], actor: Actor,
                              now: Any) -> tuple[int, int, bool] | None:
    record = record or {"status": "", "result": None, "error": None, "attempts": []}
    row = _run(OUTCOME_SQL, {
        "task_id": snap.id, "tenant_id": snap.tenant_id, "trace_id": snap.trace_id,
        "version": snap.version, "from": source, "to": target, "now": now,
        "per_tool": _json(Task, "per_tool", fields["per_tool"]),
        "last_call_hash": fields["last_call_hash"], "repeat_count": fields["repeat_count"],
        "stale_steps": fields["stale_steps"],
        "record": claim is not None, "key": step.idempotency_key,
        "owner": claim.owner if claim else "", "succeeded": LedgerStatus.SUCCEEDED.value,
        "ledger_status": record["status"],
        "result": _json(ToolExecution, "result", record["result"]),
        "ledger_error": _json(ToolExecution, "error", record["error"]),
        "attempts": _json(ToolExecution, "attempts", record["attempts"]),
        "step_id": step.pk, "step_status": settled["status"],
        "output": _json(Step, "output", settled["output"]),
        "error": _json(Step, "error", settled["error"]),
        "output_hash": settled["output_hash"], "latency_ms": settled["latency_ms"],
        "event_type": "step_succeeded", "payload": _json(Event, "payload", payload),
        "actor": actor.name, "actor_role": actor.role,
    })
    if row is None:
        return None
    version, event_id, recorded = row
    return int(version), int(event_id), recorded == 1


def _outcome_with_orm(snap: TaskSnapshot, step: Step, claim: Claim | None, *,
                      source: str, target: str, fields: dict[str, Any],
                      settled: dict[str, Any], record: dict[str, Any] | None,
                      payload: dict[str, Any], actor: Actor,
                      now: Any) -> tuple[int, int, bool] | None:
    try:
        with transaction.atomic():
            changed = Task.objects.filter(pk=snap.id, version=snap.version, status=source).update(
                status=target, version=snap.version + 1, updated_at=now,
                tool_calls=F("tool_calls") + 1, **fields)
            if changed != 1:
                raise _Refused()
            recorded = claim is not None and record is not None and bool(
                ToolExecution.objects.filter(idempotency_key=step.idempotency_key,
                                             claimed_by=claim.owner)
                .exclude(status=LedgerStatus.SUCCEEDED).update(**record))
            Step.objects.filter(pk=step.pk).update(**settled)
            event = Event.objects.create(
                task_id=snap.id, tenant_id=snap.tenant_id, trace_id=snap.trace_id,
                task_version=snap.version + 1, type="step_succeeded", payload=payload,
                actor=actor.name, actor_role=actor.role, created_at=now)
    except _Refused:
        return None
    return snap.version + 1, event.pk, recorded


# --- the final answer -------------------------------------------------------------

FINAL_SQL = """
WITH task AS (
    UPDATE tasks_app_task
       SET status = %(to)s, version = version + 1, updated_at = %(now)s, finished_at = %(now)s,
           lease_owner = '', lease_expires_at = NULL, next_run_at = NULL, result = %(result)s,
           steps_count = steps_count + 1, model_calls = model_calls + %(model_calls)s,
           tokens = tokens + %(tokens)s
     WHERE id = %(task_id)s AND version = %(version)s AND status = %(from)s
 RETURNING version
), step AS (
    INSERT INTO tasks_app_step (task_id, step_no, kind, status, decision, model_log, tool,
                                idempotency_key, attempt, output, output_hash, started_at,
                                finished_at)
    SELECT %(task_id)s, %(step_no)s, %(kind)s, %(step_status)s, %(decision)s, %(model_log)s,
           '', '', 0, %(result)s, '', %(now)s, %(now)s
      FROM task
), {event}, {closing}
SELECT task.version, event.id FROM task, event
"""


@cache
def _final_sql() -> tuple[str, dict[str, Any]]:
    parts, fixed = close_open_work_ctes("EXISTS (SELECT 1 FROM task)")
    sql = FINAL_SQL.replace("{event}", TRANSITION_EVENT_CTE)
    return sql.replace("{closing}", ",\n".join(parts)), fixed


def commit_final(snap: TaskSnapshot, *, decision: dict[str, Any], model_log: dict[str, Any],
                 result: Any, model_calls: int, tokens: int, actor: Actor) -> bool:
    """Accept a validated final answer: the task SUCCEEDED with its result.
    False when the version moved on (nothing written)."""
    event = "final_accepted"
    source, target = fire_guard(Task(pk=snap.id, status=snap.status, version=snap.version), event)
    step_no = snap.steps_count + 1
    payload = {"from": source, "to": target, "step_no": step_no}
    if not _one_statement():
        return _final_with_orm(snap, decision=decision, model_log=model_log, result=result,
                               model_calls=model_calls, tokens=tokens, actor=actor)
    now = timezone.now()
    sql, fixed = _final_sql()
    status, error = open_steps_end_as(event, {})
    row = _run(sql, {
        **fixed, **close_open_work_params(task_id=snap.id, status=status, error=error, now=now),
        "tenant_id": snap.tenant_id, "trace_id": snap.trace_id, "version": snap.version,
        "from": source, "to": target, "now": now, "result": _json(Task, "result", result),
        "model_calls": model_calls, "tokens": tokens, "step_no": step_no,
        "kind": StepKind.FINAL.value, "step_status": StepStatus.SUCCEEDED.value,
        "decision": _json(Step, "decision", decision),
        "model_log": _json(Step, "model_log", model_log),
        "event_type": event, "payload": _json(Event, "payload", payload),
        "actor": actor.name, "actor_role": actor.role,
    })
    if row is None:
        return False
    version, event_id = row
    announce_written(event_id=event_id, task_id=snap.id, tenant_id=snap.tenant_id,
                     trace_id=snap.trace_id, task_version=version, type=event,
                     payload=payload, actor=actor, at=now)
    admission_after_commit()  # a RUNNING slot was freed
    return True


def _final_with_orm(snap: TaskSnapshot, *, decision: dict[str, Any], model_log: dict[str, Any],
                    result: Any, model_calls: int, tokens: int, actor: Actor) -> bool:
    fields: dict[str, Any] = {"steps_count": F("steps_count") + 1, "result": result}
    if model_calls:
        fields.update(model_calls=F("model_calls") + model_calls, tokens=F("tokens") + tokens)
    try:
        with transaction.atomic():
            Step.objects.create(task_id=snap.id, step_no=snap.steps_count + 1,
                                kind=StepKind.FINAL, status=StepStatus.SUCCEEDED,
                                decision=decision, model_log=model_log, output=result,
                                finished_at=timezone.now())
            task_transition(task_id=snap.id, event="final_accepted", actor=actor,
                            expected_version=snap.version,
                            known=KnownTask(status=snap.status, tenant_id=snap.tenant_id,
                                            trace_id=snap.trace_id),
                            fields=fields, payload={"step_no": snap.steps_count + 1})
    except DomainError as exc:
        if exc.kind != ErrorKind.CONFLICT:
            raise
        return False
    return True
