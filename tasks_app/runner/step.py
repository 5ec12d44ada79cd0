"""Advance a task by one durable step.

One step (DESIGN.md "The loop"):
1. read the task (the caller holds its lease; the lease statement returned the
   row for the slice's first step), or, within a slice, check that it still
   stands where the previous step left it (`memo`);
2. check deadline, budgets, no progress;
3. reuse the current step's persisted decision, or ask the model (or take the
   next decision queued from a multi-call reply) and persist it *before* any
   tool runs;
4. policy: allow-list, argument schema, per-tool limits, approval;
5. execute through the idempotency ledger (no transaction or lock held);
6. commit the outcome with the version check; a failed check means the result
   is DISCARDED: recorded for audit, never applied.

No transaction is open while the model or a tool is called. A tool call's
decision (with its ledger claim) and its outcome (with the ledger's record)
are each one statement (`commits`); the rarer paths use the services.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from datetime import timedelta
from enum import StrEnum
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from approvals_app.services import opening
from config.errors import DomainError, ErrorKind
from config.logs import bind_log
from config.metrics import count_late_result
from config.tracing import tool_span
from tools_app.breakers import retry_delay_s
from tools_app.executor import (
    OutcomeKind,
    ToolCall,
    ToolContext,
    ToolOutcome,
    execute_through_ledger,
    ledger,
)
from tools_app.executor.jsonsafe import has_unstorable, storable, storable_text
from tools_app.executor.types import ToolSpec
from tools_app.registry import tool_specs
from tools_app.schemas import schema_errors

from ..context.builder import ContextSources, build_context, gather
from ..context.summaries import summary_maybe_create
from ..gateway import ContextSnapshot, Decision, GatewayError, ModelReply, get_backend
from ..gateway.messages import call_id
from ..keys import call_fingerprint, canonical_json, idempotency_key, sha256_hex
from ..leases import lease_for_call
from ..machine import TaskStatus
from ..models import Step, StepKind, StepStatus, Task
from ..retries.lineage import lineage_key
from ..services.actors import Actor
from ..services.events import event_append
from ..services.spend import spend_of_reply
from ..services.transitions import KnownTask, task_transition, task_update_guarded
from ..vault.lookup import model_keys
from . import breaker_waits
from .backoff import backoff_s, model_failure_count
from .budgets import exhausted_budget, past_deadline
from .commits import commit_decision, commit_final, commit_outcome
from .lease import heartbeat
from .memo import SliceMemo
from .policy import check_tool_call
from .progress import after_call, repeats_too_often, stalled
from .snapshot import TaskSnapshot

log = logging.getLogger(__name__)


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


class _Stale(Exception):
    """The task moved on under us; roll back and re-read."""


def advance_one_step(*, task_id: int, owner: str, memo: SliceMemo | None = None) -> StepResult:
    """One step; `memo` carries what this slice's previous step left (see `memo`)."""
    memo = memo if memo is not None else SliceMemo()
    leased, memo.leased = memo.leased, None  # read with the lease, just now: once
    if memo.still_valid(task_id):
        snap, current = memo.snap, memo.current
        assert snap is not None
    else:
        task = leased if leased is not None else Task.objects.filter(pk=task_id).first()
        if task is None or task.status != TaskStatus.RUNNING:
            return STOP
        snap = TaskSnapshot.of(task)
        current = (
            Step.objects.filter(task_id=task_id, step_no=snap.steps_count).first()
            if snap.steps_count
            else None
        )
    memo.snap = None  # set again only by a step that knows exactly what it committed
    actor = Actor.worker(owner)
    now = timezone.now()
    try:
        if past_deadline(snap, now):
            return _exhaust(snap, "deadline", actor)
        if current is not None and current.kind == StepKind.TOOL and current.status in (
            StepStatus.RUNNING, StepStatus.RETRYING, StepStatus.UNCERTAIN,
        ):
            if current.next_attempt_at and current.next_attempt_at > now:
                return StepResult(Next.LATER, (current.next_attempt_at - now).total_seconds(),
                                  "backoff")
            return _execute(snap, current, owner=owner, actor=actor, memo=memo)
        if stalled(snap):
            return _exhaust(snap, "no_progress", actor, detail={"signal": "no_new_observation"})
        queued = list((current.model_log or {}).get("queued") or []) if current is not None else []
        budget = exhausted_budget(snap, now, asking_model=not queued)
        if budget is not None:
            return _exhaust(snap, budget, actor)
        if memo.specs is None:
            memo.specs = tool_specs(tenant_id=snap.tenant_id,
                                    names=list(snap.agent.get("tools") or []))
        specs = memo.specs
        sources: ContextSources | None = None  # none when no context was built
        scripted = (snap.agent.get("model") or {}).get("backend", "scripted") == "scripted"
        if queued:
            decision = Decision.from_dict(queued[0])
            model_log = {"from_reply_of_step": current.step_no, "queued": queued[1:]}  # type: ignore[union-attr]
            spent = Spent()
        else:
            sources = memo.sources or gather(task_id, human_facts=memo.human_facts,
                                             steps_count=snap.steps_count)
            memo.sources, memo.human_facts = sources, sources.human_facts
            memo.output_hashes.update({s.step_no: s.output_hash for s in sources.recent})
            context = build_context(snap, tools=specs, sources=sources)
            if scripted:
                reply = _decide(snap, context, owner=owner)
            else:
                # A real model may take long (retries, fallback): keep the lease alive.
                with heartbeat(task_id=task_id, owner=owner):
                    reply = _decide(snap, context, owner=owner)
            if isinstance(reply, StepResult):
                return reply
            charged = spend_of_reply(task_id=snap.id, tenant_id=snap.tenant_id,
                                     agent=snap.agent, reply=reply)  # committed on its own
            snap = replace(snap, cost_pico=snap.cost_pico + charged.cost_pico)
            decision = reply.decisions[0] if reply.decisions else Decision(
                kind="invalid", raw=reply.raw, error="the model returned no decision")
            model_log = {
                "backend": (snap.agent.get("model") or {}).get("backend", "scripted"),
                "model": reply.model, "latency_ms": reply.latency_ms, "tokens": reply.tokens,
                "input_summary": reply.input_summary, "raw": reply.raw[:8000],
                "used_fallback": reply.used_fallback, "attempts": reply.attempts,
                "queued": [d.as_dict() for d in reply.decisions[1:]],
                **charged.model_log,
            }
            # every request sent counts: the failed attempts before the reply too
            spent = Spent(model_calls=max(1, reply.attempts), tokens=reply.tokens)
        try:
            recorded = _record_decision(snap, decision, model_log, spent, specs, owner=owner,
                                        actor=actor)
        except Exception:
            if not scripted:
                # The model was asked but the decision did not commit: the call counts
                # all the same. (The scripted backend's n-th entry answers the n-th
                # counted call, and costs nothing: it is asked again.)
                spent.charge(task_id)
            raise
        result = recorded if isinstance(recorded, StepResult) else _execute(
            recorded.snap, recorded.step, owner=owner, actor=actor, spec=recorded.spec,
            claim=recorded.claim, memo=memo)
        # After the step committed; never raises. With the sources the context was
        # built from, most steps need no query to know no summary is due.
        summary = summary_maybe_create(task_id=task_id, steps_count=snap.steps_count + 1,
                                       sources=sources)
        if summary is not None and memo.sources is not None:
            memo.sources = memo.sources.on_summary(summary)  # the context starts from it
        return result
    except (_Stale, IntegrityError):
        memo.forget()
        return CONTINUE  # somebody else committed this version: re-read and decide again
    except DomainError as exc:
        memo.forget()
        if exc.kind == ErrorKind.CONFLICT:
            return CONTINUE
        raise


