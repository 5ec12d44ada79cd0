"""The idempotency ledger: one row per server-made key, written before the call.

Semantics for a key (DESIGN.md "The loop", step 5):
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
"""
from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from ..models import LedgerStatus, ToolExecution
from .dispatch import call_tool, query_status
from .types import OutcomeKind, ToolCall, ToolOutcome

FINAL_KINDS = {OutcomeKind.BUSINESS: "business", OutcomeKind.PERMISSION: "permission"}


def execute_through_ledger(call: ToolCall, *, owner: str) -> ToolOutcome:
    """Run `call` at most once per key (for plain writes) and return what came of it."""
    claim = _claim(call, owner=owner)
    if claim is not None:
        return claim
    started = time.monotonic()
    outcome = call_tool(call)
    latency_ms = int((time.monotonic() - started) * 1000)
    outcome = ToolOutcome(
        kind=outcome.kind,
        result=outcome.result,
        error=outcome.error,
        retry_after_s=outcome.retry_after_s,
        latency_ms=latency_ms,
    )
    if outcome.kind is OutcomeKind.UNCERTAIN:
        _record(call, owner, outcome)
        return settle_with_status_query(call, first_error=outcome.error)
    _record(call, owner, outcome)
    return outcome


def settle_with_status_query(
    call: ToolCall, *, first_error: dict[str, Any] | None = None
) -> ToolOutcome:
    """Ask the tool's status query whether key K happened, and settle the ledger row."""
    answer = query_status(call)
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


def reopen_for_retry(key: str) -> None:
    """A reviewer chose "retry with the same key" (only for tools that honour keys)."""
    ToolExecution.objects.filter(idempotency_key=key).update(
        status=LedgerStatus.FAILED_RETRYABLE, claimed_by="", claimed_until=None
    )


def _claim(call: ToolCall, *, owner: str) -> ToolOutcome | None:
    """Take the key for this executor, or answer from the ledger. None means: call the tool."""
    key = call.context.idempotency_key
    now = timezone.now()
    # The claim outlives the call's own timeout by a grace period; past it, the
    # claimer is presumed dead and recovery may take the key over.
    grace_s = settings.TETHER["LEDGER_CLAIM_GRACE_S"]
    claim_until = now + timedelta(seconds=call.spec.timeout_s + grace_s)
    attempt = {"started_at": now.isoformat(), "owner": owner}
    try:
        with transaction.atomic():
            ToolExecution.objects.create(
                idempotency_key=key,
                tenant_id=call.context.tenant_id,
                task_id=call.context.task_id,
                step_id=call.context.step_id,
                tool=call.spec.name,
                args=call.args,
                status=LedgerStatus.IN_PROGRESS,
                attempts=[attempt],
                claimed_by=owner,
                claimed_until=claim_until,
            )
        return None
    except IntegrityError:
        pass  # the key exists: this step was attempted before

    with transaction.atomic():
        # The lock is held only for this read-decide-write instant, never across the call.
        row = ToolExecution.objects.select_for_update().get(idempotency_key=key)
        if row.status == LedgerStatus.SUCCEEDED:
            return ToolOutcome(kind=OutcomeKind.OK, result=row.result, from_ledger=True)
        if row.status == LedgerStatus.FAILED_FINAL:
            permission = (row.error or {}).get("layer") == "permission"
            kind = OutcomeKind.PERMISSION if permission else OutcomeKind.BUSINESS
            return ToolOutcome(kind=kind, error=row.error, from_ledger=True)
        if row.status == LedgerStatus.UNCERTAIN:
            uncertain = True
        elif row.status == LedgerStatus.IN_PROGRESS and row.claimed_by != owner and (
            row.claimed_until and row.claimed_until > now
        ):
            return ToolOutcome(kind=OutcomeKind.PROCESSING, from_ledger=True)
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
            return None
    return settle_with_status_query(call)


def _record(call: ToolCall, owner: str, outcome: ToolOutcome) -> None:
    status = {
        OutcomeKind.OK: LedgerStatus.SUCCEEDED,
        OutcomeKind.BUSINESS: LedgerStatus.FAILED_FINAL,
        OutcomeKind.PERMISSION: LedgerStatus.FAILED_FINAL,
        OutcomeKind.TRANSIENT: LedgerStatus.FAILED_RETRYABLE,
        OutcomeKind.UNCERTAIN: LedgerStatus.UNCERTAIN,
    }[outcome.kind]
    error = dict(outcome.error or {}) or None
    if error is not None and outcome.kind in FINAL_KINDS:
        error["layer"] = FINAL_KINDS[outcome.kind]
    with transaction.atomic():
        key = call.context.idempotency_key
        row = ToolExecution.objects.select_for_update().get(idempotency_key=key)
        attempts = list(row.attempts)
        if attempts:
            attempts[-1] = {**attempts[-1], "outcome": outcome.kind.value, "ms": outcome.latency_ms,
                            "error": error}
        row.attempts = attempts
        if row.claimed_by != owner or row.status == LedgerStatus.SUCCEEDED:
            # Someone else owns the key now (our claim expired): keep the attempt for
            # audit, but the ledger's verdict is theirs.
            row.save(update_fields=["attempts", "updated_at"])
            return
        row.status, row.result, row.error = status, outcome.result, error
        row.claimed_by, row.claimed_until = "", None
        row.save()


def _settle(row: ToolExecution, status: str, *, result: Any = None, error: Any = None,
            answer: Any = None) -> None:
    row.status, row.result, row.error, row.status_answer = status, result, error, answer
    row.claimed_by, row.claimed_until = "", None
    row.save()
