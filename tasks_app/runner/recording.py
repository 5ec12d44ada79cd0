"""Recording a decision, of each kind, before anything runs.

A decision commits with its step, its counters (`Spent`) and its event in one
transaction, or not at all: an invalid decision (recorded and fed back to the
model), a question (the task waits for input), a final answer (validated
against the result schema, then the task ends), a tool call refused (a budget,
no progress: the task fails or escalates), a tool call that needs approval
(the task waits), or a tool call that runs next: its step and ledger claim in
one statement (`store.commits.commit_decision`), returned as `Decided`.

A `read_source` decision reads an original back (`context.originals`): a
step of its own, the task goes on.

Kinds another app handles (`remember`: memory_app) are registered from its
`AppConfig.ready` (`register_decision_kind`): the runner records their step and
counters; the handler checks the decision and writes what it does, in the same
transaction. Such a decision never changes the task's status.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from approvals_app import policy as approval_policy
from approvals_app.gates import DEFAULT, Gate
from approvals_app.services import opening
from foundations.actors import Actor
from foundations.logs import bind_log
from tools_app.executor import ledger
from tools_app.executor.jsonsafe import has_unstorable, storable, storable_text
from tools_app.executor.types import ToolSpec
from tools_app.schemas import schema_errors

from ..context.originals import read_source
from ..gateway import Decision
from ..keys import call_fingerprint, canonical_json, sha256_hex
from ..models import Step, StepKind, StepStatus
from ..retries.lineage import lineage_key
from ..snapshot import TaskSnapshot
from ..store.commits import commit_decision, commit_final, commit_recorded
from ..store.writes import Committed
from . import shadow
from .memo import SliceMemo
from .policy import below_confidence, check_tool_call
from .progress import repeats_too_often
from .results import CONTINUE, STOP, Spent, Stale, StepResult
from .stopping import exhaustion, failure_snapshot


def _record(snap: TaskSnapshot, spent: Spent, actor: Actor, *, kind: str, status: str,
            decision: Decision, model_log: dict[str, Any], event: str | None,
            payload: dict[str, Any] | None = None, transition: bool = False,
            set: dict[str, Any] | None = None, key: tuple[str, dict[str, Any]] | str | None = None,
            then: Callable[[Step | None, int], None] | None = None,
            **step: Any) -> Committed:
    """The decision's commit (`store.commits.commit_recorded`): its step of
    `kind` and `status`, the counters and spend of `spent`, the event and, with
    `transition`, the task's move. Stale when the task moved on."""
    done = commit_recorded(
        snap, step={"kind": kind, "status": status, "decision": decision.as_dict(),
                    "model_log": model_log, **step},
        event=event, actor=actor, payload=payload, transition=transition, set=set,
        model_calls=spent.model_calls, tokens=spent.tokens, bill=spent.bill, key=key, then=then)
    if done is None:
        raise Stale()
    return done


def _stale_steps(snap: TaskSnapshot, output_hash: str) -> dict[str, int]:
    """The no-progress count after a step whose output hashes to `output_hash`:
    the same output again within the window is no new observation."""
    is_new = not seen_recently(snap, snap.steps_count + 1, output_hash)
    return {"stale_steps": 0 if is_new else snap.stale_steps + 1}


def call_spec(spec: ToolSpec | None, decision: dict[str, Any]) -> ToolSpec | None:
    """The tool as this call runs it: a workflow node's `timeout_s` narrows the
    tool's own timeout (never widens it)."""
    limit = ((decision or {}).get("workflow") or {}).get("timeout_s")
    if spec is None or not limit or limit >= spec.timeout_s:
        return spec
    return replace(spec, timeout_s=float(limit))


