"""The idempotency ledger: one row per server-made key, written before the call.

Semantics for a key (docs/explanation/recovery.md, "The idempotency ledger"):
- SUCCEEDED: the stored result is returned; the tool is not called.
- FAILED_FINAL: the stored business/permission error is returned.
- IN_PROGRESS, claimed by a live executor: "processing".
- IN_PROGRESS whose claim expired (its executor died), or FAILED_RETRYABLE:
  called again with the same key if the tool honours keys (read,
  idempotent_write); a plain write becomes UNCERTAIN instead: never a blind
  replay.
- UNCERTAIN: the status query is asked; unsettled stays UNCERTAIN.

No transaction is held across the call: claim (short transaction), call,
record (short transaction, fenced on the claim owner).

The runner's usual path writes the claim in the statement that commits the
step's decision and the record in the one that commits its outcome
(`tasks_app.store.commits`, with this module's `Claim`, `record_while` and
`recorded_fields`), and calls the tool in between with
`acall_claimed` (awaited on the I/O loop, see `dispatch`): the ledger costs no
commit of its own there. `record` is for a
claimed call whose outcome is not committed that way (a failure, or a result
the task's version check refused).

A large result is stored out of row like a step's output (the same blob, a
use of the task: `tasks_app.store.blobs`), on every path that writes it: the
store's commit, and `record`, `_record_locked` and `_settle` here through
`ledger_result`; `_stored_outcome` puts it back (`tasks_app.payloads.resolve_ledger`),
so a replayed call gets the value, never the reference.
"""
from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.utils import timezone

from foundations.ioloop import run_io
from foundations.metrics import observe_tool_call
from tasks_app.payloads import resolve_ledger, stays_inline
from tasks_app.store.blobs import ledger_result

from ..models import LedgerStatus, ToolExecution
from .dispatch import Prepared, prepare, query_status, send
from .types import OutcomeKind, StatusAnswer, ToolCall, ToolOutcome

MIN_ASK_AGAIN_S = 0.5  # the first look again at a claim taken just now
FINAL_KINDS = {OutcomeKind.BUSINESS: "business", OutcomeKind.PERMISSION: "permission"}
STATUS_OF = {
    OutcomeKind.OK: LedgerStatus.SUCCEEDED,
    OutcomeKind.BUSINESS: LedgerStatus.FAILED_FINAL,
    OutcomeKind.PERMISSION: LedgerStatus.FAILED_FINAL,
    OutcomeKind.TRANSIENT: LedgerStatus.FAILED_RETRYABLE,
    OutcomeKind.UNCERTAIN: LedgerStatus.UNCERTAIN,
}


@dataclass(frozen=True)
class Claim:
    """`owner` holds the key of `call`; `attempts` is the row's attempt log as written."""

    call: ToolCall
    owner: str
    attempts: list[dict[str, Any]]


def execute_through_ledger(call: ToolCall, *, owner: str) -> ToolOutcome:
    """Run `call` at most once per key (for plain writes) and return what came of it."""
    claim = _claim(call, owner=owner)
    if isinstance(claim, ToolOutcome):
        return claim
    outcome = call_claimed(claim)
    record(claim, outcome)
    if outcome.kind is OutcomeKind.UNCERTAIN:
        return settle_with_status_query(call, first_error=outcome.error)
    return outcome


def claim_new(call: ToolCall, *, owner: str) -> Claim:
    """Write a new key's row, claimed by `owner`, in the caller's transaction.

    Raises IntegrityError when the key exists (only a step that was never
    attempted may be claimed this way)."""
    row = claim_row(tenant_id=call.context.tenant_id, task_id=call.context.task_id,
                    tool=call.spec.name, args=call.args, owner=owner,
                    timeout_s=call.spec.timeout_s, now=timezone.now())
    ToolExecution.objects.create(idempotency_key=call.context.idempotency_key,
                                 step_id=call.context.step_id, **row)
    return Claim(call=call, owner=owner, attempts=row["attempts"])


