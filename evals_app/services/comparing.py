"""Comparing a recorded task (the baseline) with its shadow task (the candidate),
and scoring the candidate's result.

The two runs are aligned step by step, the same `step_no` on one row (`align`),
and each step compared by its decision: the tool and its canonical arguments
for a call, the question for a question, the result for a final answer (the
kind and what it chose for the others). The first divergence is the first
row where they differ, a step one run has and the other has not included.
The console's and the API's side-by-side timelines and each replay's
comparison all come from `align`.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

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

from ..models import EvaluationTask, Scorer

COMPARED_KINDS = (StepKind.TOOL, StepKind.ASK, StepKind.FINAL)
S = TypeVar("S")


def steps_of(task_id: int) -> list[Step]:
    return list(Step.objects.filter(task_id=task_id).order_by("step_no"))


def decision_key(step: Step) -> str:
    """What a step decided, as canonical JSON: equal keys, the same decision."""
    if step.kind == StepKind.TOOL:
        return canonical_json(["tool", step.tool, step.args or {}])
    if step.kind == StepKind.ASK:
        return canonical_json(["ask", (step.decision or {}).get("question", "")])
    if step.kind == StepKind.FINAL:
        return canonical_json(["final", step.output])
    if step.kind == StepKind.MEMORY:
        return canonical_json(["memory", (step.decision or {}).get("memory")])
    if step.kind == StepKind.READ:
        return canonical_json(["read", step.args or {}])
    return canonical_json([step.kind, step.tool])  # invalid: that it was, not its noise


@dataclass(frozen=True)
class AlignedRow(Generic[S]):
    step_no: int
    baseline: S | None  # None: the baseline has no such step
    candidate: S | None
    same: bool  # both have the step and decided the same


@dataclass(frozen=True)
class Alignment(Generic[S]):
    rows: list[AlignedRow[S]]
    divergence: int | None  # the step_no of the first row that is not the same

    @property
    def diverged_row(self) -> AlignedRow[S] | None:
        return next((r for r in self.rows if r.step_no == self.divergence), None)


def _itself(step: Any) -> Step:
    return step  # type: ignore[no-any-return]


def align(baseline: Sequence[S], candidate: Sequence[S],
          step_of: Callable[[S], Step] = _itself) -> Alignment[S]:
    """Two runs' steps (or anything `step_of` maps to a step) on rows by `step_no`,
    and where they first diverge (None: every step the same, as many of them)."""
    by_b = {step_of(s).step_no: s for s in baseline}
    by_c = {step_of(s).step_no: s for s in candidate}
    rows = []
    for no in sorted(by_b.keys() | by_c.keys()):
        b, c = by_b.get(no), by_c.get(no)
        same = (b is not None and c is not None
                and decision_key(step_of(b)) == decision_key(step_of(c)))
        rows.append(AlignedRow(no, b, c, same))
    return Alignment(rows, next((r.step_no for r in rows if not r.same), None))


def shown(step: Step | None) -> dict[str, Any] | None:
    """A step's decision as the comparison shows it."""
    if step is None:
        return None
    out: dict[str, Any] = {"step_no": step.step_no, "kind": step.kind}
    if step.kind == StepKind.TOOL:
        out.update(tool=step.tool, args=step.args or {})
    elif step.kind == StepKind.ASK:
        out["question"] = (step.decision or {}).get("question", "")
    elif step.kind == StepKind.FINAL:
        out["result"] = step.output
    return out


def decisions_of(steps: Sequence[Step]) -> list[dict[str, Any]]:
    """The calls, questions and final answers among the steps, in order (`shown`),
    with what each got back in an evaluation (`error_type`, `evaluation`)."""
    out = []
    for step in steps:
        if step.kind not in COMPARED_KINDS:
            continue
        error = step.error if isinstance(step.error, dict) else {}
        entry: dict[str, Any] = {**(shown(step) or {}), "error_type": error.get("type"),
                                 "evaluation": (step.model_log or {}).get("evaluation")}
        if step.kind == StepKind.ASK:
            entry["answer_from_record"] = bool((step.output or {}).get("from_record"))
        if entry["error_type"] == NOT_EXECUTED:
            entry["would_call"] = error.get("would_call")
        out.append(entry)
    return out


def first_divergence(alignment: Alignment[Step]) -> dict[str, Any] | None:
    """Where the candidate first decided differently (None: the same decisions);
    `position` is the step number."""
    row = alignment.diverged_row
    if row is None:
        return None
    return {"position": row.step_no, "baseline": shown(row.baseline),
            "candidate": shown(row.candidate)}


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
    baseline_steps, candidate_steps = steps_of(recorded.pk), steps_of(shadow.pk)
    candidate = decisions_of(candidate_steps)
    calls = Counter(decision_key(s) for s in baseline_steps if s.kind == StepKind.TOOL)
    new_calls = []
    for step in candidate_steps:
        if step.kind != StepKind.TOOL:
            continue
        if calls[decision_key(step)] > 0:
            calls[decision_key(step)] -= 1
        else:
            new_calls.append({"step_no": step.step_no, "tool": step.tool,
                              "args": step.args or {}})
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
        "first_divergence": first_divergence(align(baseline_steps, candidate_steps)),
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


def replay_aligned(replay: EvaluationTask) -> Alignment[Step]:
    """A replay's recorded task and shadow task, aligned (see `align`)."""
    return align(steps_of(replay.recorded_task_id), steps_of(replay.shadow_task_id))