@dataclass(frozen=True)
class Spent:
    """What deciding a step cost: one model call and its tokens, or nothing (a
    decision queued from an earlier reply)."""

    model_calls: int = 0
    tokens: int = 0

    def fields(self) -> dict[str, Any]:
        """The counters' updates, for the decision's guarded UPDATE."""
        fields: dict[str, Any] = {"steps_count": F("steps_count") + 1}
        if self.model_calls:
            fields.update(model_calls=F("model_calls") + self.model_calls,
                          tokens=F("tokens") + self.tokens)
        return fields

    def charge(self, task_id: int) -> None:
        """Count the model call in a short commit of its own, for a decision that
        did not commit (a plain counter: the version does not move)."""
        if self.model_calls:
            Task.objects.filter(pk=task_id).update(
                model_calls=F("model_calls") + self.model_calls, tokens=F("tokens") + self.tokens)

    def applied_to(self, snap: TaskSnapshot) -> TaskSnapshot:
        """The snapshot as the decision's commit left the row."""
        return replace(snap, steps_count=snap.steps_count + 1,
                       model_calls=snap.model_calls + self.model_calls,
                       tokens=snap.tokens + self.tokens)


# --- asking the model --------------------------------------------------------


def _decide(snap: TaskSnapshot, context: ContextSnapshot, *,
            owner: str) -> ModelReply | StepResult:
    started = time.monotonic()
    guard = breaker_waits.ModelGuard(snap, owner=owner)
    try:
        model = snap.agent.get("model") or {}
        keys = model_keys(tenant_id=snap.tenant_id, model=model)  # this task's tenant only
        reply = get_backend(model, keys, guard).decide(context)
    except GatewayError as exc:
        Spent(model_calls=exc.calls).charge(snap.id)  # every request sent counts
        if exc.held:  # a breaker is open: wait for it, no retry spent
            return StepResult(Next.LATER, breaker_waits.model_wait(snap, guard,
                                                                   exc.retry_after_s or 0.0),
                              f"model: {exc}")
        if exc.retryable:
            # The backoff grows with the failures in a row, counted on the task.
            attempt = model_failure_count(snap)
            return StepResult(Next.LATER, backoff_s(attempt, exc.retry_after_s, full_jitter=True),
                              f"model: {exc}")
        return _fail(snap, "model_unavailable", Actor.worker("gateway"),
                     detail={"message": str(exc)})
    if not reply.latency_ms:
        reply = ModelReply(**{**reply.__dict__,
                              "latency_ms": int((time.monotonic() - started) * 1000)})
    if not reply.input_summary:
        reply = ModelReply(**{**reply.__dict__,
                              "input_summary": f"{context.size_chars()} chars of context"})
    return reply