def claim_row(*, tenant_id: int, task_id: int, tool: str, args: dict[str, Any], owner: str,
              timeout_s: float, now: datetime) -> dict[str, Any]:
    """A new key's ledger row claimed by `owner`, but its key and step (the one
    spelling of the claim: `claim_new` here, the decision's commit in the store)."""
    return {"tenant_id": tenant_id, "task_id": task_id, "tool": tool, "args": args,
            "status": LedgerStatus.IN_PROGRESS.value,
            "attempts": [{"started_at": now.isoformat(), "owner": owner}],
            "claimed_by": owner, "claimed_until": now + timedelta(seconds=claim_s(timeout_s)),
            "created_at": now, "updated_at": now}


def call_claimed(claim: Claim) -> ToolOutcome:
    """Call the tool under `claim` and time it; nothing is recorded yet."""
    return run_io(acall_claimed(claim, prepare(claim.call)))


async def acall_claimed(claim: Claim, prepared: Prepared | ToolOutcome) -> ToolOutcome:
    """`call_claimed`, awaited on the I/O loop; `prepared` is the call's database
    part (`dispatch.prepare`), done by the caller where the ORM may run."""
    started = time.monotonic()
    outcome = prepared if isinstance(prepared, ToolOutcome) else await send(prepared)
    observe_tool_call(tool=claim.call.spec.name, outcome=outcome.kind.value,
                      seconds=time.monotonic() - started)
    return ToolOutcome(
        kind=outcome.kind,
        result=outcome.result,
        error=outcome.error,
        retry_after_s=outcome.retry_after_s,
        latency_ms=int((time.monotonic() - started) * 1000),
    )


def claim_s(timeout_s: float) -> float:
    """How long a call's claim lasts: it outlives the call's own timeout by a
    grace period; past it, the claimer is presumed dead and recovery may take
    the key over. (A breaker's probe and a resource lease last as long.)"""
    return timeout_s + float(settings.TETHER["LEDGER_CLAIM_GRACE_S"])


def _claim_until(call: ToolCall, now):  # type: ignore[no-untyped-def]
    return now + timedelta(seconds=claim_s(call.spec.timeout_s))


def _ask_again_s(call: ToolCall, claimed_until, now) -> float:  # type: ignore[no-untyped-def]
    """When to look at another executor's claim again. A living claimer records
    its outcome any moment, a dead one never (its claim just ends): wait as long
    as the claim has lasted so far (so the waits double), at most until it ends."""
    remaining = (claimed_until - now).total_seconds()
    return max(0.0, min(remaining, max(MIN_ASK_AGAIN_S, claim_s(call.spec.timeout_s) - remaining)))


def settle_with_status_query(
    call: ToolCall, *, first_error: dict[str, Any] | None = None
) -> ToolOutcome:
    """Ask the tool's status query whether key K happened, and settle the ledger row."""
    return settle_with_answer(call, query_status(call), first_error=first_error)


def settle_with_answer(call: ToolCall, answer: StatusAnswer, *,
                       first_error: dict[str, Any] | None = None) -> ToolOutcome:
    """Settle the ledger row of `call` with what its status query answered."""
    answer_dict = {"state": answer.state, "result": answer.result, "detail": answer.detail,
                   "asked_at": timezone.now().isoformat()}
    row = ToolExecution.objects.get(idempotency_key=call.context.idempotency_key)
    if answer.state == "succeeded":
        _settle(row, LedgerStatus.SUCCEEDED, result=answer.result, answer=answer_dict)
        return ToolOutcome(kind=OutcomeKind.OK, result=answer.result, status_answer=answer_dict)
    if answer.state in ("failed", "not_found"):
        error = {"type": "not_performed", "message": f"the status query says {answer.state}",
                 "detail": answer.detail}
        _settle(row, LedgerStatus.FAILED_FINAL, error=error, answer=answer_dict)
        return ToolOutcome(kind=OutcomeKind.BUSINESS, error=error, status_answer=answer_dict)
    row.status_answer = answer_dict
    row.save(update_fields=["status_answer", "updated_at"])
    return ToolOutcome(
        kind=OutcomeKind.UNCERTAIN,
        error=first_error or row.error or {"type": "uncertain", "message": "outcome unknown"},
        status_answer=answer_dict,
    )