@dataclass(frozen=True)
class KindHandler:
    """A kind of decision another app handles. `check(snap, decision)`: the
    errors that make it invalid (fed back to the model; empty: valid).
    `record(snap, step_no, decision, actor)`: what it does, in the decision's
    transaction (the task's version is checked after it: a stale task rolls it
    back); returns the step's output, which the model sees as the call's result."""

    check: Callable[[TaskSnapshot, Decision], list[str]]
    record: Callable[[TaskSnapshot, int, Decision, Actor], dict[str, Any]]


_handlers: dict[str, KindHandler] = {}
HANDLED_KINDS = frozenset({"remember"})


def register_decision_kind(kind: str, handler: KindHandler) -> None:
    if kind not in HANDLED_KINDS:
        raise ValueError(f"{kind!r} is not a decision kind another app may handle")
    _handlers[kind] = handler


@dataclass(frozen=True)
class Decided:
    """A tool call whose decision (and ledger claim) committed: it runs next."""

    snap: TaskSnapshot
    step: Step
    spec: ToolSpec
    claim: ledger.Claim | None


@dataclass(frozen=True)
class Deferred:
    """A call of a multi-call reply that needs a person (`parallel_calls`): its
    step and approval card committed, the task still RUNNING, so the reply's
    other calls go on; the task waits once they are settled."""

    snap: TaskSnapshot
    step: Step


def in_a_reply(model_log: dict[str, Any]) -> bool:
    """Is the decision one of several calls of one model reply?"""
    return bool(model_log.get("queued")) or model_log.get("from_reply_of_step") is not None


def record_decision(
    snap: TaskSnapshot,
    decision: Decision,
    model_log: dict[str, Any],
    spent: Spent,
    specs: dict[str, ToolSpec],
    *,
    owner: str,
    actor: Actor,
    defer_approval: bool = False,
) -> StepResult | Decided | Deferred:
    """Commit the decision with its counters: in the same transaction as its step,
    or not at all. Each kind is recorded by its own function below. With
    `defer_approval` (a call of a reply whose calls run together), a call that
    needs approval gets its card without stopping the task (`Deferred`)."""
    bind_log(step_no=snap.steps_count + 1, step_kind=decision.kind)
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
        return record_invalid(snap, decision, model_log, spent, actor,
                        {"type": "invalid_decision", "message": decision.error,
                         "raw": decision.raw[:2000]})
    if decision.kind in HANDLED_KINDS:
        return _handled(snap, decision, model_log, spent, actor)
    if decision.kind == "read_source":
        return _read_source(snap, decision, model_log, spent, actor)
    if decision.kind == "ask_user":
        return _ask(snap, decision, model_log, spent, actor)
    if decision.kind == "fail":
        return _fail(snap, decision, model_log, spent, actor)
    if decision.kind == "final":
        return _final(snap, decision, model_log, spent, actor)
    return _tool_call(snap, decision, model_log, spent, specs, owner=owner, actor=actor,
                      defer_approval=defer_approval)


def _ask(snap: TaskSnapshot, decision: Decision, model_log: dict[str, Any], spent: Spent,
         actor: Actor) -> StepResult:
    """A question: the task waits for input (the question may expire)."""
    if snap.shadow_of is not None:
        return _ask_in_evaluation(snap, decision, model_log, spent, actor)
    expires = (timezone.now() + timedelta(seconds=decision.expires_in_s)
               if decision.expires_in_s else None)

    def question(step: Step | None, version: int) -> None:
        assert step is not None
        opening.question_open(task_id=snap.id, tenant_id=snap.tenant_id, step_id=step.pk,
                              question=decision.question, task_version=version,
                              expires_at=expires, on_expiry=decision.on_expiry)

    _record(snap, spent, actor, kind=StepKind.ASK, status=StepStatus.RUNNING, decision=decision,
            model_log=model_log, event="need_input", transition=True, then=question,
            payload={"step_no": snap.steps_count + 1, "question": decision.question})
    return STOP