# --- persisting a decision ----------------------------------------------------


def _new_step(snap: TaskSnapshot, *, kind: str, status: str, decision: Decision,
              model_log: dict[str, Any], **fields: Any) -> Step:
    return Step.objects.create(
        task_id=snap.id, step_no=snap.steps_count + 1, kind=kind, status=status,
        decision=decision.as_dict(), model_log=model_log, **fields,
    )


def _guard(snap: TaskSnapshot, **fields: Any) -> None:
    if not task_update_guarded(task_id=snap.id, version=snap.version, updated_at=timezone.now(),
                               **fields):
        raise _Stale()


def _event(snap: TaskSnapshot, type: str, actor: Actor, payload: dict[str, Any]) -> None:
    event_append(task_id=snap.id, tenant_id=snap.tenant_id, trace_id=snap.trace_id,
                 task_version=snap.version, type=type, actor=actor, payload=payload)


@dataclass(frozen=True)
class _Decided:
    """A tool call whose decision (and ledger claim) committed: it runs next."""

    snap: TaskSnapshot
    step: Step
    spec: ToolSpec
    claim: ledger.Claim | None


def _record_decision(
    snap: TaskSnapshot,
    decision: Decision,
    model_log: dict[str, Any],
    spent: Spent,
    specs: dict[str, ToolSpec],
    *,
    owner: str,
    actor: Actor,
) -> StepResult | _Decided:
    """Commit the decision with its counters: in the same transaction as its step,
    or not at all."""
    counters = spent.fields()
    step_no = snap.steps_count + 1
    bind_log(step_no=step_no, step_kind=decision.kind)
    model_log = storable(model_log)
    if decision.kind == "invalid":
        decision = replace(decision, raw=storable_text(decision.raw),
                           tool=storable_text(decision.tool), error=storable_text(decision.error))
    elif has_unstorable(decision.as_dict()):
        # jsonb cannot store it; the model is told, as for any malformed output
        decision = Decision(
            kind="invalid", raw=storable_text(canonical_json(decision.as_dict())[:2000]),
            error="the decision contains NUL characters or lone surrogates")

    if decision.kind == "invalid":
        return _invalid(snap, decision, model_log, counters, actor,
                        {"type": "invalid_decision", "message": decision.error,
                         "raw": decision.raw[:2000]})

    if decision.kind == "ask_user":
        with transaction.atomic():
            step = _new_step(snap, kind=StepKind.ASK, status=StepStatus.RUNNING, decision=decision,
                             model_log=model_log)
            done = task_transition(task_id=snap.id, event="need_input", actor=actor,
                                   expected_version=snap.version, known=_known(snap),
                                   fields=counters,
                                   payload={"step_no": step_no, "question": decision.question})
            opening.question_open(task_id=snap.id, tenant_id=snap.tenant_id, step_id=step.pk,
                                  question=decision.question, task_version=done.version)
        return STOP

    if decision.kind == "final":
        schema = snap.agent.get("result_schema") or {}
        errors = schema_errors(schema, decision.result) if schema else []
        if decision.result is None:
            errors = ["a final answer needs a result"]
        if errors:
            return _invalid(snap, decision, model_log, counters, actor,
                            {"type": "invalid_result",
                             "message": "the final result failed validation",
                             "errors": errors})
        if not commit_final(snap, decision=decision.as_dict(), model_log=model_log,
                            result=decision.result, model_calls=spent.model_calls,
                            tokens=spent.tokens, actor=actor):
            raise _Stale()
        return STOP

    # a tool call
    spec = specs.get(decision.tool)
    call_hash = call_fingerprint(decision.tool, decision.args)
    if repeats_too_often(snap, call_hash):
        return _refuse(snap, decision, model_log, counters, actor, reason="no_progress", error={
            "type": "no_progress", "signal": "repeated_call", "tool": decision.tool,
            "repeats": snap.repeat_count,
            "message": "the same call with the same arguments was already repeated too often"})
    # "Always allow" only matters for tools that need approval: skip the query otherwise.
    always = (opening.always_allowed_tools(task_id=snap.id)
              if spec is not None and spec.requires_approval else frozenset())
    verdict = check_tool_call(decision, spec=spec, snap=snap, always_allowed=always)
    if verdict.verdict == "invalid":
        return _invalid(snap, decision, model_log, counters, actor, verdict.error or {})
    if verdict.verdict == "budget":
        error = verdict.error or {}
        return _refuse(snap, decision, model_log, counters, actor,
                       reason=str(error.get("budget", "budget")), error=error, offer_again=True)
    assert spec is not None
    # A retried task's call the chain already made takes that call's key (None: a fresh key).
    reused = lineage_key(task_id=snap.id, key_lineage=snap.key_lineage, step_no=step_no,
                         tool=decision.tool, args=decision.args)
    if verdict.verdict == "approve":
        with transaction.atomic():
            step = _new_step(snap, kind=StepKind.TOOL, status=StepStatus.PENDING_APPROVAL,
                             decision=decision, model_log=model_log, tool=decision.tool,
                             args=decision.args)
            step.idempotency_key = reused or idempotency_key(
                task_id=snap.id, step_id=step.pk, tool=decision.tool, args=decision.args)
            Step.objects.filter(pk=step.pk).update(idempotency_key=step.idempotency_key)
            done = task_transition(task_id=snap.id, event="need_approval", actor=actor,
                                   expected_version=snap.version, known=_known(snap),
                                   fields=counters,
                                   payload={"step_no": step_no, "tool": decision.tool})
            opening.approval_open(task_id=snap.id, tenant_id=snap.tenant_id, step_id=step.pk,
                                  tool=decision.tool, args=decision.args, risk=spec.risk,
                                  reason=decision.reason, cites=list(decision.cites),
                                  task_version=done.version,
                                  sla_s=int(snap.agent.get("approval_sla_s") or 0))
        return STOP
    # The step, its event and the ledger claim commit together, in one statement.
    # A cancel from now on is fenced when the outcome commits.
    committed = commit_decision(
        snap, decision=decision.as_dict(), model_log=model_log, tool=decision.tool,
        args=decision.args, reason=decision.reason, spec=spec, model_calls=spent.model_calls,
        tokens=spent.tokens, owner=owner, actor=actor, reused_key=reused)
    if committed is None:
        raise _Stale()
    return _Decided(spent.applied_to(snap), committed.step, spec, committed.claim)


