"""Comparing a recorded task (the baseline) with its shadow task (the candidate),
and scoring the candidate's result.

The decisions of a task are its steps in order, each as (kind, tool,
canonical arguments) for a call, (ask, question) for a question, and (final)
for a final answer; invalid decisions and memory writes are left out (the
model's noise, not what it did). The first divergence is the first position
where the two lists differ.
"""
from __future__ import annotations

from collections import Counter
from typing import Any

from approvals_app.models import Approval, Decision, Question, QuestionStatus
from tasks_app.keys import canonical_json
from tasks_app.machine import TaskStatus
from tasks_app.models import Step, StepKind, Task
from tasks_app.pricing import pico_text
from tasks_app.shadow_kinds import (
    APPROVAL_AS_RECORDED,
    NEEDS_A_PERSON,
    NOT_EXECUTED,
    NOT_RECORDED,
    WOULD_NEED_APPROVAL,
)
from tools_app.schemas import SchemaRefused, schema_errors

from ..models import Scorer

COMPARED_KINDS = (StepKind.TOOL, StepKind.ASK, StepKind.FINAL)


def decisions_of(task_id: int) -> list[dict[str, Any]]:
    """The task's decisions, in order (`step_no`, `kind`, and `tool` and `args`, or
    `question`), with what the step got back in an evaluation (`error`, `evaluation`)."""
    steps = (Step.objects.filter(task_id=task_id, kind__in=COMPARED_KINDS).order_by("step_no")
             .values_list("step_no", "kind", "tool", "args", "decision", "error", "output",
                          "model_log"))
    out = []
    for step_no, kind, tool, args, decision, error, output, model_log in steps:
        entry: dict[str, Any] = {"step_no": step_no, "kind": kind}
        if kind == StepKind.TOOL:
            entry.update(tool=tool, args=args or {})
        elif kind == StepKind.ASK:
            entry["question"] = (decision or {}).get("question", "")
            entry["answer_from_record"] = bool((output or {}).get("from_record"))
        entry["error_type"] = (error or {}).get("type") if isinstance(error, dict) else None
        if entry["error_type"] == NOT_EXECUTED:
            entry["would_call"] = (error or {}).get("would_call")
        entry["evaluation"] = (model_log or {}).get("evaluation")
        out.append(entry)
    return out


def _key(entry: dict[str, Any]) -> str:
    if entry["kind"] == StepKind.TOOL:
        return canonical_json(["tool", entry["tool"], entry["args"]])
    if entry["kind"] == StepKind.ASK:
        return canonical_json(["ask", entry["question"]])
    return canonical_json([entry["kind"]])


def _shown(entry: dict[str, Any] | None) -> dict[str, Any] | None:
    if entry is None:
        return None
    return {k: entry[k] for k in ("step_no", "kind", "tool", "args", "question") if k in entry}


def first_divergence(baseline: list[dict[str, Any]],
                     candidate: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Where the candidate first decided differently (None: the same decisions)."""
    for i in range(max(len(baseline), len(candidate))):
        b = baseline[i] if i < len(baseline) else None
        c = candidate[i] if i < len(candidate) else None
        if b is None or c is None or _key(b) != _key(c):
            return {"position": i + 1, "baseline": _shown(b), "candidate": _shown(c)}
    return None


def _figures(task: Task) -> dict[str, Any]:
    return {"task": task.pk, "status": task.status, "result": task.result,
            "failure_reason": task.failure_reason, "steps": task.steps_count,
            "model_calls": task.model_calls, "tool_calls": task.tool_calls,
            "tokens": task.tokens, "cost": pico_text(task.cost_pico),
            "cost_pico": task.cost_pico}


def _recorded_interventions(task_id: int) -> int:
    """What people did in the recorded task: questions answered, approvals decided."""
    answered = Question.objects.filter(task_id=task_id, status=QuestionStatus.ANSWERED).count()
    decided = Approval.objects.filter(task_id=task_id).exclude(
        status__in=[Decision.PENDING, Decision.CANCELED, Decision.EXPIRED]).count()
    return answered + decided


def compare(recorded: Task, shadow: Task) -> dict[str, Any]:
    """Baseline and candidate side by side (see the module's docstring)."""
    baseline, candidate = decisions_of(recorded.pk), decisions_of(shadow.pk)
    calls = Counter(_key(e) for e in baseline if e["kind"] == StepKind.TOOL)
    new_calls = []
    for entry in candidate:
        if entry["kind"] != StepKind.TOOL:
            continue
        if calls[_key(entry)] > 0:
            calls[_key(entry)] -= 1
        else:
            new_calls.append({"step_no": entry["step_no"], "tool": entry["tool"],
                              "args": entry["args"]})
    would_call = [e["would_call"] for e in candidate if e["error_type"] == NOT_EXECUTED]
    reused = sum(1 for e in candidate if e.get("answer_from_record"))
    as_recorded = sum(1 for e in candidate if e["evaluation"] == APPROVAL_AS_RECORDED)
    would_need = sum(1 for e in candidate if e["evaluation"] == WOULD_NEED_APPROVAL)
    return {
        "baseline": {**_figures(recorded),
                     "interventions": _recorded_interventions(recorded.pk)},
        "candidate": {**_figures(shadow), "interventions": reused + as_recorded + would_need,
                      "answers_reused": reused, "approvals_as_recorded": as_recorded},
        "same_outcome": same_outcome(recorded, shadow),
        "first_divergence": first_divergence(baseline, candidate),
        "new_calls": new_calls,
        "unmatched_writes": would_call,
        "not_recorded_reads": sum(1 for e in candidate if e["error_type"] == NOT_RECORDED),
        "would_need_approval": would_need,
        "needs_a_person": shadow.failure_reason == NEEDS_A_PERSON,
    }


def same_outcome(recorded: Task, shadow: Task) -> bool:
    return (recorded.status == shadow.status
            and canonical_json(recorded.result) == canonical_json(shadow.result))


def score(scorer: str, recorded: Task, shadow: Task,
          result_schema: dict[str, Any]) -> tuple[float, str]:
    """The candidate's score from 0 to 1 and why, by a scorer that needs no model
    (`judge` is scored by its own task: `settling`)."""
    if scorer == Scorer.EXACT:
        if same_outcome(recorded, shadow):
            return 1.0, "the same status and result"
        return 0.0, f"{recorded.status} with another result" if (
            recorded.status == shadow.status) else f"{recorded.status} became {shadow.status}"
    if scorer == Scorer.SUBSET:
        if recorded.status != shadow.status:
            return 0.0, f"{recorded.status} became {shadow.status}"
        if not isinstance(recorded.result, dict) or not isinstance(shadow.result, dict):
            same = canonical_json(recorded.result) == canonical_json(shadow.result)
            return (1.0, "the same result") if same else (0.0, "another result")
        differ = sorted(k for k, v in recorded.result.items()
                        if k not in shadow.result
                        or canonical_json(shadow.result[k]) != canonical_json(v))
        if differ:
            return 0.0, "missing or different: " + ", ".join(differ[:20])
        return 1.0, "every field of the baseline's result, equal"
    # SCHEMA
    if shadow.status != TaskStatus.SUCCEEDED:
        return 0.0, f"the candidate {shadow.status}"
    try:
        errors = schema_errors(result_schema, shadow.result) if result_schema else []
    except SchemaRefused as exc:
        errors = [exc.message]
    if errors:
        return 0.0, "; ".join(str(e) for e in errors[:5])
    return 1.0, "the result matches the agent's result schema"
