"""Executing a decided tool step, and committing what came of it.

The call itself is awaited on the I/O loop (`execute`): an http tool on the
async client of its endpoint, a python tool in a pooled thread; the slice's
lease is kept alive meanwhile by the process's batched heartbeat (`beats`),
and the wait does not count against the slice's time (`Hop.worked_s`).
Around it, database phases: `open_call` (a resumed or retried step: its
spec, and the ledger's claim or stored answer), the ledger's record before a
status query, and `commit_outcome_of` (the outcome with the version check; a
failed check means the result is DISCARDED: recorded for audit, never
applied). A claim taken in the decision's commit is recorded by the commit of
the outcome; a cancel that committed meanwhile fences the result.

Before the call, one more database phase (`admit_call`): the resource lease
of a tool that declares a resource (`tasks_app.leases`; busy: the claim is
given back and the task comes back later) and the tool's circuit breaker
(`breaker_waits`; open: the same). The resource lease is held for the whole
awaited call and released once the outcome committed, or on any failure or
cancellation (a phase of its own). The call runs in its `execute_tool` span
(`foundations.tracing`), opened on the loop so an http tool's `traceparent` is
the span's.

An evaluation run (`Task.shadow_of`) sends nothing: each call is answered in
one database phase (`_shadow_call`) from the recorded task's ledger, or with a
typed result saying it was not made (`shadow`); only an unmatched read in an
evaluation with live reads takes the path above.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, Protocol

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from approvals_app.services import opening
from foundations.actors import Actor
from foundations.errors import DomainError, ErrorKind
from foundations.logs import bind_log
from foundations.metrics import count_late_result
from foundations.tracing import tool_span
from tools_app.breakers import retry_delay_s
from tools_app.executor import OutcomeKind, StatusAnswer, ToolCall, ToolContext, ToolOutcome, ledger
from tools_app.executor.dispatch import Prepared, ask_status, prepare
from tools_app.executor.types import ToolSpec
from tools_app.registry import tool_specs

from ..gateway.messages import call_id
from ..keys import call_fingerprint, canonical_json, sha256_hex
from ..leases import ResourceHold, lease_for_call
from ..models import Step, StepStatus, Task
from ..payloads import refusal
from ..snapshot import TaskSnapshot
from ..store.commits import commit_outcome
from ..store.events import event_append
from ..store.steps import step_keep_late, step_move
from ..store.tasks import KnownTask, task_transition
from . import breaker_waits, rate_waits, shadow
from .backoff import backoff_s
from .children import child_step, is_child_step
from .hops import Hop
from .memo import SliceMemo
from .progress import after_call
from .recording import Decided, call_spec, seen_recently
from .results import CONTINUE, STOP, Next, StepResult
from .stopping import exhaust, failure_snapshot, known

After = Callable[[], None] | None


def call_of(snap: TaskSnapshot, step: Step, spec: ToolSpec) -> ToolCall:
    return ToolCall(spec=spec, args=dict(step.args or {}), context=ToolContext(
        idempotency_key=step.idempotency_key, task_id=snap.id, step_id=step.pk,
        tenant_id=snap.tenant_id, trace_id=snap.trace_id))


def ready_call(decided: Decided, *, owner: str, actor: Actor,
               memo: SliceMemo) -> StepResult | Admitted | Answered | None:
    """In the phase that decided the call: its database part (its secrets) and
    its admission (resource lease, breaker: `admit_call`), so that the call goes
    out with no database phase of its own first; an evaluation run's call, its
    answer from the record (`Answered`). None when the ledger must be asked
    first (a retried task's call that reuses an earlier key: no claim)."""
    if decided.claim is None or is_child_step(decided.step):
        return None  # a child task: `execute`
    if decided.snap.shadow_of is not None:
        return _answered(decided, memo)
    prepared = prepare(call_of(decided.snap, decided.step, decided.spec))
    return admit_call(decided.snap, decided.step, decided.spec, decided.claim, prepared,
                      owner=owner, actor=actor)


@dataclass(frozen=True)
class _Open:
    spec: ToolSpec
    claim: ledger.Claim | None  # None: the ledger says UNCERTAIN, ask the status query
    prepared: Prepared | ToolOutcome


@dataclass(frozen=True)
class Answered:
    """An evaluation run's call, answered from the recorded task's ledger in the
    phase that decided it, under the claim that phase took: nothing is sent."""

    spec: ToolSpec
    claim: ledger.Claim
    outcome: ToolOutcome


def _answered(decided: Decided, memo: SliceMemo) -> Answered | None:
    """None: an unmatched read the evaluation lets through (`_shadow_call` says so
    again and it goes out)."""
    assert decided.claim is not None
    outcome = _from_record(decided.snap, decided.step, decided.spec, memo)
    return None if outcome is None else Answered(decided.spec, decided.claim, outcome)


def _from_record(snap: TaskSnapshot, step: Step, spec: ToolSpec,
                 memo: SliceMemo) -> ToolOutcome | None:
    """`shadow.recorded_outcome`, the recorded ledger read once a slice."""
    if memo.record is None:
        memo.record = shadow.recorded_calls(snap)
    return shadow.recorded_outcome(snap, step, spec, memo.record)


@dataclass(frozen=True)
class Admitted:
    """The call of `spec` may be made now: under `hold` (its resource lease, if
    any; the call and claim fenced with it) and past its breaker (`gate`)."""

    spec: ToolSpec
    hold: ResourceHold
    gate: breaker_waits.ToolGate
    call: ToolCall
    claim: ledger.Claim | None
    prepared: Prepared | ToolOutcome


class Committer(Protocol):
    """Runs a commit phase `fn(snap, ...)`: the slice's hop, or a wave's turn
    (`waves.Wave.commit`: the calls of a wave commit one at a time, each from
    the task as the previous one left it)."""

    async def commit(self, hop: Hop, fn: Any, snap: TaskSnapshot, *args: Any,
                     **kwargs: Any) -> Any: ...

    async def may_send(self, hop: Hop, task_id: int) -> bool: ...


class _Alone:
    async def commit(self, hop: Hop, fn: Any, snap: TaskSnapshot, *args: Any,
                     **kwargs: Any) -> Any:
        return await hop(fn, snap, *args, **kwargs)

    async def may_send(self, hop: Hop, task_id: int) -> bool:
        return True  # a lone call goes out; its outcome's commit fences a cancel


ALONE = _Alone()


async def execute(snap: TaskSnapshot, step: Step, *, owner: str, actor: Actor, memo: SliceMemo,
                  hop: Hop, admitted: StepResult | Admitted | Answered | None = None,
                  after: After = None, wave: Committer = ALONE) -> StepResult:
    """Run a decided tool step. With `admitted` (`ready_call`: its claim taken
    in the decision's commit, its admission in the same phase) the call goes
    out at once, and its outcome is recorded in the ledger by the commit of the
    outcome; without (a resumed or retried step, or a retried task's call that
    reuses an earlier key: no claim was taken), the ledger is asked first.
    In a wave, its commits take their turn (`wave`)."""
    if isinstance(admitted, Answered):  # an evaluation run's call, answered from the record
        return await wave.commit(hop, commit_then, snap, step, admitted.spec, admitted.outcome,
                                 actor, memo=memo, claim=admitted.claim, after=after)
    if snap.shadow_of is not None:  # an evaluation run: answered from the record
        answered = await wave.commit(hop, _shadow_call, snap, step, owner=owner, actor=actor,
                                     memo=memo, after=after)
        if answered is not None:
            return answered
        # an unmatched read in an evaluation with live reads: made for real, below
    if is_child_step(step):  # `agent:<name>`: a child task, waited for (`children`)
        return await wave.commit(hop, _child_step, snap, step, owner=owner, actor=actor,
                                 memo=memo, after=after)
    if admitted is None:
        opened = await wave.commit(hop, open_call, snap, step, owner=owner, actor=actor,
                                   memo=memo)
        if isinstance(opened, StepResult):
            return opened
        admitted = await hop(admit_call, snap, step, opened.spec, opened.claim, opened.prepared,
                             owner=owner, actor=actor)
    if isinstance(admitted, StepResult):
        return admitted
    hold = admitted.hold
    try:
        if not await wave.may_send(hop, snap.id):
            if admitted.claim is not None:
                await hop(ledger.unclaim, admitted.claim,
                          reason="the task stopped before the call was sent")
            return CONTINUE
        return await _call_and_commit(snap, step, admitted, owner=owner, actor=actor,
                                      memo=memo, hop=hop, after=after, wave=wave)
    finally:
        if hold.held:  # after the outcome committed, or on any failure or cancellation
            await hop(_release, hold)


async def _call_and_commit(snap: TaskSnapshot, step: Step, admitted: Admitted,
                           *, owner: str, actor: Actor, memo: SliceMemo, hop: Hop,
                           after: After, wave: Committer) -> StepResult:
    spec, call, claim, prepared = admitted.spec, admitted.call, admitted.claim, admitted.prepared
    # the slice's lease is kept alive meanwhile (`beats`)
    with tool_span(tool=spec.name, call_id=call_id(step.step_no), kind=spec.kind,
                   idempotency_key=call.context.idempotency_key) as traced:
        if claim is None:
            outcome = await _settle(hop, call, prepared, first_error=None)
        else:
            outcome = await ledger.acall_claimed(claim, prepared)
        traced.outcome(outcome.kind.value, error=outcome.error, from_ledger=outcome.from_ledger)
    if breaker_waits.tool_record_needed(admitted.gate, outcome):
        await hop(breaker_waits.tool_record, snap, admitted.gate, outcome, owner=owner)
    if claim is not None and outcome.kind is OutcomeKind.UNCERTAIN:
        # Recorded before the status query is asked (it may take long or fail).
        await hop(ledger.record, claim, outcome)
        outcome, claim = await _settle(hop, call, prepared, first_error=outcome.error), None
    if outcome.kind is OutcomeKind.PROCESSING:
        return held_elsewhere(outcome)
    return await wave.commit(hop, commit_then, snap, step, spec, outcome, actor, memo=memo,
                             claim=claim, after=after)


def _child_step(snap: TaskSnapshot, step: Step, *, owner: str, actor: Actor, memo: SliceMemo,
                after: After) -> StepResult:
    ended = child_step(snap, step, owner=owner)
    if isinstance(ended, StepResult):
        return ended
    return commit_then(snap, step, ended.spec, ended.outcome, actor, memo=memo,
                       claim=ended.claim, after=after)


def _shadow_call(snap: TaskSnapshot, step: Step, *, owner: str, actor: Actor, memo: SliceMemo,
                 after: After) -> StepResult | None:
    """An evaluation run's call (a database phase): its outcome from the recorded
    task's ledger, or a typed result saying it was not made (`shadow`); nothing is
    sent. None: an unmatched read the evaluation lets through to the real tool."""
    bind_log(step_no=step.step_no, step_kind="tool_call")
    if is_child_step(step):  # another agent's task would do real work: never started
        return commit_then(snap, step, None, shadow.not_made(step), actor, memo=memo,
                           claim=None, after=after)
    known_specs = memo.specs if memo.specs and step.tool in memo.specs else tool_specs(
        tenant_id=snap.tenant_id, names=[step.tool])  # the slice's, else read
    spec = call_spec(known_specs.get(step.tool), step.decision)
    if spec is None:  # as `open_call` answers it
        return commit_outcome_of(snap, step, None, ToolOutcome(kind=OutcomeKind.BUSINESS, error={
            "type": "tool_unavailable", "message": f"tool {step.tool!r} was disabled or removed"}),
            actor, memo=memo)
    outcome = _from_record(snap, step, spec, memo)
    if outcome is None:
        return None
    taken = ledger.claim_without_effect(call_of(snap, step, spec), owner=owner)
    if isinstance(taken, ToolOutcome):  # settled before (a resumed step): as it was
        return commit_then(snap, step, spec, taken, actor, memo=memo, claim=None, after=after)
    return commit_then(snap, step, spec, outcome, actor, memo=memo, claim=taken, after=after)


def held_elsewhere(outcome: ToolOutcome) -> StepResult:
    """Another executor's claim holds the call's key: the task comes back when
    the ledger says (`ledger.claim_or_answer`: waits that double, at the latest
    when the claim ends), not every half second for the claim's whole life."""
    return StepResult(Next.LATER, outcome.retry_after_s or ledger.MIN_ASK_AGAIN_S,
                      "another executor holds this call")


def admit_call(snap: TaskSnapshot, step: Step, spec: ToolSpec, claim: ledger.Claim | None,
               prepared: Prepared | ToolOutcome, *, owner: str,
               actor: Actor) -> StepResult | Admitted:
    """May the call be made now (a database phase)? Its resource lease, then its
    breaker; either one busy: the claim is given back (no attempt, no retry
    spent) and the task comes back later, holding no worker."""
    call = call_of(snap, step, spec)
    hold = lease_for_call(spec=spec, call=call, step_no=step.step_no, owner=owner, actor=actor)
    if hold.waiting:  # its resource is busy: back to the queue
        if claim is not None:
            ledger.unclaim(claim, reason=hold.note)
        return StepResult(Next.LATER, hold.delay_s, hold.note)
    admitted = False
    try:
        call = hold.fenced(call)
        claim = replace(claim, call=call) if claim is not None else None
        if isinstance(prepared, Prepared):
            prepared = replace(prepared, call=hold.fenced(prepared.call))
        # its rate limit's slot ahead (before the breaker: a probe is never held
        # by a wait), or its breaker open: no call, no retry spent; come back later
        wait_s = rate_waits.tool_admit(snap, spec, claim, step_no=step.step_no)
        if wait_s is not None:
            return StepResult(Next.LATER, wait_s, "waiting for rate limit")
        gate = breaker_waits.tool_admit(snap, spec, owner=owner)
        if not gate.allowed:
            return StepResult(Next.LATER, breaker_waits.tool_wait(snap, gate, claim), "breaker")
        admitted = True
        return Admitted(spec, hold, gate, call, claim, prepared)
    finally:
        if not admitted:
            _release(hold)


def _release(hold: ResourceHold) -> None:
    hold.__exit__(None, None, None)


async def _settle(hop: Hop, call: ToolCall, prepared: Prepared | ToolOutcome, *,
                  first_error: dict[str, Any] | None) -> ToolOutcome:
    """Ask the status query (awaited), then settle the ledger row (a phase)."""
    if isinstance(prepared, ToolOutcome):
        answer = StatusAnswer(state="unknown", detail="status query not sent: "
                              + str((prepared.error or {}).get("message", "")))
    else:
        answer = await ask_status(prepared)
    return await hop(ledger.settle_with_answer, call, answer, first_error=first_error)


def open_call(snap: TaskSnapshot, step: Step, *, owner: str, actor: Actor,
              memo: SliceMemo) -> StepResult | _Open:
    """A resumed or retried step (a database phase): its tool, and the ledger's
    claim on its key, or the ledger's stored answer (committed here)."""
    bind_log(step_no=step.step_no, step_kind="tool_call")
    spec = call_spec(tool_specs(tenant_id=snap.tenant_id, names=[step.tool]).get(step.tool),
                     step.decision)
    if spec is None:
        outcome = ToolOutcome(kind=OutcomeKind.BUSINESS, error={
            "type": "tool_unavailable", "message": f"tool {step.tool!r} was disabled or removed"})
        return commit_outcome_of(snap, step, None, outcome, actor, memo=memo)
    call = call_of(snap, step, spec)
    claimed = ledger.claim_or_answer(call, owner=owner, holds_task_lease=True)
    if isinstance(claimed, ToolOutcome):
        if claimed.kind is OutcomeKind.PROCESSING:
            return held_elsewhere(claimed)
        return commit_outcome_of(snap, step, spec, claimed, actor, memo=memo)
    return _Open(spec, claimed, prepare(call))


def commit_then(snap: TaskSnapshot, step: Step, spec: ToolSpec | None, outcome: ToolOutcome,
                actor: Actor, *, memo: SliceMemo, claim: ledger.Claim | None,
                after: After) -> StepResult:
    """Commit the outcome, then what follows the step (the summary check)."""
    result = commit_outcome_of(snap, step, spec, outcome, actor, memo=memo, claim=claim)
    if after is not None:
        after()
    return result


def commit_outcome_of(snap: TaskSnapshot, step: Step, spec: ToolSpec | None, outcome: ToolOutcome,
                    actor: Actor, *, memo: SliceMemo,
                    claim: ledger.Claim | None = None) -> StepResult:
    """Commit what came of the call, with the version check; with `claim`, the
    ledger's record of it in the same transaction."""
    if outcome.kind not in (OutcomeKind.OK, OutcomeKind.BUSINESS):
        try:
            with transaction.atomic():
                if claim is not None:
                    ledger.record(claim, outcome)
                return _commit_failure(snap, step, spec, outcome, actor, known(snap))
        except DomainError as exc:
            if exc.kind != ErrorKind.CONFLICT:
                raise
            return _discard(snap, step, outcome, actor, claim, reason=exc.code)
    if outcome.kind is OutcomeKind.OK:  # the task's stored payloads have a limit
        too_large = refusal(snap.id, outcome.result)
        if too_large is not None:
            outcome = replace(outcome, kind=OutcomeKind.BUSINESS, result=None, error=too_large)
    observed = outcome.result if outcome.kind is OutcomeKind.OK else outcome.error
    output_hash = sha256_hex(canonical_json(observed))
    is_new = not seen_recently(snap, step.step_no, output_hash, memo)
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
        step_move(step.pk, StepStatus.FAILED, error=outcome.error, finished_at=now,
                  latency_ms=outcome.latency_ms)
        task_transition(task_id=snap.id, event="fatal_error", actor=actor,
                        expected_version=snap.version, known=known,
                        payload={"reason": "permission_denied", "step_no": step.step_no},
                        fields={"failure_reason": "permission_denied",
                                "failure_detail": failure_snapshot(snap, outcome.error)})
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
            step_move(step.pk, StepStatus.RETRYING, attempt=F("attempt") + 1,
                      error=outcome.error, next_attempt_at=now + timedelta(seconds=delay))
            return StepResult(Next.LATER, delay, "retry")
        step_move(step.pk, StepStatus.FAILED, error=outcome.error, finished_at=now)
        return exhaust(snap, "retries_exhausted", actor, detail=outcome.error)
    # UNCERTAIN: the status query could not settle it: a person decides.
    step_move(step.pk, StepStatus.UNCERTAIN, error=outcome.error, latency_ms=outcome.latency_ms)
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
        # locked: the event's version is the one committed last (`event_note`)
        task = Task.objects.select_for_update().only("status", "version").get(pk=snap.id)
        step_status, duplicate = step_keep_late(step.pk, late, task_ended=task.is_terminal)
        event_append(task_id=snap.id, tenant_id=snap.tenant_id, trace_id=snap.trace_id,
                     task_version=task.version, type="result_discarded", actor=actor,
                     payload={"step_no": step.step_no, "reason": reason, "task_status": task.status,
                              "step_status": step_status, "duplicate": duplicate,
                              "late_kind": outcome.kind.value})


# --- stopping ---------------------------------------------------------------------