def settle_by_human(key: str, *, succeeded: bool, result: Any = None, error: Any = None) -> None:
    """A reviewer's reconciliation decides what the ledger says of key K."""
    row = ToolExecution.objects.get(idempotency_key=key)
    if succeeded:
        _settle(row, LedgerStatus.SUCCEEDED, result=result, answer=row.status_answer)
    else:
        _settle(row, LedgerStatus.FAILED_FINAL, error=error, answer=row.status_answer)


def release(claim: Claim, *, error: dict[str, Any]) -> None:
    """Give back a claim whose call was not made (a circuit breaker held it): the
    key stays claimable, as after a retryable failure, with no attempt logged."""
    ToolExecution.objects.filter(
        idempotency_key=claim.call.context.idempotency_key, claimed_by=claim.owner,
        status=LedgerStatus.IN_PROGRESS,
    ).update(status=LedgerStatus.FAILED_RETRYABLE, error=error, attempts=claim.attempts[:-1],
             claimed_by="", claimed_until=None, updated_at=timezone.now())


def reopen_for_retry(key: str) -> None:
    """A reviewer chose "retry with the same key" (only for tools that honour keys)."""
    ToolExecution.objects.filter(idempotency_key=key).update(
        status=LedgerStatus.FAILED_RETRYABLE, claimed_by="", claimed_until=None
    )


def unclaim(claim: Claim, *, reason: str) -> bool:
    """Give back a claimed key whose call was never made (its resource was busy):
    recorded as an attempt that did not call, and callable again later (for a
    plain write too: nothing happened). False when the claim no longer held."""
    attempts = list(claim.attempts)
    if attempts:
        attempts[-1] = {**attempts[-1], "outcome": "not_called", "reason": reason}
    return bool(
        ToolExecution.objects.filter(idempotency_key=claim.call.context.idempotency_key,
                                     claimed_by=claim.owner, status=LedgerStatus.IN_PROGRESS)
        .update(status=LedgerStatus.FAILED_RETRYABLE, attempts=attempts, claimed_by="",
                claimed_until=None, updated_at=timezone.now()))


def interrupted_call(key: str) -> ToolExecution | None:
    """The ledger row of key K when its call was interrupted: IN_PROGRESS and its
    claim expired (its executor died mid-call). None when K settled, or is live."""
    row = ToolExecution.objects.filter(idempotency_key=key).first()
    if row is None or row.status != LedgerStatus.IN_PROGRESS:
        return None
    if row.claimed_until is not None and row.claimed_until > timezone.now():
        return None
    return row


def mark_interrupted(key: str) -> bool:
    """An interrupted plain write: its outcome is unknown (UNCERTAIN), never replayed;
    the status query, else a reconciliation, settles it (as `_claim` would)."""
    return bool(
        ToolExecution.objects.filter(idempotency_key=key, status=LedgerStatus.IN_PROGRESS)
        .update(status=LedgerStatus.UNCERTAIN, claimed_by="", claimed_until=None,
                error={"type": "interrupted",
                       "message": "the call was interrupted; its outcome is unknown"},
                updated_at=timezone.now()))


def _claim(call: ToolCall, *, owner: str) -> Claim | ToolOutcome:
    """Take the key for this executor (a Claim: call the tool), or answer from the
    ledger (an UNCERTAIN key: after asking the status query)."""
    claimed = claim_or_answer(call, owner=owner)
    return settle_with_status_query(call) if claimed is None else claimed


