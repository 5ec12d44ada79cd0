"""The decisions people take: approve / edit and approve / reject / respond,
resolve a reconciliation, and the expiry of approvals past their SLA.

Each decision is one transaction: the permission check, the record, the step
update and the task transition (which writes the event with the actor, role,
reason and version) succeed or fail together. A decision on a stale view (the
task's version moved on) or on an already decided request is a 409.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from accounts_app.models import Role
from foundations.actors import SYSTEM, Actor
from foundations.errors import conflict, forbidden, invalid, not_found
from tasks_app.keys import idempotency_key
from tasks_app.machine import TaskStatus
from tasks_app.models import Step, StepKind, StepStatus, Task
from tasks_app.services.dispatch import schedule_advance_on_commit
from tasks_app.store.counters import task_tool_call_count
from tasks_app.store.events import event_append, event_note
from tasks_app.store.steps import step_move
from tasks_app.store.tasks import task_transition
from tools_app.executor.ledger import reopen_for_retry, settle_by_human, settle_with_status_query
from tools_app.executor.types import ToolCall, ToolContext
from tools_app.registry import tool_specs
from tools_app.schemas import schema_errors

from ..gates import AUTHORIZATION
from ..models import (
    Approval,
    Decision,
    DecisionChannel,
    OnExpiry,
    Question,
    QuestionStatus,
    Reconciliation,
    ReconciliationStatus,
)
from ..selectors import may_decide, pending_approval_locked
from .opening import args_hash

DECIDERS = {Role.REVIEWER, Role.ADMIN}


def _require_role(actor: Actor) -> None:
    if actor.role not in DECIDERS:
        raise forbidden("role_required", "only reviewers and admins take this decision")


def _check_version(task: Task, expected_version: int | None, shown_version: int) -> int:
    version = shown_version if expected_version is None else expected_version
    if task.version != version:
        raise conflict("stale_version",
                       "the task has moved on since this view was taken; look again",
                       expected_version=version, current_version=task.version, status=task.status)
    return version


def _diff(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    keys = sorted(set(before) | set(after))
    return {k: {"from": before.get(k), "to": after.get(k)}
            for k in keys if before.get(k) != after.get(k)}


@dataclass
class _Deciding:
    """What the prelude of a decision on an approval found, under its locks:
    the approval, its step and task, the version the decision is bound to,
    whether it is the task's last open card, and the event's payload."""

    approval: Approval
    step: Step
    task: Task
    version: int
    last: bool
    payload: dict[str, Any]
    now: datetime


def approval_decide(
    *,
    approval_id: int,
    tenant_id: int,
    actor: Actor,
    decision: Literal["approve", "reject", "respond"],
    comment: str = "",
    args: dict[str, Any] | None = None,
    output: Any = None,
    expected_version: int | None = None,
    always_allow: bool = False,
    channel: str = DecisionChannel.CONSOLE,
) -> Approval:
    """Approve (`args`: edited first), reject (with a `comment`) or respond
    (`output` stands in for the tool's result), in one transaction. `channel`:
    where the reviewer decided (console, api, email, slack), recorded on the
    approval and in the event's payload."""
    if decision not in ("approve", "reject", "respond"):
        raise invalid("invalid", "The request is not valid.",
                      decision=["approve, reject or respond"])
    _require_role(actor)
    with transaction.atomic():
        d = _prelude(approval_id=approval_id, tenant_id=tenant_id, actor=actor,
                     decision=decision, args=args, expected_version=expected_version,
                     comment=comment, channel=channel)
        if decision == "approve" and _needs_another(d.approval, actor, args):
            return _first_of_two(d, actor, comment)
        if decision == "approve":
            _approve(d, actor, args, always_allow)
        elif decision == "reject":
            _reject(d, actor, comment)
        else:
            _respond(d, actor, output)
        approval = d.approval
        approval.comment = comment
        approval.decided_by_id = actor.user_id
        approval.decided_role = actor.role
        approval.decided_at = d.now
        approval.channel = channel
        approval.save()
        if d.last:
            schedule_advance_on_commit(d.task.pk)
    return approval


def _prelude(*, approval_id: int, tenant_id: int, actor: Actor, decision: str,
             args: dict[str, Any] | None, expected_version: int | None, comment: str,
             channel: str) -> _Deciding:
    """Lock the pending approval (and, for a reply's card, the task), and refuse
    what may not be decided: the requester deciding on its own task, someone
    outside the request's group, a stale view, arguments that changed since
    they were shown."""
    approval = pending_approval_locked(approval_id=approval_id, tenant_id=tenant_id)
    step = Step.objects.get(pk=approval.step_id)
    of_a_reply = bool((step.model_log or {}).get("parallel"))
    # A reply's card locks the task's row, as the runner does before it waits
    # for the cards (`runner.reply_calls`): which decision is the last one is
    # decided under that lock.
    task = (Task.objects.select_for_update() if of_a_reply else Task.objects).get(
        pk=approval.task_id)
    snapshot = task.agent_snapshot or {}
    # Two approvals, or an authorization: never the requester, whatever the profile says.
    strict = approval.approvals_required > 1 or approval.kind == AUTHORIZATION
    if (task.requester_id is not None and task.requester_id == actor.user_id
            and (strict or not snapshot.get("allow_self_approval"))):
        raise forbidden("separation_of_duties",
                        "the requester of a task cannot decide on its actions")
    if not may_decide(approval, actor):
        raise forbidden("not_your_request", _who_decides(approval))
    if approval.kind == AUTHORIZATION and decision == "respond":
        raise invalid("invalid", "The request is not valid.",
                      decision=["an authorization is granted (approve) or refused (reject)"])
    if of_a_reply:
        # bound to its step and its arguments (checked below), not to the task's
        # version, which the reply's other calls and cards move while it is open
        version = task.version
        last = task.status == TaskStatus.WAITING_FOR_APPROVAL and not (
            Approval.objects.filter(task_id=task.pk, status=Decision.PENDING)
            .exclude(pk=approval.pk).exists())
    else:
        version = _check_version(task, expected_version, approval.task_version)
        last = True
    shown = approval.args_hash
    if args_hash(approval.args) != shown or args_hash(step.args or {}) != shown:
        # The approval is bound to the arguments it showed: if the action to run is
        # not the one the reviewer saw, nothing is decided.
        raise conflict("stale_arguments", "the action changed since it was shown; look again",
                       approval_id=approval.pk)
    if step.kind == StepKind.FINAL and (decision == "respond" or (
            args is not None and args != approval.args)):
        # a final answer held for review is accepted as shown, or sent back
        raise invalid("invalid", "The request is not valid.", decision=[
            "a final answer is accepted (approve) or sent back (reject)"])
    payload: dict[str, Any] = {"approval_id": approval.pk, "decision": decision,
                               "comment": comment, "step_no": step.step_no,
                               "tool": approval.tool, "seen_version": version,
                               "channel": channel}
    return _Deciding(approval, step, task, version, last, payload, timezone.now())


def _first_of_two(d: _Deciding, actor: Actor, comment: str) -> Approval:
    """The first of two approvals: recorded, attributed; the task keeps waiting."""
    approval, task = d.approval, d.task
    given = {"user_id": actor.user_id, "name": actor.name, "role": actor.role,
             "at": d.now.isoformat(), "comment": comment}
    approval.approvals_given = [*approval.approvals_given, given]
    approval.save(update_fields=["approvals_given"])
    event_append(task_id=task.pk, tenant_id=task.tenant_id, trace_id=task.trace_id,
                 task_version=task.version, type="approval_recorded", actor=actor,
                 payload={**d.payload, "approvals": len(approval.approvals_given),
                          "required": approval.approvals_required})
    return approval


def _approve(d: _Deciding, actor: Actor, args: dict[str, Any] | None,
             always_allow: bool) -> None:
    """The call runs, with the reviewer's edit of its arguments if any (a new
    idempotency key: a different call)."""
    approval, task = d.approval, d.task
    final_args = approval.args
    if args is not None:
        final_args = _validated_edit(task, approval.tool, args)
        if final_args != approval.args:
            approval.edited_args = final_args
            approval.args_diff = _diff(approval.args, final_args)
            d.payload["args_diff"] = approval.args_diff
    key = idempotency_key(task_id=task.pk, step_id=d.step.pk, tool=approval.tool,
                          args=final_args)
    _decided(task, "approval_granted", actor, d.version, d.payload, last=d.last)
    step_move(d.step.pk, StepStatus.RUNNING, args=final_args, idempotency_key=key)
    approval.status = Decision.APPROVED
    approval.always_allow = always_allow


def _reject(d: _Deciding, actor: Actor, comment: str) -> None:
    """The call does not run; the model is told why."""
    if not comment.strip():
        raise invalid("invalid", "The request is not valid.",
                      comment=["say why, so the agent can do better"])
    _decided(d.task, "approval_rejected", actor, d.version, d.payload, last=d.last)
    step_move(d.step.pk, StepStatus.REJECTED, finished_at=d.now,
              error={"type": "rejected", "message": "a reviewer rejected this call",
                     "comment": comment})
    d.approval.status = Decision.REJECTED


def _respond(d: _Deciding, actor: Actor, output: Any) -> None:
    """The reviewer's output stands in for the tool's result (the call counts)."""
    _validated_result(d.task, d.approval.tool, output)
    _decided(d.task, "approval_granted", actor, d.version, {**d.payload, "output": output},
             last=d.last, fields={"tool_calls": F("tool_calls") + 1})
    step_move(d.step.pk, StepStatus.SUCCEEDED, output=output, finished_at=d.now,
              model_log={**d.step.model_log, "responded_by": actor.name})
    d.approval.status = Decision.RESPONDED
    d.approval.response_output = output


def _decided(task: Task, event: str, actor: Actor, version: int, payload: dict[str, Any], *,
             last: bool, fields: dict[str, Any] | None = None) -> None:
    """The task runs again on the last decision of its cards; a reply's card
    decided before that (or while the reply's other calls still run) is
    recorded as an event, and the task waits on (its version does not move)."""
    if last:
        task_transition(task_id=task.pk, event=event, actor=actor, expected_version=version,
                        payload=payload, fields=fields)
        return
    if fields:  # a response stands in for the call: counted as one
        task_tool_call_count(task.pk)
    event_append(task_id=task.pk, tenant_id=task.tenant_id, trace_id=task.trace_id,
                 task_version=task.version, type="approval_decided", actor=actor,
                 payload=payload)


def _who_decides(approval: Approval) -> str:
    if approval.kind == AUTHORIZATION:
        return "an authorization is granted by an admin" + (
            " or a member of its group" if approval.group_id else "")
    if approval.assignee_id is not None:
        return "this request is assigned to another reviewer"
    return "only the members of this request's reviewer group decide on it"


def _needs_another(approval: Approval, actor: Actor, args: dict[str, Any] | None) -> bool:
    """An approve that is not yet the last one needed. Each approval is by another
    person; the arguments are approved as shown (an edit would be seen by one only)."""
    if approval.approvals_required <= 1:
        return False
    if any(g.get("user_id") == actor.user_id for g in approval.approvals_given):
        raise forbidden("second_approver_required",
                        "you already approved this call: it needs another reviewer")
    if args is not None and args != approval.args:
        raise invalid("invalid", "The request is not valid.", args=[
            "a call that needs several approvals is approved as shown; "
            "reject it with a comment to have the agent propose other arguments"])
    return len(approval.approvals_given) + 1 < approval.approvals_required


def _validated_edit(task: Task, tool: str, args: Any) -> dict[str, Any]:
    if not isinstance(args, dict):
        raise invalid("invalid", "The request is not valid.", args=["must be a JSON object"])
    if tool not in ((task.agent_snapshot or {}).get("tools") or []):
        raise invalid("invalid", "The request is not valid.", args=[f"{tool} is no longer allowed"])
    spec = tool_specs(tenant_id=task.tenant_id, names=[tool]).get(tool)
    if spec is None:
        raise invalid("invalid", "The request is not valid.", args=[f"tool {tool} is disabled"])
    errors = schema_errors(spec.args_schema, args)
    if errors:
        raise invalid("invalid", "The request is not valid.", args=errors)
    return args


def _validated_result(task: Task, tool: str, output: Any) -> None:
    if output is None:
        raise invalid("invalid", "The request is not valid.", output=["a response needs an output"])
    spec = tool_specs(tenant_id=task.tenant_id, names=[tool]).get(tool)
    if spec is not None and spec.result_schema:
        errors = schema_errors(spec.result_schema, output)
        if errors:
            raise invalid("invalid", "The request is not valid.", output=errors)


def reconciliation_resolve(
    *,
    reconciliation_id: int,
    tenant_id: int,
    actor: Actor,
    outcome: Literal["succeeded", "failed", "retry"],
    output: Any = None,
    comment: str = "",
    expected_version: int | None = None,
    channel: str = DecisionChannel.CONSOLE,
) -> Reconciliation:
    if outcome not in ("succeeded", "failed", "retry"):
        raise invalid("invalid", "The request is not valid.",
                      outcome=["succeeded, failed or retry"])
    _require_role(actor)
    with transaction.atomic():
        rec = (Reconciliation.objects.select_for_update()
               .filter(pk=reconciliation_id, tenant_id=tenant_id).first())
        if rec is None:
            raise not_found("Reconciliation")
        if rec.status != ReconciliationStatus.OPEN:
            raise conflict("already_resolved", f"this reconciliation is {rec.status}",
                           status=rec.status)
        task = Task.objects.get(pk=rec.task_id)
        version = _check_version(task, expected_version, rec.task_version)
        step = Step.objects.get(pk=rec.step_id)
        now = timezone.now()
        payload = {"reconciliation_id": rec.pk, "outcome": outcome, "comment": comment,
                   "step_no": step.step_no, "evidence": rec.status_answer, "seen_version": version,
                   "channel": channel}
        if outcome == "succeeded":
            if output is None:
                raise invalid("invalid", "The request is not valid.",
                              output=["say what the call returned (the evidence you found)"])
            _validated_result(task, rec.tool, output)
            task_transition(task_id=task.pk, event="reconciled", actor=actor,
                            expected_version=version,
                            payload={**payload, "output": output},
                            fields={"tool_calls": F("tool_calls") + 1})
            step_move(step.pk, StepStatus.SUCCEEDED, output=output, error=None, finished_at=now)
            settle_by_human(rec.idempotency_key, succeeded=True, result=output)
        elif outcome == "failed":
            error = {"type": "reconciled_failed",
                     "message": "a reviewer found the call did not happen",
                     "comment": comment}
            task_transition(task_id=task.pk, event="reconciled", actor=actor,
                            expected_version=version,
                            payload=payload, fields={"tool_calls": F("tool_calls") + 1})
            step_move(step.pk, StepStatus.FAILED, error=error, finished_at=now)
            settle_by_human(rec.idempotency_key, succeeded=False, error=error)
        elif outcome == "retry":
            spec = tool_specs(tenant_id=task.tenant_id, names=[rec.tool]).get(rec.tool)
            if spec is None or not spec.honours_keys:
                raise invalid("invalid", "The request is not valid.", outcome=[
                    "retry with the same key is only safe for tools that honour keys "
                    "(read or idempotent_write); mark it succeeded or failed instead"])
            task_transition(task_id=task.pk, event="reconciled", actor=actor,
                            expected_version=version,
                            payload=payload)
            step_move(step.pk, StepStatus.RUNNING, attempt=F("attempt") + 1,
                      next_attempt_at=None)
            reopen_for_retry(rec.idempotency_key)
        rec.status, rec.outcome, rec.output, rec.comment = (
            ReconciliationStatus.RESOLVED, outcome, output, comment)
        rec.resolved_by_id, rec.resolved_role, rec.resolved_at = actor.user_id, actor.role, now
        rec.channel = channel
        rec.save()
        schedule_advance_on_commit(task.pk)
    return rec


def reconciliation_requery(*, reconciliation_id: int, tenant_id: int, actor: Actor,
                           channel: str = DecisionChannel.CONSOLE) -> Reconciliation:
    """Ask the tool's status query again (outside any transaction) and store its answer.
    A clear answer resolves the reconciliation with that evidence."""
    _require_role(actor)
    rec = Reconciliation.objects.filter(pk=reconciliation_id, tenant_id=tenant_id).first()
    if rec is None:
        raise not_found("Reconciliation")
    if rec.status != ReconciliationStatus.OPEN:
        raise conflict("already_resolved", f"this reconciliation is {rec.status}",
                       status=rec.status)
    task = Task.objects.get(pk=rec.task_id)
    spec = tool_specs(tenant_id=task.tenant_id, names=[rec.tool]).get(rec.tool)
    if spec is None:
        raise invalid("invalid", "The request is not valid.", tool=[f"tool {rec.tool} is disabled"])
    call = ToolCall(spec=spec, args=rec.args, context=ToolContext(
        idempotency_key=rec.idempotency_key, task_id=task.pk, step_id=rec.step_id,
        tenant_id=task.tenant_id, trace_id=task.trace_id))
    result = settle_with_status_query(call)
    Reconciliation.objects.filter(pk=rec.pk).update(status_answer=result.status_answer)
    rec.refresh_from_db()
    answer = (result.status_answer or {}).get("state")
    if answer == "succeeded":
        return reconciliation_resolve(reconciliation_id=rec.pk, tenant_id=tenant_id, actor=actor,
                                      outcome="succeeded", output=result.result,
                                      comment="settled by the status query", channel=channel)
    if answer in ("failed", "not_found"):
        return reconciliation_resolve(reconciliation_id=rec.pk, tenant_id=tenant_id, actor=actor,
                                      outcome="failed", comment=f"status query: {answer}",
                                      channel=channel)
    return rec


def approvals_expire() -> int:
    """Pending approvals past their SLA, each as its `on_expiry` says (else the
    agent's `approval_on_expiry`): `escalate` to a second group (`escalate_to`:
    the request moves there with a new SLA, the task keeps waiting) or, with no
    second group left, reject the call and escalate the task to an operator;
    `reject` the call (the model is told, the task goes on); `fail` the task."""
    now = timezone.now()
    count = 0
    due = Approval.objects.filter(status=Decision.PENDING, expires_at__lt=now).order_by("id")[:100]
    for approval in due:
        with transaction.atomic():
            task = Task.objects.get(pk=approval.task_id)
            fresh = Approval.objects.select_for_update().get(pk=approval.pk)
            if fresh.status != Decision.PENDING or task.version != fresh.task_version:
                continue
            mode = fresh.on_expiry or (task.agent_snapshot or {}).get("approval_on_expiry",
                                                                     OnExpiry.ESCALATE)
            count += 1
            if mode == OnExpiry.ESCALATE and fresh.escalate_to_id is not None:
                _escalate_to_group(task, fresh, now)
                continue
            fresh.status, fresh.decided_at = Decision.EXPIRED, now
            fresh.comment = f"expired ({mode})"
            fresh.save()
            expired = {"approval_id": fresh.pk, "decision": "expired", "on_expiry": mode}
            if mode == OnExpiry.FAIL:
                step_move(fresh.step_id, StepStatus.FAILED, finished_at=now,
                          error={"type": "expired",
                                 "message": "the approval expired before anyone decided"})
                task_transition(task_id=task.pk, event="fatal_error", actor=SYSTEM,
                                expected_version=task.version,
                                payload={"reason": "approval_expired", **expired},
                                fields={"failure_reason": "approval_expired",
                                        "failure_detail": expired})
                continue
            done = task_transition(task_id=task.pk, event="approval_rejected", actor=SYSTEM,
                                   expected_version=task.version, payload=expired)
            step_move(fresh.step_id, StepStatus.REJECTED, finished_at=now,
                      error={"type": "rejected",
                             "message": "the approval expired before anyone decided"})
            _after_expiry(task.pk, done.version, escalate=mode == OnExpiry.ESCALATE,
                          payload={"reason": "approval_expired", "approval_id": fresh.pk})
    return count


def _escalate_to_group(task: Task, approval: Approval, now: Any) -> None:
    """The request moves to its second group, with a fresh SLA; once there, its
    next expiry follows the agent's own `approval_on_expiry`."""
    sla_s = approval.sla_s or int((task.agent_snapshot or {}).get("approval_sla_s") or 0)
    before = approval.group_id
    approval.group_id, approval.escalate_to_id = approval.escalate_to_id, None
    approval.assignee_id, approval.on_expiry = None, ""
    approval.expires_at = now + timedelta(seconds=sla_s) if sla_s else None
    approval.save(update_fields=["group", "escalate_to", "assignee", "on_expiry", "expires_at"])
    event_note(task_id=task.pk, type="approval_escalated", actor=SYSTEM,
               payload={"approval_id": approval.pk, "from_group_id": before,
                        "to_group_id": approval.group_id,
                        "expires_at": approval.expires_at.isoformat()
                        if approval.expires_at else None})


def _after_expiry(task_id: int, version: int, *, escalate: bool,
                  payload: dict[str, Any]) -> None:
    """An expired request let its task run again: it goes on, or waits for an
    operator (`escalated`)."""
    if escalate:
        task_transition(task_id=task_id, event="escalated", actor=SYSTEM,
                        expected_version=version, payload=payload)
    else:
        schedule_advance_on_commit(task_id)


def questions_expire() -> int:
    """Open questions past their expiry (a workflow's human node with
    `expires_in`): closed unanswered, their step failed (`expired`), and the
    task goes on (`reject`: the node fails, or is asked again if it has
    retries) or waits for an operator (`escalate`: resume or fail the run)."""
    now = timezone.now()
    count = 0
    due = (Question.objects.filter(status=QuestionStatus.OPEN, expires_at__lt=now)
           .order_by("id")[:100])
    for question in due:
        with transaction.atomic():
            task = Task.objects.get(pk=question.task_id)
            fresh = Question.objects.select_for_update().get(pk=question.pk)
            if fresh.status != QuestionStatus.OPEN or task.version != fresh.task_version:
                continue
            done = task_transition(task_id=task.pk, event="input_received", actor=SYSTEM,
                                   expected_version=task.version,
                                   payload={"question_id": fresh.pk, "expired": True})
            step_move(fresh.step_id, StepStatus.FAILED, finished_at=now,
                      error={"type": "expired",
                             "message": "the question expired before anyone answered"})
            fresh.status = QuestionStatus.EXPIRED
            fresh.save(update_fields=["status"])
            _after_expiry(task.pk, done.version, escalate=fresh.on_expiry == "escalate",
                          payload={"reason": "question_expired", "question_id": fresh.pk})
            count += 1
    return count
