"""Deciding a step: what the task needs next, and asking the model for it.

`plan_step` (a database phase) reads the task, or trusts what the slice's
previous step left (`memo`), checks the deadline, no progress and the budgets,
and says what comes next:

- a `StepResult` (the task stopped, or comes back later: a backoff);
- `Resume`: the current tool step is still open (resumed or retried): run it;
- `Ask`: the model must be asked, with this context (and the tenant's keys
  and the primary endpoint's breaker admission, read here, where the ORM may
  run); the slice awaits `ask_model` on the I/O loop, holding no thread (the
  model's circuit breakers, `ModelGuard`, hand any further database work to
  the slice's hop), then records what it said (its
  cost, `services.spend`, committed with it);
- `Decided`: the decision cost no call (the scripted backend, or the next
  decision queued from a multi-call reply): it was asked and recorded in this
  same phase.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

from django.utils import timezone

from accounts_app.vault.lookup import model_keys
from accounts_app.vault.values import Resolved
from foundations.actors import Actor
from tools_app.breakers import Admission
from tools_app.executor.types import ToolSpec

from ..context.builder import ContextSources, build_context, gather
from ..context.summaries import summary_maybe_create
from ..gateway import (
    ContextSnapshot,
    Decision,
    GatewayError,
    ModelRefused,
    ModelReply,
    OpenSteps,
    get_backend,
    is_instant,
)
from ..live.tokens import LiveTokens
from ..machine import TaskStatus
from ..models import Step, StepKind, StepStatus, Task
from ..services.children import specs_for
from ..services.spend import priced_reply
from ..snapshot import TaskSnapshot
from .backoff import backoff_s, model_failure_count
from .breaker_waits import ModelGuard, model_admit_ahead, model_wait, summary_guard
from .budgets import exhausted_budget, past_deadline
from .completion import after_check, finished_check, record_checked
from .executing import Admitted, Answered, ready_call
from .memo import SliceMemo
from .progress import stalled
from .rate_waits import ModelLimits
from .rate_waits import model_wait as rate_limit_wait
from .recording import Decided, Deferred, in_a_reply
from .refusals import refusals_noted, refused_to_person
from .reply_calls import agent_runs_together, open_calls, wait_for_approvals
from .results import STOP, Next, Spent, StepResult
from .review import accept_reviewed, accepted_final
from .stopping import exhaust, fail

SCRIPTED = "scripted"


@dataclass(frozen=True)
class Resume:
    """The current tool step is open: run it (again)."""

    snap: TaskSnapshot
    step: Step


@dataclass(frozen=True)
class ResumeMany:
    """Several tool steps are open (a wave's calls, `waves`): run them together."""

    snap: TaskSnapshot
    steps: list[Step]


@dataclass(frozen=True)
class Ask:
    """The model must be asked; then `record_reply`."""

    snap: TaskSnapshot
    context: ContextSnapshot
    keys: Resolved
    specs: dict[str, ToolSpec]
    sources: ContextSources
    admitted: dict[str, Admission] = field(default_factory=dict)  # `model_admit_ahead`'s


@dataclass(frozen=True)
class Recorded:
    """A decision committed: what the step does next (`Decided`: run the tool,
    already admitted or told to wait, `admitted`: `executing.ready_call`), and
    what the summary check after the step needs."""

    result: StepResult | Decided | Deferred
    admitted: StepResult | Admitted | Answered | None
    snap: TaskSnapshot
    sources: ContextSources | None


def backend_of(snap: TaskSnapshot) -> str:
    return str((snap.agent.get("model") or {}).get("backend", SCRIPTED))


def plan_step(*, task_id: int, owner: str,
              memo: SliceMemo) -> StepResult | Resume | ResumeMany | Ask | Recorded:
    """What the task's next step is (a database phase; see the module docstring):
    the task as it stands, then its open work, then its limits, then a decision."""
    found = _task_now(task_id, memo)
    if found is None:
        return STOP
    snap, current = found
    memo.snap = None  # set again only by a step that knows exactly what it committed
    actor = Actor.worker(owner)
    now = timezone.now()
    if past_deadline(snap, now):
        return exhaust(snap, "deadline", actor)
    queued = list((current.model_log or {}).get("queued") or []) if current is not None else []
    opened = _open_work(snap, current, queued, now, actor)
    if opened is not None:
        return opened
    if (reviewed := accepted_final(current)) is not None:  # a reviewer accepted it
        return accept_reviewed(snap, reviewed, actor)
    if stalled(snap):
        return exhaust(snap, "no_progress", actor, detail={"signal": "no_new_observation"})
    checked = None if queued else finished_check(current)  # its verdict is the next step
    budget = exhausted_budget(snap, now, asking_model=not queued and checked is None)
    if budget is not None:
        return exhaust(snap, budget, actor)
    if memo.specs is None:
        # the registry's tools, and the agents it may call (`agent:<name>`)
        memo.specs = specs_for(tenant_id=snap.tenant_id,
                               names=list(snap.agent.get("tools") or []))
    specs = memo.specs
    if queued:
        decision = Decision.from_dict(queued[0])
        model_log = {"from_reply_of_step": current.step_no, "queued": queued[1:]}  # type: ignore[union-attr]
        return record_reply(snap, decision, model_log, Spent(), specs, None, owner=owner,
                            memo=memo, free=True)
    if checked is not None:
        verdict = after_check(snap, checked, specs, owner=owner, actor=actor)
        if isinstance(verdict, StepResult | Deferred):  # a check's call needs no approval
            return verdict if isinstance(verdict, StepResult) else Recorded(
                verdict, None, snap, None)
        return Recorded(verdict, ready_call(verdict, owner=owner, actor=actor, memo=memo),
                        snap, None)
    return _decide(snap, specs, owner=owner, memo=memo)


def _task_now(task_id: int, memo: SliceMemo) -> tuple[TaskSnapshot, Step | None] | None:
    """The task and its latest step: what the slice's previous step left, while
    that is still valid, else read (the task with the lease, if it was just
    read); None when the task no longer runs."""
    leased, memo.leased = memo.leased, None  # read with the lease, just now: once
    if memo.still_valid(task_id):
        assert memo.snap is not None
        return memo.snap, memo.current
    task = leased if leased is not None else Task.objects.filter(pk=task_id).first()
    if task is None or task.status != TaskStatus.RUNNING:
        return None
    snap = TaskSnapshot.of(task)
    current = (
        Step.objects.filter(task_id=task_id, step_no=snap.steps_count).first()
        if snap.steps_count
        else None
    )
    return snap, current


def _open_work(snap: TaskSnapshot, current: Step | None, queued: list[Any], now: Any,
               actor: Actor) -> StepResult | Resume | ResumeMany | None:
    """Work already open comes first: a reply's calls (all settled, every card
    decided, before anything new is decided), or the latest tool step."""
    is_open = current is not None and current.kind == StepKind.TOOL and current.status in (
        StepStatus.RUNNING, StepStatus.RETRYING, StepStatus.UNCERTAIN)
    if agent_runs_together(snap) and current is not None and (
            is_open or (not queued and in_a_reply(current.model_log or {}))):
        # a reply's calls: resumed together after a crash or a backoff
        opened = open_calls(snap.id)
        if len(opened.resumable) > 1 or (opened.resumable and not is_open):
            return ResumeMany(snap, opened.resumable)
        if opened.awaiting and not is_open:
            return wait_for_approvals(snap, opened.awaiting, actor)
    if is_open and current is not None and (
            not snap.agent.get("parallel_calls")  # a workflow names its open steps
            or (current.decision or {}).get("check")):  # a completion check: always here
        # the task's latest step, alone open: resumed as it always was
        if current.next_attempt_at and current.next_attempt_at > now:
            return StepResult(Next.LATER, (current.next_attempt_at - now).total_seconds(),
                              "backoff")
        return Resume(snap, current)
    return None


def _decide(snap: TaskSnapshot, specs: dict[str, ToolSpec], *, owner: str,
            memo: SliceMemo) -> StepResult | ResumeMany | Ask | Recorded:
    """Ask the model, with the context built from the slice's sources: an
    `Ask` to await on the I/O loop, or, from an instant backend, the decision
    recorded in this same phase."""
    sources = memo.sources or gather(snap.id, human_facts=memo.human_facts,
                                     steps_count=snap.steps_count, retry=snap.is_retry)
    memo.sources, memo.human_facts = sources, sources.human_facts
    memo.output_hashes.update({s.step_no: s.output_hash for s in sources.recent})
    context = build_context(snap, tools=specs, sources=sources)
    if memo.keys is None:
        memo.keys = model_keys(tenant_id=snap.tenant_id, model=snap.agent.get("model") or {})
    keys = memo.keys
    if not is_instant(backend_of(snap)):
        return Ask(snap, context, keys, specs, sources,
                   admitted=model_admit_ahead(snap, owner=owner))
    ask = Ask(snap, context, keys, specs, sources)
    # An instant backend (the scripted one, a workflow's orchestrator) answers at
    # once, from the context or the database: no I/O to await.
    started = time.monotonic()
    try:
        reply = get_backend(snap.agent.get("model") or {}, keys).decide(context)
    except OpenSteps as exc:
        return ResumeMany(snap, list(Step.objects.filter(task_id=snap.id,
                                                         step_no__in=exc.step_nos)))
    except GatewayError as exc:
        return model_failed(snap, exc)
    return record_model_reply(ask, completed(reply, context, started), owner=owner, memo=memo)


async def ask_model(ask: Ask, guard: ModelGuard,
                    limits: ModelLimits | None = None) -> ModelReply | GatewayError:
    """Ask the task's model, awaited on the I/O loop (no database here but the
    breakers', which `guard` hands to a database thread; `limits`, the rate
    limits, are kept in Redis). A streamed reply's tokens go live to the task's
    watchers (`live.tokens`) as they arrive; the decision is recorded after."""
    started = time.monotonic()
    tokens = LiveTokens(task_id=ask.snap.id, step_no=ask.snap.steps_count + 1,
                        model_calls_so_far=ask.context.model_calls_so_far)
    try:
        backend = get_backend(ask.snap.agent.get("model") or {}, ask.keys, guard, limits,
                              tokens)
        reply = await backend.adecide(ask.context)
    except GatewayError as exc:
        return exc
    return completed(reply, ask.context, started)


def completed(reply: ModelReply, context: ContextSnapshot, started: float) -> ModelReply:
    if not reply.latency_ms:
        reply = ModelReply(**{**reply.__dict__,
                              "latency_ms": int((time.monotonic() - started) * 1000)})
    if not reply.input_summary:
        reply = ModelReply(**{**reply.__dict__,
                              "input_summary": f"{context.size_chars()} chars of context"})
    return reply


def model_failed(snap: TaskSnapshot, exc: GatewayError, guard: ModelGuard | None = None,
                 limits: ModelLimits | None = None) -> StepResult:
    """The model could not answer: come back later, or fail the task (a
    database phase)."""
    if exc.calls:
        Spent(model_calls=exc.calls).charge(snap.id)  # every request sent counts
    if isinstance(exc, ModelRefused):  # no model would answer: a person decides
        return refused_to_person(snap, exc)
    if exc.rate_limited and limits is not None and limits.waits:  # its slot is ahead
        return StepResult(Next.LATER, rate_limit_wait(snap, limits), "waiting for rate limit")
    if exc.held and guard is not None:  # a breaker is open: wait for it, no retry spent
        return StepResult(Next.LATER, model_wait(snap, guard, exc.retry_after_s or 0.0),
                          f"model: {exc}")
    if exc.retryable:
        # The backoff grows with the failures in a row, counted on the task.
        attempt = model_failure_count(snap)
        return StepResult(Next.LATER, backoff_s(attempt, exc.retry_after_s, full_jitter=True),
                          f"model: {exc}")
    return fail(snap, "model_unavailable", Actor.worker("gateway"), detail={"message": str(exc)})


def record_model_reply(ask: Ask, reply: ModelReply, *, owner: str,
                       memo: SliceMemo) -> Recorded:
    """Record what the model said (a database phase), with its cost."""
    charged = priced_reply(task_id=ask.snap.id, tenant_id=ask.snap.tenant_id,
                           agent=ask.snap.agent, reply=reply,
                           evaluation_run=ask.snap.shadow_of is not None)
    snap = replace(ask.snap, cost_pico=ask.snap.cost_pico + charged.cost_pico)
    decision = reply.decisions[0] if reply.decisions else Decision(
        kind="invalid", raw=reply.raw, error="the model returned no decision")
    model_log: dict[str, Any] = {
        "backend": backend_of(snap),
        "model": reply.model, "latency_ms": reply.latency_ms, "tokens": reply.tokens,
        "input_summary": reply.input_summary, "raw": reply.raw[:8000],
        "used_fallback": reply.used_fallback, "attempts": reply.attempts,
        "queued": [d.as_dict() for d in reply.decisions[1:]],
        **charged.model_log,
    }
    if reply.refusals:  # replies refused before this one (`refusals`)
        model_log["refusals"] = list(reply.refusals)
        refusals_noted(snap, reply.refusals)
    if ask.context.memory:  # the memory items the model was shown (`context.sources`)
        model_log["memory_shown"] = [item.id for item in ask.context.memory]
    # every request sent counts: the failed attempts before the reply too
    spent = Spent(model_calls=max(1, reply.attempts), tokens=reply.tokens, bill=charged.bill)
    return record_reply(snap, decision, model_log, spent,
                        ask.specs, ask.sources, owner=owner, memo=memo,
                        free=is_instant(backend_of(snap)))


def record_reply(snap: TaskSnapshot, decision: Decision, model_log: dict[str, Any],
                 spent: Spent, specs: dict[str, ToolSpec], sources: ContextSources | None, *,
                 owner: str, memo: SliceMemo, free: bool) -> Recorded:
    defer = agent_runs_together(snap) and in_a_reply(model_log)
    try:
        recorded = record_checked(snap, decision, model_log, spent, specs, owner=owner,
                                  actor=Actor.worker(owner), defer_approval=defer)
    except Exception:
        if not free:
            # The model was asked but the decision did not commit: the call counts
            # all the same. (The scripted backend's n-th entry answers the n-th
            # counted call, and costs nothing: it is asked again.)
            spent.charge(snap.id)
        raise
    if isinstance(recorded, StepResult | Deferred):
        after_step(snap, sources, memo, owner=owner)
        return Recorded(recorded, None, snap, sources)
    admitted = ready_call(recorded, owner=owner, actor=Actor.worker(owner), memo=memo)
    return Recorded(recorded, admitted, snap, sources)


def after_step(snap: TaskSnapshot, sources: ContextSources | None, memo: SliceMemo, *,
               owner: str) -> None:
    """After the step committed (in its last phase); never raises. With the
    sources the context was built from, most steps need no query to know no
    summary is due. A summary's model call goes through the model's breakers
    and rate limits."""
    summary = summary_maybe_create(task_id=snap.id, steps_count=snap.steps_count + 1,
                                   sources=sources, guard=summary_guard(snap, owner=owner),
                                   limiter=ModelLimits(snap))
    if summary is not None and memo.sources is not None:
        memo.sources = memo.sources.on_summary(summary)  # the context starts from it