def _invalid(snap: TaskSnapshot, decision: Decision, model_log: dict[str, Any],
             counters: dict[str, Any], actor: Actor, error: dict[str, Any]) -> StepResult:
    """An invalid decision is recorded and fed back to the model as the step's error.
    The same error again within the window is no new observation (no progress)."""
    step_no = snap.steps_count + 1
    error = storable(error)
    output_hash = sha256_hex(canonical_json(error))
    with transaction.atomic():
        _new_step(snap, kind=StepKind.INVALID, status=StepStatus.FAILED, decision=decision,
                  model_log=model_log, tool=decision.tool[:100], args=decision.args or None,
                  error=error, output_hash=output_hash, finished_at=timezone.now())
        is_new = not _seen_recently(snap, step_no, output_hash)
        _guard(snap, **counters, stale_steps=0 if is_new else snap.stale_steps + 1)
        _event(snap, "invalid_decision", actor, {"step_no": step_no, "error": error})
    return CONTINUE


def _seen_recently(snap: TaskSnapshot, step_no: int, output_hash: str,
                   memo: SliceMemo | None = None) -> bool:
    window = int(snap.agent.get("no_progress_window") or 6)
    known = memo.output_hashes if memo is not None else {}
    earlier = range(max(1, step_no - window), step_no)
    if all(n in known for n in earlier):
        return any(known[n] == output_hash for n in earlier)
    return Step.objects.filter(
        task_id=snap.id, step_no__gte=step_no - window, step_no__lt=step_no,
        output_hash=output_hash,
    ).exists()


