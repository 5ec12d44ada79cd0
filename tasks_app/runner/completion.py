"""Completion checks, as the runner runs them: a final answer is accepted only
when every check of the profile (`services.completion_checks`) says it passes.

A final answer of an agent with checks is not committed at once: it is
recorded as the call of the first check (`record_checked`), a tool step like
any other (the ledger, retries of transient errors, breakers, the budgets),
its decision carrying the answer (`check`: which check, which attempt, the
answer, the checks passed so far). When the check's step has settled, the
next step of the task is its verdict (`after_check`), recorded without asking
the model:

- it passed and checks are left: the next check's call;
- it passed and it was the last: the final answer, with the checks it passed;
- it failed (`{"pass": false}`, an error answer, an answer of another shape,
  arguments that cannot be built from the answer): the answer is not accepted,
  the reason goes back to the model as the step's error (`record_invalid`),
  and the model answers again. The `max_completion_attempts`-th refused answer
  ends the task as its profile's `on_exhaustion` says (`completion_checks`).

A check that cannot be reached is retried like any read (its tool's
`max_retries`); when those run out the task ends as `on_exhaustion` says
(`retries_exhausted`): a check nobody could ask is never a pass. A check whose
tool is no longer a read Tether may call on its own (disabled, made a write,
an MCP tool waiting for an admin's confirmation again) is not called: the task
ends as `on_exhaustion` says (`completion_checks`), since another answer of
the model cannot change that. Every verdict is a `completion_check` event on
the task's timeline.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from django.db import transaction
from django.utils import timezone

from foundations.actors import Actor
from foundations.expressions import ExpressionError
from tools_app.executor.jsonsafe import storable
from tools_app.executor.types import ToolSpec
from tools_app.registry import tool_specs

from ..gateway import Decision
from ..models import Step, StepKind, StepStatus
from ..payloads import resolve_steps
from ..services.completion_checks import DEFAULT_ATTEMPTS, check_args, unaskable, verdict_of
from ..snapshot import TaskSnapshot
from ..store.commits import commit_recorded
from ..store.events import event_append
from .recording import Decided, Deferred, final_errors, record_decision, record_invalid
from .results import STOP, Spent, Stale, StepResult
from .stopping import exhaustion

NOT_ACCEPTED = "completion_check_failed"  # the error type of a refused answer's step
UNASKABLE = "completion_check_unavailable"  # a check that could not be called at all


def checks_of(snap: TaskSnapshot) -> list[dict[str, Any]]:
    return list(snap.agent.get("completion_checks") or [])


def record_checked(snap: TaskSnapshot, decision: Decision, model_log: dict[str, Any],
                   spent: Spent, specs: dict[str, ToolSpec], *, owner: str,
                   actor: Actor, defer_approval: bool = False) -> StepResult | Decided | Deferred:
    """`record_decision`, except for a final answer that must pass the profile's
    checks first: the first check's call is recorded instead (with the model
    call that gave the answer). An answer that fails the result schema is
    refused as usual, unchecked."""
    if (decision.kind != "final" or decision.check is not None or not checks_of(snap)
            or final_errors(snap, decision)):
        return record_decision(snap, decision, model_log, spent, specs, owner=owner,
                               actor=actor, defer_approval=defer_approval)
    attempt = _answers_refused(snap) + 1
    return _check(snap, decision, index=0, attempt=attempt, passed=[], model_log=model_log,
                  spent=spent, specs=specs, owner=owner, actor=actor)


def finished_check(step: Step | None) -> Step | None:
    """`step`, when it is a completion check's call that has settled."""
    if step is None or step.kind != StepKind.TOOL or not (step.decision or {}).get("check"):
        return None
    return step if step.status in (StepStatus.SUCCEEDED, StepStatus.FAILED) else None