def claim_or_answer(call: ToolCall, *, owner: str,
                    holds_task_lease: bool = False) -> Claim | ToolOutcome | None:
    """Take the key for this executor (a Claim: call the tool), or answer from the
    ledger; None when the key is UNCERTAIN: its status query must settle it
    (`settle_with_answer`).

    `holds_task_lease`: `owner` holds the task's lease (a runner's slice), so the
    lease of whoever claimed the key before has ended: that claimer is dead or
    late. A call that is safe to repeat (a read, a write the downstream dedups by
    key) is then taken over at once, not after its claim; a late claimer can no
    longer record (`record_while`). A plain write waits the claim out."""
    key = call.context.idempotency_key
    try:
        with transaction.atomic():
            return claim_new(call, owner=owner)
    except IntegrityError:
        pass  # the key exists: this step was attempted before
    now = timezone.now()
    claim_until = _claim_until(call, now)
    attempt = {"started_at": now.isoformat(), "owner": owner}

    with transaction.atomic():
        # The lock is held only for this read-decide-write instant, never across the call.
        row = ToolExecution.objects.select_for_update().get(idempotency_key=key)
        if (stored := _stored_outcome(row)) is not None:
            return stored
        if row.status == LedgerStatus.UNCERTAIN:
            uncertain = True
        elif row.status == LedgerStatus.IN_PROGRESS and row.claimed_by != owner and (
            row.claimed_until and row.claimed_until > now
        ) and not (holds_task_lease and call.spec.honours_keys):
            return ToolOutcome(kind=OutcomeKind.PROCESSING, from_ledger=True,
                               retry_after_s=_ask_again_s(call, row.claimed_until, now))
        else:
            # an orphaned claim (its executor died) or a retryable failure
            uncertain = row.status == LedgerStatus.IN_PROGRESS and not call.spec.honours_keys
        if uncertain:
            if row.status != LedgerStatus.UNCERTAIN:
                row.status = LedgerStatus.UNCERTAIN
                row.error = {"type": "interrupted",
                             "message": "the call was interrupted; its outcome is unknown"}
                row.claimed_by, row.claimed_until = "", None
                row.save(update_fields=["status", "error", "claimed_by", "claimed_until",
                                        "updated_at"])
        else:
            row.status = LedgerStatus.IN_PROGRESS
            row.claimed_by, row.claimed_until = owner, claim_until
            row.attempts = [*row.attempts, attempt]
            row.save(update_fields=["status", "claimed_by", "claimed_until", "attempts",
                                    "updated_at"])
            return Claim(call=call, owner=owner, attempts=list(row.attempts))
    return None


def _stored_outcome(row: ToolExecution) -> ToolOutcome | None:
    """A settled key's outcome, as the ledger stored it (None: not settled)."""
    if row.status == LedgerStatus.SUCCEEDED:
        resolve_ledger([row])  # a large result is stored out of row
        return ToolOutcome(kind=OutcomeKind.OK, result=row.result, from_ledger=True)
    if row.status == LedgerStatus.FAILED_FINAL:
        permission = (row.error or {}).get("layer") == "permission"
        kind = OutcomeKind.PERMISSION if permission else OutcomeKind.BUSINESS
        return ToolOutcome(kind=kind, error=row.error, from_ledger=True)
    return None


def claim_without_effect(call: ToolCall, *, owner: str) -> Claim | ToolOutcome:
    """The key of a call that is never sent (an evaluation run's: its outcome
    comes from another task's record), taken by `owner`, who holds the task's
    lease, whoever claimed it before; or its stored outcome once settled. With
    nothing sent there is no effect to be uncertain about, so no status query."""
    now = timezone.now()
    with transaction.atomic():
        # the decision's commit usually claimed the key already: look first
        row = ToolExecution.objects.select_for_update().filter(
            idempotency_key=call.context.idempotency_key).first()
        if row is None:
            return claim_new(call, owner=owner)
        if (stored := _stored_outcome(row)) is not None:
            return stored
        row.status, row.error = LedgerStatus.IN_PROGRESS, None
        row.claimed_by, row.claimed_until = owner, _claim_until(call, now)
        row.attempts = [*row.attempts, {"started_at": now.isoformat(), "owner": owner}]
        row.save(update_fields=["status", "error", "claimed_by", "claimed_until", "attempts",
                                "updated_at"])
        return Claim(call=call, owner=owner, attempts=list(row.attempts))