def _ask_in_evaluation(snap: TaskSnapshot, decision: Decision, model_log: dict[str, Any],
                       spent: Spent, actor: Actor) -> StepResult:
    """An evaluation run's question (`shadow`): the recorded answer to the same
    question, and the task goes on; none recorded: the run stops, a person
    would have been needed."""
    answer = shadow.recorded_answer(snap, decision.question)
    now = timezone.now()
    if answer is None:
        error = {"type": shadow.NEEDS_A_PERSON, "question": decision.question,
                 "message": "the recorded task has no answer to this question"}
        _record(snap, spent, actor, kind=StepKind.ASK, status=StepStatus.FAILED,
                decision=decision, model_log=model_log, error=error, finished_at=now,
                event="fatal_error", transition=True,
                payload={"reason": shadow.NEEDS_A_PERSON, "step_no": snap.steps_count + 1},
                set={"failure_reason": shadow.NEEDS_A_PERSON,
                     "failure_detail": failure_snapshot(snap, error)})
        return STOP
    output = {"answer": answer, "from_record": True}
    _record(snap, spent, actor, kind=StepKind.ASK, status=StepStatus.SUCCEEDED,
            decision=decision, model_log=model_log, output=output,
            output_hash=sha256_hex(canonical_json(output)), finished_at=now, event=None,
            set={"stale_steps": 0})
    return CONTINUE


def _final(snap: TaskSnapshot, decision: Decision, model_log: dict[str, Any], spent: Spent,
           actor: Actor) -> StepResult:
    """A final answer: checked against the result schema, then the task ends."""
    errors = final_errors(snap, decision)
    if errors:
        return record_invalid(snap, decision, model_log, spent, actor,
                        {"type": "invalid_result",
                         "message": "the final result failed validation",
                         "errors": errors})
    if below_confidence(snap, decision):
        return _final_for_review(snap, decision, model_log, spent, actor)
    if not commit_final(snap, decision=decision.as_dict(), model_log=model_log,
                        result=decision.result, model_calls=spent.model_calls,
                        tokens=spent.tokens, actor=actor, bill=spent.bill):
        raise Stale()
    return STOP


def final_errors(snap: TaskSnapshot, decision: Decision) -> list[str]:
    """Why a final answer's result cannot be accepted as it is (its schema)."""
    if decision.result is None:
        return ["a final answer needs a result"]
    schema = snap.agent.get("result_schema") or {}
    return schema_errors(schema, decision.result) if schema else []