def after_check(snap: TaskSnapshot, step: Step, specs: dict[str, ToolSpec], *, owner: str,
                actor: Actor) -> StepResult | Decided | Deferred:
    """The verdict of a settled check and what follows it (a database phase; no
    model call: nothing is charged)."""
    marker = dict(step.decision["check"])
    index, attempt = int(marker["index"]), int(marker["attempt"])
    checks = checks_of(snap)
    resolve_steps(snap.id, [step])  # an output stored out of row
    verdict = verdict_of(step.output, step.error)
    answer = Decision(kind="final", result=marker.get("answer"),
                      confidence=marker.get("confidence"))
    seen = {"step_no": step.step_no, "tool": step.tool, "passed": verdict.passed,
            "reason": verdict.reason}
    passed = [*marker.get("passed", []), seen]
    model_log = {"from_check_of_step": step.step_no}
    with transaction.atomic():
        event_append(task_id=snap.id, tenant_id=snap.tenant_id, trace_id=snap.trace_id,
                     task_version=snap.version, type="completion_check", actor=actor,
                     payload={**seen, "check": index + 1, "of": len(checks),
                              "attempt": attempt})
        if not verdict.passed:
            return _not_accepted(snap, answer, tool=step.tool, reason=verdict.reason,
                                 attempt=attempt, model_log=model_log, spent=Spent(),
                                 actor=actor)
        if index + 1 < len(checks):
            return _check(snap, answer, index=index + 1, attempt=attempt, passed=passed,
                          model_log=model_log, spent=Spent(), specs=specs, owner=owner,
                          actor=actor)
        accepted = replace(answer, check={"attempt": attempt, "passed": passed})
        return record_decision(snap, accepted, model_log, Spent(), specs, owner=owner,
                               actor=actor)


def _check(snap: TaskSnapshot, answer: Decision, *, index: int, attempt: int,
           passed: list[dict[str, Any]], model_log: dict[str, Any], spent: Spent,
           specs: dict[str, ToolSpec], owner: str,
           actor: Actor) -> StepResult | Decided | Deferred:
    """Record the call of check `index` of this answer."""
    checks = checks_of(snap)
    check = checks[index]
    tool = str(check.get("tool"))
    try:
        args = check_args(check, answer=answer.result, inputs=snap.input)
    except ExpressionError as exc:  # the answer lacks what the check needs
        return _not_accepted(snap, answer, tool=tool, attempt=attempt, model_log=model_log,
                             spent=spent, actor=actor,
                             reason=f"its arguments could not be built from the answer: {exc}")
    call = Decision(
        kind="tool_call", tool=tool, args=args,
        reason=f"Tether checks the final answer: check {index + 1} of {len(checks)} ({tool}), "
               f"answer {attempt}",
        check=storable({"index": index, "attempt": attempt, "answer": answer.result,
                        "confidence": answer.confidence, "passed": passed}))
    with_checks = {**specs, **tool_specs(tenant_id=snap.tenant_id, names=[tool])}
    why = unaskable(with_checks.get(tool))
    if why is not None:
        return _refused_for_good(snap, answer, model_log=model_log, spent=spent, actor=actor,
                                 error={"type": UNASKABLE, "check": tool, "attempt": attempt,
                                        "message": f"the completion check {tool} cannot be "
                                                   f"asked: {why}"})
    return record_decision(snap, call, model_log, spent, with_checks, owner=owner, actor=actor)


def _not_accepted(snap: TaskSnapshot, answer: Decision, *, tool: str, reason: str,
                  attempt: int, model_log: dict[str, Any], spent: Spent,
                  actor: Actor) -> StepResult:
    """The answer failed a check: fed back to the model, or, its attempts used
    up, the task ends as `on_exhaustion` says."""
    most = int(snap.agent.get("max_completion_attempts") or DEFAULT_ATTEMPTS)
    error = {"type": NOT_ACCEPTED,
             "message": f"your final answer was not accepted: the completion check {tool} "
                        f"failed: {reason or 'no reason given'}",
             "check": tool, "reason": reason, "attempt": attempt, "max_attempts": most}
    if attempt < most:
        return record_invalid(snap, answer, model_log, spent, actor, error)
    return _refused_for_good(snap, answer, error=error, model_log=model_log, spent=spent,
                             actor=actor)


def _refused_for_good(snap: TaskSnapshot, answer: Decision, *, error: dict[str, Any],
                      model_log: dict[str, Any], spent: Spent, actor: Actor) -> StepResult:
    """The answer is not accepted and the model is not asked again: its step, and
    the task's end as `on_exhaustion` says."""
    stop = exhaustion(snap, "completion_checks", detail=error, step_no=snap.steps_count + 1)
    if commit_recorded(
            snap, step={"kind": StepKind.INVALID, "status": StepStatus.FAILED,
                        "decision": answer.as_dict(), "model_log": model_log, "error": error,
                        "finished_at": timezone.now()},
            event=stop.event, transition=True, payload=stop.payload, set=stop.fields,
            actor=actor, model_calls=spent.model_calls, tokens=spent.tokens,
            bill=spent.bill) is None:
        raise Stale()
    return STOP


def _answers_refused(snap: TaskSnapshot) -> int:
    """The task's final answers its checks refused so far."""
    return Step.objects.filter(task_id=snap.id, kind=StepKind.INVALID,
                               error__type=NOT_ACCEPTED).count()