def _refuse(snap: TaskSnapshot, decision: Decision, model_log: dict[str, Any],
            counters: dict[str, Any], actor: Actor, *, reason: str, error: dict[str, Any],
            offer_again: bool = False) -> StepResult:
    """A tool call the runner will not make (a budget is used up, or no progress):
    recorded as a failed step, so every decision has its step and the model sees
    why; then the task fails or escalates. With `offer_again` (a budget refusal)
    the decision is queued again, so a resume that extends the budget runs it."""
    if offer_again and snap.on_exhaustion == "escalate":
        model_log = {**model_log, "queued": [decision.as_dict(), *(model_log.get("queued") or [])]}
    with transaction.atomic():
        _new_step(snap, kind=StepKind.TOOL, status=StepStatus.FAILED, decision=decision,
                  model_log=model_log, tool=decision.tool, args=decision.args, error=error,
                  finished_at=timezone.now())
        return _exhaust(snap, reason, actor, counters=counters, detail=error,
                        step_no=snap.steps_count + 1)


# --- executing a tool step ------------------------------------------------------


def _call_of(snap: TaskSnapshot, step: Step, spec: ToolSpec) -> ToolCall:
    return ToolCall(spec=spec, args=dict(step.args or {}), context=ToolContext(
        idempotency_key=step.idempotency_key, task_id=snap.id, step_id=step.pk,
        tenant_id=snap.tenant_id, trace_id=snap.trace_id))