def _tool_call(snap: TaskSnapshot, decision: Decision, model_log: dict[str, Any],
               spent: Spent, specs: dict[str, ToolSpec], *, owner: str,
               actor: Actor, defer_approval: bool = False) -> StepResult | Decided | Deferred:
    """A tool call: refused (no progress, a budget), invalid, waiting for an
    approval, or decided: its step and ledger claim committed, it runs next."""
    spec = call_spec(specs.get(decision.tool), decision.as_dict())
    call_hash = call_fingerprint(decision.tool, decision.args)
    if repeats_too_often(snap, call_hash):
        return _refuse(snap, decision, model_log, spent, actor, reason="no_progress", error={
            "type": "no_progress", "signal": "repeated_call", "tool": decision.tool,
            "repeats": snap.repeat_count,
            "message": "the same call with the same arguments was already repeated too often"})
    # "Always allow" only matters for tools that need approval: skip the query otherwise.
    always = (opening.always_allowed_tools(task_id=snap.id)
              if spec is not None and spec.requires_approval else frozenset())
    gate = (approval_policy.gate_for(
        tenant_id=snap.tenant_id, task_id=snap.id, requester_id=snap.requester_id,
        agent=str(snap.agent.get("name") or ""), tool=decision.tool, risk=spec.risk,
        args=decision.args, api_key_id=snap.api_key_id) if spec is not None else DEFAULT)
    verdict = check_tool_call(decision, spec=spec, snap=snap, always_allowed=always, gate=gate)
    if verdict.verdict in ("invalid", "denied"):
        return record_invalid(snap, decision, model_log, spent, actor, verdict.error or {})
    if verdict.verdict == "budget":
        error = verdict.error or {}
        return _refuse(snap, decision, model_log, spent, actor,
                       reason=str(error.get("budget", "budget")), error=error, offer_again=True)
    assert spec is not None
    # A retried task's call the chain already made takes that call's key (None: a fresh key).
    reused = lineage_key(task_id=snap.id, key_lineage=snap.key_lineage,
                         step_no=snap.steps_count + 1, tool=decision.tool, args=decision.args)
    if verdict.verdict == "approve" and snap.shadow_of is not None:
        # an evaluation run: as the recorded task's reviewer decided the same call,
        # else counted (the call itself cannot have a real effect: `shadow`)
        decided = shadow.recorded_approval(snap, decision.tool, decision.args)
        if decided == "rejected":
            return record_invalid(snap, decision, model_log, spent, actor, {
                "type": "approval_rejected", "from_record": True,
                "message": "a reviewer rejected this call in the recorded task"})
        model_log = {**model_log, "evaluation": shadow.APPROVAL_AS_RECORDED if decided
                     else shadow.WOULD_NEED_APPROVAL}
    elif verdict.verdict in ("approve", "authorize"):
        if defer_approval and verdict.verdict == "approve":
            return _approval_deferred(snap, decision, model_log, spent, spec, reused, actor)
        return _needs_approval(snap, decision, model_log, spent, spec, reused, actor,
                               verdict.gate, held=verdict.error)
    # The step, its event and the ledger claim commit together, in one statement.
    # A cancel from now on is fenced when the outcome commits.
    committed = commit_decision(
        snap, decision=decision.as_dict(), model_log=model_log, tool=decision.tool,
        args=decision.args, reason=decision.reason, spec=spec, model_calls=spent.model_calls,
        tokens=spent.tokens, owner=owner, actor=actor, reused_key=reused, bill=spent.bill)
    if committed is None:
        raise Stale()
    return Decided(spent.applied_to(snap), committed.step, spec, committed.claim)


def _needs_approval(snap: TaskSnapshot, decision: Decision, model_log: dict[str, Any],
                    spent: Spent, spec: ToolSpec, reused: str | None,
                    actor: Actor, gate: Gate, held: dict[str, Any] | None = None) -> StepResult:
    """A call that needs a person's approval (or, outside its requester's scope,
    an authorization): its step waits, and so does the task. `held`: why, when
    not a rule or the tool's own (the model's low confidence)."""
    def approval(step: Step | None, version: int) -> None:
        # Opened before the event's hooks run (at the version the transition
        # made): they (notifications) find the request, and whom it is routed to.
        assert step is not None
        opening.approval_open(task_id=snap.id, tenant_id=snap.tenant_id, step_id=step.pk,
                              tool=decision.tool, args=decision.args, risk=spec.risk,
                              reason=decision.reason, cites=list(decision.cites),
                              task_version=version,
                              sla_s=int(snap.agent.get("approval_sla_s") or 0),
                              gate=gate, agent=str(snap.agent.get("name") or ""),
                              confidence=decision.confidence,
                              min_confidence=(held or {}).get("min_confidence"))

    _record(snap, spent, actor, kind=StepKind.TOOL, status=StepStatus.PENDING_APPROVAL,
            decision=decision, model_log=model_log, tool=decision.tool, args=decision.args,
            key=reused or (decision.tool, decision.args), event="need_approval",
            transition=True, then=approval,
            payload={"step_no": snap.steps_count + 1, "tool": decision.tool})
    return STOP


FINAL_REVIEW = "final_answer"  # the approval of a final answer held for review