def record_while(key: str, owner: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ledger's one rule for recording an outcome: only while `owner`'s claim
    on `key` holds, and never over a SUCCEEDED row. As (columns that must equal,
    columns that must differ), from which the ORM filter (`recordable`), the
    check of a locked row (`holds`) and the store's SQL (`tasks_app.store`) come."""
    return {"idempotency_key": key, "claimed_by": owner}, {"status": LedgerStatus.SUCCEEDED}


def recordable(key: str, owner: str) -> QuerySet[ToolExecution]:
    equal, differ = record_while(key, owner)
    return ToolExecution.objects.filter(**equal).exclude(**differ)


def holds(row: ToolExecution, owner: str) -> bool:
    equal, differ = record_while(row.idempotency_key, owner)
    return (all(getattr(row, c) == v for c, v in equal.items())
            and all(getattr(row, c) != v for c, v in differ.items()))


def recorded_fields(claim: Claim, outcome: ToolOutcome, now: datetime) -> dict[str, Any]:
    """What recording `outcome` writes to the claimed row (the claim is released)."""
    error = stored_error(outcome)
    return {"status": STATUS_OF[outcome.kind], "result": outcome.result, "error": error,
            "attempts": with_outcome(claim.attempts, outcome, error),
            "claimed_by": "", "claimed_until": None, "updated_at": now}


def record(claim: Claim, outcome: ToolOutcome) -> None:
    """Write what came of a claimed call; in the caller's transaction when there is one.

    One conditional UPDATE while the claim still holds (the usual case); when it
    does not (the claim expired and another executor took the key), the
    attempt is kept for audit and the ledger's verdict stays theirs."""
    context = claim.call.context
    large = not stays_inline(outcome.result)
    # a large result's blob with the row, or neither (a small one costs no savepoint)
    with transaction.atomic() if large else nullcontext():
        fields = recorded_fields(claim, outcome, timezone.now())
        fields["result"] = ledger_result(tenant_id=context.tenant_id, task_id=context.task_id,
                                         result=outcome.result)
        held = recordable(context.idempotency_key, claim.owner).update(**fields)
        if large and not held:
            transaction.set_rollback(True)
    if not held:
        _record_locked(claim.call, claim.owner, outcome)


def stored_error(outcome: ToolOutcome) -> dict[str, Any] | None:
    error = dict(outcome.error or {}) or None
    if error is not None and outcome.kind in FINAL_KINDS:
        error["layer"] = FINAL_KINDS[outcome.kind]
    return error


def with_outcome(attempts: list[dict[str, Any]], outcome: ToolOutcome,
                  error: dict[str, Any] | None) -> list[dict[str, Any]]:
    attempts = list(attempts)
    if attempts:
        attempts[-1] = {**attempts[-1], "outcome": outcome.kind.value, "ms": outcome.latency_ms,
                        "error": error}
    return attempts


def _record_locked(call: ToolCall, owner: str, outcome: ToolOutcome) -> None:
    error = stored_error(outcome)
    with transaction.atomic():
        key = call.context.idempotency_key
        row = ToolExecution.objects.select_for_update().get(idempotency_key=key)
        row.attempts = with_outcome(row.attempts, outcome, error)
        if not holds(row, owner):
            # Someone else owns the key now (our claim expired): keep the attempt for
            # audit, but the ledger's verdict is theirs.
            row.save(update_fields=["attempts", "updated_at"])
            return
        row.status, row.error = STATUS_OF[outcome.kind], error
        row.result = ledger_result(tenant_id=row.tenant_id, task_id=call.context.task_id,
                                   result=outcome.result)
        row.claimed_by, row.claimed_until = "", None
        row.save()


def _settle(row: ToolExecution, status: str, *, result: Any = None, error: Any = None,
            answer: Any = None) -> None:
    with transaction.atomic():  # a large result's blob with the row
        row.status, row.error, row.status_answer = status, error, answer
        row.result = ledger_result(tenant_id=row.tenant_id, task_id=row.task_id, result=result)
        row.claimed_by, row.claimed_until = "", None
        row.save()
