"""Evaluation runs: what a shadow task's tools, questions and approvals get
from the recorded task it replays (`Task.shadow_of`), so that a candidate
version runs on yesterday's real tasks without touching anything real.

- A tool call whose tool and canonical arguments match a call the recorded
  task made gets that call's recorded outcome from the ledger: the k-th
  identical call of the shadow task gets the k-th identical call's result.
- An unmatched read-only call is made for real only when the evaluation
  allows live reads; otherwise the model gets a typed `not_recorded` result.
- An unmatched write is never made: the step records "would call X with Y"
  and the model gets a typed `not_executed_in_evaluation` result.
- A question gets the recorded answer to the same question (k-th likewise);
  none recorded: the run stops as "needs a person".
- An approval is taken as recorded for the same tool and arguments; none
  recorded: the call goes on (it cannot have a real effect) and the step
  counts as "would need approval".

Reads only: the runner commits what these return (`executing`, `recording`).
"""
from __future__ import annotations

from typing import Any

from approvals_app.models import Approval, Decision, Question, QuestionStatus
from tools_app.executor import OutcomeKind, ToolOutcome
from tools_app.executor.types import ToolSpec
from tools_app.models import LedgerStatus, ToolExecution

from ..keys import canonical_json
from ..models import Step, StepKind
from ..payloads import resolve_ledger
from ..shadow_kinds import (
    APPROVAL_AS_RECORDED,
    NEEDS_A_PERSON,
    NOT_EXECUTED,
    NOT_RECORDED,
    WOULD_NEED_APPROVAL,
)
from ..snapshot import TaskSnapshot

__all__ = ["APPROVAL_AS_RECORDED", "NEEDS_A_PERSON", "NOT_EXECUTED", "NOT_RECORDED",
           "WOULD_NEED_APPROVAL", "not_made", "not_written", "recorded_answer", "recorded_approval",
           "recorded_calls", "recorded_outcome"]


def _recorded(snap: TaskSnapshot) -> int:
    assert snap.shadow_of is not None, "only an evaluation run replays a recorded task"
    return snap.shadow_of


def _same(args: Any, canonical: str) -> bool:
    return canonical_json(args or {}) == canonical


def _earlier_identical(snap: TaskSnapshot, step_no: int, kind: str, tool: str,
                       canonical: str) -> int:
    """How many earlier steps of the shadow task made this same call (k)."""
    earlier = Step.objects.filter(task_id=snap.id, kind=kind, tool=tool,
                                  step_no__lt=step_no).values_list("args", flat=True)
    return sum(1 for args in earlier if _same(args, canonical))


RecordedCall = tuple[str, str, str, Any, Any]  # tool, canonical args, status, result, error


def recorded_calls(snap: TaskSnapshot) -> list[RecordedCall]:
    """The recorded task's ledger, in the order its calls were made. It ended
    before the evaluation started, so a slice reads it once (`SliceMemo`)."""
    rows = list(ToolExecution.objects.filter(task_id=_recorded(snap)).order_by("id")
                .values("tenant_id", "tool", "args", "status", "result", "error"))
    resolve_ledger(rows)  # a large result is stored out of row
    return [(row["tool"], canonical_json(row["args"] or {}), row["status"], row["result"],
             row["error"]) for row in rows]


def recorded_outcome(snap: TaskSnapshot, step: Step, spec: ToolSpec,
                     record: list[RecordedCall]) -> ToolOutcome | None:
    """What the shadow task's call `step` gets from `record` (`recorded_calls`);
    None: call the tool for real (an unmatched read in an evaluation with live
    reads)."""
    canonical = canonical_json(step.args or {})
    k = _earlier_identical(snap, step.step_no, StepKind.TOOL, step.tool, canonical)
    same = [row for row in record if row[0] == step.tool and row[1] == canonical]
    if k < len(same):
        _, _, status, result, error = same[k]
        if status == LedgerStatus.SUCCEEDED:
            return ToolOutcome(kind=OutcomeKind.OK, result=result, from_ledger=True)
        if status == LedgerStatus.FAILED_FINAL:
            permission = (error or {}).get("layer") == "permission"
            return ToolOutcome(kind=OutcomeKind.PERMISSION if permission else OutcomeKind.BUSINESS,
                               error=error, from_ledger=True)
        # an outcome the record does not know (uncertain, interrupted): unmatched
    shown = f"{step.tool} with {canonical}"
    if spec.side_effect == "read":
        if snap.shadow_live_reads:
            return None
        return ToolOutcome(kind=OutcomeKind.BUSINESS, error={
            "type": NOT_RECORDED, "tool": step.tool, "args": step.args or {},
            "message": f"the recorded task made no call {shown}; in an evaluation it is "
                       "not made"})
    return not_made(step)


def not_made(step: Step) -> ToolOutcome:
    """A write (or another agent's task) the recorded task did not make: never
    made, and the model is told so."""
    shown = f"{step.tool} with {canonical_json(step.args or {})}"
    return ToolOutcome(kind=OutcomeKind.BUSINESS, error={
        "type": NOT_EXECUTED, "would_call": {"tool": step.tool, "args": step.args or {}},
        "message": f"would call {shown}: the call was not made in an evaluation"})


def not_written(kind: str) -> dict[str, Any]:
    """What a registered decision kind's step records in an evaluation run (a
    memory write, say): nothing was written."""
    return {"type": NOT_EXECUTED, "message": f"{kind}: not written in an evaluation"}


def recorded_answer(snap: TaskSnapshot, question: str) -> str | None:
    """The recorded task's answer to the same question (the k-th time it is
    asked, the k-th answer); None: nobody answered it in the record."""
    asked_before = Question.objects.filter(task_id=snap.id, question=question).count()
    answers = list(Question.objects.filter(task_id=_recorded(snap), question=question,
                                           status=QuestionStatus.ANSWERED)
                   .order_by("id").values_list("answer", flat=True))
    return answers[asked_before] if asked_before < len(answers) else None


def recorded_approval(snap: TaskSnapshot, tool: str, args: dict[str, Any]) -> str | None:
    """How a reviewer decided the same call in the recorded task (`Decision`), if
    they did: approved (or approved with a response), or rejected."""
    canonical = canonical_json(args or {})
    decided = (Approval.objects.filter(task_id=_recorded(snap), tool=tool)
               .exclude(status__in=[Decision.PENDING, Decision.CANCELED, Decision.EXPIRED])
               .order_by("id").values_list("args", "status"))
    for recorded_args, status in decided:
        if _same(recorded_args, canonical):
            return str(status)
    return None
