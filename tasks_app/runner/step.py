"""Advance a task by one durable step: the step's coroutine.

One step (docs/explanation/runtime.md, "The loop"):
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

Who does what: `deciding` (1-3, and asking the model), `recording` (each kind
of decision), `executing` (5-6), `stopping` (deadline, budgets, failures).
This module strings them together: the database phases are handed to the
slice's `Hop` (`hops`), the model and the tool calls are awaited on the I/O
loop, so a step waiting on the network holds no thread. No transaction is
open while the model or a tool is called.

`advance_one_step` is the same step for a synchronous caller (the tests, the
manual runner): its phases run on the calling thread.
"""
from __future__ import annotations

import functools

from django.db import IntegrityError

from approvals_app.policy import reads_kept_in
from foundations.actors import Actor
from foundations.errors import DomainError, ErrorKind

from ..gateway import GatewayError
from .breaker_waits import ModelGuard
from .deciding import (
    Ask,
    Recorded,
    Resume,
    ResumeMany,
    after_step,
    ask_model,
    model_failed,
    plan_step,
    record_model_reply,
)
from .executing import execute
from .hops import CallerHop, Hop
from .memo import SliceMemo
from .rate_waits import ModelLimits
from .recording import Decided, Deferred
from .results import CONTINUE, STOP, Next, Spent, Stale, StepResult
from .waves import parallel, resume_wave, run_wave

__all__ = ["CONTINUE", "STOP", "Next", "Spent", "StepResult", "advance_one_step", "step"]


def advance_one_step(*, task_id: int, owner: str, memo: SliceMemo | None = None) -> StepResult:
    """One step, for a synchronous caller; `memo` carries what this slice's
    previous step left (see `memo`)."""
    hop = CallerHop()
    return hop.drive(step(task_id=task_id, owner=owner, memo=memo or SliceMemo(), hop=hop))


async def step(*, task_id: int, owner: str, memo: SliceMemo, hop: Hop) -> StepResult:
    """One step of the task whose lease `owner` holds, its phases run by `hop`;
    the approval policy reads through the slice's memo (`PolicyReads`)."""
    with reads_kept_in(memo.policy_reads):
        return await _step(task_id=task_id, owner=owner, memo=memo, hop=hop)


async def _step(*, task_id: int, owner: str, memo: SliceMemo, hop: Hop) -> StepResult:
    try:
        plan = await hop(plan_step, task_id=task_id, owner=owner, memo=memo)
        if isinstance(plan, StepResult):
            return plan
        if isinstance(plan, Resume):
            return await execute(plan.snap, plan.step, owner=owner, actor=Actor.worker(owner),
                                 memo=memo, hop=hop)
        if isinstance(plan, ResumeMany):
            return await resume_wave(plan.snap, plan.steps, owner=owner, memo=memo, hop=hop)
        if isinstance(plan, Ask):
            # the model's breakers (the primary's asked ahead, in `plan_step`)
            guard = ModelGuard(plan.snap, owner=owner, hop=hop, ahead=plan.admitted)
            limits = ModelLimits(plan.snap)  # and their rate limits
            # the slice's lease is kept alive meanwhile (`beats`)
            reply = await ask_model(plan, guard, limits)
            if isinstance(reply, GatewayError):
                return await hop(model_failed, plan.snap, reply, guard, limits)
            plan = await hop(record_model_reply, plan, reply, owner=owner, memo=memo)
        return await _after_recording(plan, owner=owner, memo=memo, hop=hop)
    except (Stale, IntegrityError):
        memo.forget()
        return CONTINUE  # somebody else committed this version: re-read and decide again
    except DomainError as exc:
        memo.forget()
        if exc.kind == ErrorKind.CONFLICT:
            return CONTINUE
        raise


async def _after_recording(recorded: Recorded, *, owner: str, memo: SliceMemo,
                           hop: Hop) -> StepResult:
    if isinstance(recorded.result, Deferred):
        memo.forget()  # a reply's card is open: the next step reads the task again
        return CONTINUE
    if not isinstance(recorded.result, Decided):
        return recorded.result  # the summary check ran in the recording phase
    decided = recorded.result
    if parallel(decided.snap) and (decided.step.model_log or {}).get("queued"):
        result = await run_wave(decided, recorded.admitted, owner=owner, memo=memo, hop=hop)
        if result.next is Next.CONTINUE:
            # the summary check, as after a lone step, once the reply's calls settled
            # (no sources: it reads what the calls committed)
            await hop(after_step, decided.snap, None, memo, owner=owner)
        return result
    return await execute(
        decided.snap, decided.step, owner=owner, actor=Actor.worker(owner), memo=memo, hop=hop,
        admitted=recorded.admitted,
        after=functools.partial(after_step, recorded.snap, recorded.sources, memo,
                                owner=owner))