def _final_for_review(snap: TaskSnapshot, decision: Decision, model_log: dict[str, Any],
                      spent: Spent, actor: Actor) -> StepResult:
    """A final answer the model is less sure of than the agent's `min_confidence`:
    its step waits for a reviewer, who accepts it (`runner.review`) or sends it
    back with a comment the model reads (rejected)."""
    result = decision.result
    shown = result if isinstance(result, dict) else {"answer": result}
    threshold = snap.agent.get("min_confidence")
    def approval(step: Step | None, version: int) -> None:
        assert step is not None
        opening.approval_open(task_id=snap.id, tenant_id=snap.tenant_id, step_id=step.pk,
                              tool=FINAL_REVIEW, args=shown, risk="medium",
                              reason=f"The model's confidence in this final answer "
                                     f"({decision.confidence:g}) is below the agent's "
                                     f"threshold ({threshold:g}).",
                              cites=list(decision.cites), task_version=version,
                              sla_s=int(snap.agent.get("approval_sla_s") or 0),
                              confidence=decision.confidence, min_confidence=threshold,
                              final=True)

    _record(snap, spent, actor, kind=StepKind.FINAL, status=StepStatus.PENDING_APPROVAL,
            decision=decision, model_log=model_log, args=shown, event="need_approval",
            transition=True, then=approval,
            payload={"step_no": snap.steps_count + 1, "tool": FINAL_REVIEW,
                     "confidence": decision.confidence})
    return STOP


def _approval_deferred(snap: TaskSnapshot, decision: Decision, model_log: dict[str, Any],
                       spent: Spent, spec: ToolSpec, reused: str | None,
                       actor: Actor) -> Deferred:
    """A reply's call that needs approval: its step waits with its own card; the
    task does not (yet): the reply's other calls run meanwhile, and the task
    waits for the cards once they are settled (`runner.replies`). The card is
    bound to its step and arguments: its siblings move the task's version."""
    def approval(step: Step | None, version: int) -> None:
        assert step is not None
        opening.approval_open(task_id=snap.id, tenant_id=snap.tenant_id, step_id=step.pk,
                              tool=decision.tool, args=decision.args, risk=spec.risk,
                              reason=decision.reason, cites=list(decision.cites),
                              task_version=version,
                              sla_s=int(snap.agent.get("approval_sla_s") or 0))

    done = _record(snap, spent, actor, kind=StepKind.TOOL, status=StepStatus.PENDING_APPROVAL,
                   decision=decision, model_log={**model_log, "parallel": True},
                   tool=decision.tool, args=decision.args,
                   key=reused or (decision.tool, decision.args), event="approval_requested",
                   then=approval,
                   payload={"step_no": snap.steps_count + 1, "tool": decision.tool})
    assert done.step is not None
    return Deferred(spent.applied_to(snap), done.step)


def record_invalid(snap: TaskSnapshot, decision: Decision, model_log: dict[str, Any],
             spent: Spent, actor: Actor, error: dict[str, Any]) -> StepResult:
    """An invalid decision is recorded and fed back to the model as the step's error.
    The same error again within the window is no new observation (no progress)."""
    error = storable(error)
    output_hash = sha256_hex(canonical_json(error))
    _record(snap, spent, actor, kind=StepKind.INVALID, status=StepStatus.FAILED,
            decision=decision, model_log=model_log, tool=decision.tool[:100],
            args=decision.args or None, error=error, output_hash=output_hash,
            finished_at=timezone.now(), event="invalid_decision",
            payload={"step_no": snap.steps_count + 1, "error": error},
            set=_stale_steps(snap, output_hash))
    return CONTINUE