def _execute(snap: TaskSnapshot, step: Step, *, owner: str, actor: Actor, memo: SliceMemo,
             spec: ToolSpec | None = None, claim: ledger.Claim | None = None) -> StepResult:
    """Run a decided tool step. With `claim` (taken in the decision's commit) the
    outcome is recorded in the ledger by the commit of the outcome; without,
    the ledger is asked first (a resumed or retried step)."""
    bind_log(step_no=step.step_no, step_kind="tool_call")
    if spec is None or spec.name != step.tool:
        spec = tool_specs(tenant_id=snap.tenant_id, names=[step.tool]).get(step.tool)
    if spec is None:
        outcome = ToolOutcome(kind=OutcomeKind.BUSINESS, error={
            "type": "tool_unavailable", "message": f"tool {step.tool!r} was disabled or removed"})
        return _commit_outcome(snap, step, None, outcome, actor, memo=memo)
    call = _call_of(snap, step, spec)
    hold = lease_for_call(spec=spec, call=call, step_no=step.step_no, owner=owner, actor=actor)
    if hold.waiting:  # its resource is busy: back to the queue, holding no worker
        if claim is not None:
            ledger.unclaim(claim, reason=hold.note)
        return StepResult(Next.LATER, hold.delay_s, hold.note)
    with hold:  # the resource lease is released once the outcome is written (or on error)
        call = hold.fenced(call)
        claim = replace(claim, call=call) if claim is not None else None
        gate = breaker_waits.tool_admit(snap, spec, owner=owner)
        if not gate.allowed:  # its breaker is open: no call, no retry spent; come back later
            return StepResult(Next.LATER, breaker_waits.tool_wait(snap, gate, claim), "breaker")
        if spec.timeout_s < settings.TETHER["LEASE_TTL_S"] / 3:
            # The call ends (or times out) well within the lease: no heartbeat needed.
            outcome = _run(call, claim, owner=owner, step_no=step.step_no)
        else:
            with heartbeat(task_id=snap.id, owner=owner):
                outcome = _run(call, claim, owner=owner, step_no=step.step_no)
        breaker_waits.tool_record(snap, gate, outcome, owner=owner)
        if outcome.kind is OutcomeKind.UNCERTAIN and claim is not None:
            # Recorded before the status query is asked (it may take long or fail).
            ledger.record(claim, outcome)
            outcome, claim = ledger.settle_with_status_query(call, first_error=outcome.error), None
        if outcome.kind is OutcomeKind.PROCESSING:
            return StepResult(Next.LATER, 0.5, "another executor holds this call")
        return _commit_outcome(snap, step, spec, outcome, actor, claim=claim, memo=memo)


def _run(call: ToolCall, claim: ledger.Claim | None, *, owner: str, step_no: int) -> ToolOutcome:
    with tool_span(tool=call.spec.name, call_id=call_id(step_no), kind=call.spec.kind,
                   idempotency_key=call.context.idempotency_key) as traced:
        outcome = (execute_through_ledger(call, owner=owner) if claim is None
                   else ledger.call_claimed(claim))
        traced.outcome(outcome.kind.value, error=outcome.error, from_ledger=outcome.from_ledger)
    return outcome


def _known(snap: TaskSnapshot) -> KnownTask:
    return KnownTask(status=snap.status, tenant_id=snap.tenant_id, trace_id=snap.trace_id)