def _handled(snap: TaskSnapshot, decision: Decision, model_log: dict[str, Any],
             spent: Spent, actor: Actor) -> StepResult:
    """A registered kind's decision (`KindHandler`): checked, then its step, the
    handler's writes and the task's counters in one transaction. The task goes on.
    The same content again within the window is no new observation (no progress)."""
    handler = _handlers.get(decision.kind)
    errors = (handler.check(snap, decision) if handler is not None
              else [f"{decision.kind} is not available here"])
    shown = replace(decision, tool=decision.kind, args=decision.memory or {})  # as the call
    if errors:
        return record_invalid(snap, shown, model_log, spent, actor,
                        {"type": f"invalid_{decision.kind}", "message": "; ".join(errors),
                         "errors": errors})
    assert handler is not None
    step_no = snap.steps_count + 1
    output_hash = sha256_hex(canonical_json(decision.as_dict()))
    with transaction.atomic():  # the handler's writes roll back with a stale commit
        # an evaluation run writes nothing a live task would see (`shadow`)
        output = (storable(handler.record(snap, step_no, decision, actor))
                  if snap.shadow_of is None else shadow.not_written(decision.kind))
        _record(snap, spent, actor, kind=StepKind.MEMORY, status=StepStatus.SUCCEEDED,
                decision=decision, model_log=model_log, output=output,
                output_hash=output_hash, finished_at=timezone.now(), event=None,
                set=_stale_steps(snap, output_hash))
    return CONTINUE


def _read_source(snap: TaskSnapshot, decision: Decision, model_log: dict[str, Any],
                 spent: Spent, actor: Actor) -> StepResult:
    """An original read back by its reference (`context.originals`): a step of its
    own (counted like any step), whose result the model sees next. A reference
    the task may not read is a failed step with a typed error, never an invalid
    decision: the model learns only that it cannot read it. Reading the same
    reference again within the window is no progress."""
    read = read_source(snap, decision.args.get("ref"))
    output_hash = sha256_hex(canonical_json(decision.as_dict()))
    _record(snap, spent, actor, kind=StepKind.READ, decision=decision, model_log=model_log,
            status=StepStatus.SUCCEEDED if read.error is None else StepStatus.FAILED,
            tool="read_source", args={"ref": decision.args.get("ref")},
            output=storable(read.output) if read.output is not None else None,
            error=read.error, output_hash=output_hash, finished_at=timezone.now(), event=None,
            set=_stale_steps(snap, output_hash))
    return CONTINUE


def _fail(snap: TaskSnapshot, decision: Decision, model_log: dict[str, Any],
          spent: Spent, actor: Actor) -> StepResult:
    """The decision maker says the task cannot succeed (a workflow's critical node
    failed): the step records why, the task fails (and its compensations run)."""
    error = storable({"type": "failed", "message": decision.error, "detail": decision.result})
    _record(snap, spent, actor, kind=StepKind.FINAL, status=StepStatus.FAILED, decision=decision,
            model_log=model_log, error=error, finished_at=timezone.now(), event="fatal_error",
            transition=True, payload={"reason": "workflow_failed", "detail": error},
            set={"failure_reason": "workflow_failed",
                 "failure_detail": failure_snapshot(snap, error)})
    return STOP


def seen_recently(snap: TaskSnapshot, step_no: int, output_hash: str,
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
            spent: Spent, actor: Actor, *, reason: str, error: dict[str, Any],
            offer_again: bool = False) -> StepResult:
    """A tool call the runner will not make (a budget is used up, or no progress):
    recorded as a failed step, so every decision has its step and the model sees
    why; then the task fails or escalates. With `offer_again` (a budget refusal)
    the decision is queued again, so a resume that extends the budget runs it."""
    if offer_again and snap.on_exhaustion == "escalate":
        model_log = {**model_log, "queued": [decision.as_dict(), *(model_log.get("queued") or [])]}
    stop = exhaustion(snap, reason, detail=error, step_no=snap.steps_count + 1)
    _record(snap, spent, actor, kind=StepKind.TOOL, status=StepStatus.FAILED, decision=decision,
            model_log=model_log, tool=decision.tool, args=decision.args, error=error,
            finished_at=timezone.now(), event=stop.event, transition=True,
            payload=stop.payload, set=stop.fields)
    return STOP