def _commit_outcome(snap: TaskSnapshot, step: Step, spec: ToolSpec | None, outcome: ToolOutcome,
                    actor: Actor, *, memo: SliceMemo,
                    claim: ledger.Claim | None = None) -> StepResult:
    """Commit what came of the call, with the version check; with `claim`, the
    ledger's record of it in the same transaction."""
    if outcome.kind not in (OutcomeKind.OK, OutcomeKind.BUSINESS):
        try:
            with transaction.atomic():
                if claim is not None:
                    ledger.record(claim, outcome)
                return _commit_failure(snap, step, spec, outcome, actor, _known(snap))
        except DomainError as exc:
            if exc.kind != ErrorKind.CONFLICT:
                raise
            return _discard(snap, step, outcome, actor, claim, reason=exc.code)
    observed = outcome.result if outcome.kind is OutcomeKind.OK else outcome.error
    output_hash = sha256_hex(canonical_json(observed))
    is_new = not _seen_recently(snap, step.step_no, output_hash, memo)
    progress = after_call(snap, call_hash=call_fingerprint(step.tool, step.args or {}),
                          output_is_new=is_new)
    fields: dict[str, Any] = {
        "per_tool": {**snap.per_tool, step.tool: snap.per_tool.get(step.tool, 0) + 1},
        "last_call_hash": progress.last_call_hash, "repeat_count": progress.repeat_count,
        "stale_steps": progress.stale_steps,
    }
    done = commit_outcome(snap, step, outcome, fields=fields, output_hash=output_hash,
                          claim=claim, actor=actor)
    if done is None:
        return _discard(snap, step, outcome, actor, claim, reason="stale_version")
    if claim is not None and not done.ledger_recorded:
        ledger.record(claim, outcome)  # the claim was lost: kept as an attempt, for audit
    # The next step of this slice starts from what was written.
    memo.remember(replace(snap, version=done.version, tool_calls=snap.tool_calls + 1, **fields),
                  step)
    return CONTINUE


def _discard(snap: TaskSnapshot, step: Step, outcome: ToolOutcome, actor: Actor,
             claim: ledger.Claim | None, *, reason: str) -> StepResult:
    if claim is not None:
        ledger.record(claim, outcome)  # what the tool did stays known, applied or not
    _discard_late(snap, step, outcome, actor, reason=reason)
    return CONTINUE


def _commit_failure(snap: TaskSnapshot, step: Step, spec: ToolSpec | None, outcome: ToolOutcome,
                    actor: Actor, known: KnownTask) -> StepResult:
    """A permission error, a transient error or an unsettled outcome, written in
    the outcome's transaction (the caller's)."""
    now = timezone.now()
    if outcome.kind is OutcomeKind.PERMISSION:
        Step.objects.filter(pk=step.pk).update(status=StepStatus.FAILED, error=outcome.error,
                                               finished_at=now, latency_ms=outcome.latency_ms)
        task_transition(task_id=snap.id, event="fatal_error", actor=actor,
                        expected_version=snap.version, known=known,
                        payload={"reason": "permission_denied", "step_no": step.step_no},
                        fields={"failure_reason": "permission_denied",
                                "failure_detail": _failure_snapshot(snap, outcome.error)})
        return STOP
    if outcome.kind is OutcomeKind.TRANSIENT:
        max_retries = spec.max_retries if spec else 0
        if step.attempt < max_retries:
            delay = (retry_delay_s(spec.retry_delays_s, step.attempt + 1, outcome.retry_after_s)
                     if spec and spec.retry_delays_s
                     else backoff_s(step.attempt + 1, outcome.retry_after_s))
            task_transition(task_id=snap.id, event="retryable_error", actor=actor,
                            expected_version=snap.version, known=known,
                            payload={"step_no": step.step_no, "attempt": step.attempt + 1,
                                     "delay_s": round(delay, 3), "error": outcome.error})
            Step.objects.filter(pk=step.pk).update(
                status=StepStatus.RETRYING, attempt=F("attempt") + 1, error=outcome.error,
                next_attempt_at=now + timedelta(seconds=delay))
            return StepResult(Next.LATER, delay, "retry")
        Step.objects.filter(pk=step.pk).update(status=StepStatus.FAILED, error=outcome.error,
                                               finished_at=now)
        return _exhaust(snap, "retries_exhausted", actor, detail=outcome.error)
    # UNCERTAIN: the status query could not settle it: a person decides.
    Step.objects.filter(pk=step.pk).update(status=StepStatus.UNCERTAIN, error=outcome.error,
                                           latency_ms=outcome.latency_ms)
    done = task_transition(task_id=snap.id, event="result_uncertain", actor=actor,
                           expected_version=snap.version, known=known,
                           payload={"step_no": step.step_no, "tool": step.tool,
                                    "status_answer": outcome.status_answer})
    opening.reconciliation_open(
        task_id=snap.id, tenant_id=snap.tenant_id, step_id=step.pk, tool=step.tool,
        args=step.args or {}, idempotency_key=step.idempotency_key,
        status_answer=outcome.status_answer,
        reason=(outcome.error or {}).get("type", "uncertain"),
        task_version=done.version)
    return STOP


def _discard_late(snap: TaskSnapshot, step: Step, outcome: ToolOutcome, actor: Actor, *,
                  reason: str) -> None:
    """A result that arrived after cancel or a version change: kept, never applied."""
    count_late_result()
    late = {"kind": outcome.kind.value, "result": outcome.result, "error": outcome.error,
            "arrived_at": timezone.now().isoformat(), "seen_version": snap.version,
            "from_ledger": outcome.from_ledger}
    with transaction.atomic():
        task = Task.objects.only("status", "version").get(pk=snap.id)
        fresh = Step.objects.select_for_update().get(pk=step.pk)  # held for this instant only
        # Another executor already settled this step: ours is a duplicate, the step
        # keeps the outcome that was applied.
        duplicate = fresh.status in (StepStatus.SUCCEEDED, StepStatus.FAILED, StepStatus.REJECTED)
        if not duplicate:
            fresh.late_output = late
            if task.is_terminal:
                fresh.status = StepStatus.DISCARDED
            fresh.save(update_fields=["late_output", "status"])
        event_append(task_id=snap.id, tenant_id=snap.tenant_id, trace_id=snap.trace_id,
                     task_version=task.version, type="result_discarded", actor=actor,
                     payload={"step_no": step.step_no, "reason": reason, "task_status": task.status,
                              "step_status": fresh.status, "duplicate": duplicate,
                              "late_kind": outcome.kind.value})


# --- stopping ---------------------------------------------------------------------


def _failure_snapshot(snap: TaskSnapshot, detail: Any = None) -> dict[str, Any]:
    return {
        "detail": detail,
        "usage": {"steps": snap.steps_count, "model_calls": snap.model_calls,
                  "tool_calls": snap.tool_calls, "tokens": snap.tokens, "per_tool": snap.per_tool},
        "version": snap.version,
        "at": timezone.now().isoformat(),
    }


def _exhaust(snap: TaskSnapshot, reason: str, actor: Actor, *,
             counters: dict[str, Any] | None = None,
             detail: Any = None, step_no: int | None = None) -> StepResult:
    """Budget, deadline, no progress, retries or a step's error attempts used up:
    fail or escalate, as the profile says."""
    if snap.on_exhaustion == "escalate":
        event = "escalated"
        fields: dict[str, Any] = {"failure_detail": _failure_snapshot(snap, detail)}
    else:
        event = {"deadline": "deadline_exceeded", "no_progress": "fatal_error",
                 "retries_exhausted": "fatal_error", "step_error": "fatal_error",
                 }.get(reason, "budget_exhausted")
        fields = {"failure_reason": reason, "failure_detail": _failure_snapshot(snap, detail)}
    payload = {"reason": reason, "detail": detail, **({"step_no": step_no} if step_no else {})}
    task_transition(task_id=snap.id, event=event, actor=actor, expected_version=snap.version,
                    known=_known(snap), payload=payload, fields={**(counters or {}), **fields})
    return STOP


def _fail(snap: TaskSnapshot, reason: str, actor: Actor, *, detail: Any = None) -> StepResult:
    task_transition(task_id=snap.id, event="fatal_error", actor=actor,
                    expected_version=snap.version, known=_known(snap),
                    payload={"reason": reason, "detail": detail},
                    fields={"failure_reason": reason,
                            "failure_detail": _failure_snapshot(snap, detail)})
    return STOP
