"""Settling an evaluation as its shadow tasks end: each replay's comparison and
score, then the evaluation's summary once every replay is settled.

A shadow task that ends settles its replay (`settle_after_task`, registered
with the store's `on_task_ended`); the recovery sweep settles whatever a lost
hook left (`settle_running`: a worker killed after the task ended). A replay
is settled under its own row's lock, in a transaction of its own; then the
evaluation's row is locked to see whether any replay is still open: the last
replay to commit always sees every other one settled, so the evaluation
finishes at once. Both steps are idempotent: a settled replay is left as it
is, a finished evaluation too.

With the `judge` scorer, a replay's score comes from a task of the judge
agent, submitted once the shadow task ended, given both results; its result
must be `{"score": 0..1, "reason": "..."}` (anything else scores 0).
"""
from __future__ import annotations

import logging
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from foundations.actors import SYSTEM
from tasks_app.machine import TERMINAL, TaskStatus
from tasks_app.models import AgentVersion, Task
from tasks_app.pricing import PICO, pico_text
from tasks_app.services.tasks import task_submit

from ..models import Evaluation, EvaluationStatus, EvaluationTask, Scorer
from .comparing import compare, score

log = logging.getLogger(__name__)


def settle_after_task(task_id: int) -> None:
    """A task ended: if it is a replay's shadow task or judge, settle the replay."""
    row = (EvaluationTask.objects.filter(Q(shadow_task_id=task_id) | Q(judge_task_id=task_id),
                                         done=False).values_list("pk", "evaluation_id").first())
    if row is not None:
        replay_settle(row[0])
        evaluation_finish(row[1])


def settle_running() -> None:
    """The sweep: settle every running evaluation (what a lost hook left)."""
    for evaluation_id in Evaluation.objects.filter(
            status=EvaluationStatus.RUNNING).values_list("id", flat=True):
        try:
            evaluation_settle(evaluation_id)
        except Exception:  # one evaluation's trouble must not stop the others
            log.exception("could not settle evaluation %s", evaluation_id)


def evaluation_settle(evaluation_id: int) -> Evaluation:
    """Settle every replay whose tasks ended; finish the evaluation when all are."""
    open_rows = EvaluationTask.objects.filter(evaluation_id=evaluation_id, done=False)
    ended = set(Task.objects.filter(
        Q(pk__in=open_rows.values("shadow_task_id")) | Q(pk__in=open_rows.values(
            "judge_task_id")), status__in=TERMINAL).values_list("pk", flat=True))
    for row_id, shadow_id, judge_id in open_rows.values_list("pk", "shadow_task_id",
                                                             "judge_task_id"):
        if shadow_id in ended or judge_id in ended:
            replay_settle(row_id)
    return evaluation_finish(evaluation_id)


def replay_settle(row_id: int) -> None:
    """Settle one replay whose shadow task (or judge) ended, in a transaction of its own."""
    with transaction.atomic():
        row = EvaluationTask.objects.select_for_update().get(pk=row_id)
        if row.done:
            return
        evaluation = Evaluation.objects.get(pk=row.evaluation_id)
        if evaluation.status == EvaluationStatus.RUNNING:
            _settle_replay(evaluation, row, _ended_tasks(
                [row.shadow_task_id] + ([row.judge_task_id] if row.judge_task_id else [])))


def evaluation_finish(evaluation_id: int) -> Evaluation:
    """Finish the evaluation, with its summary, once no replay is open."""
    with transaction.atomic():
        evaluation = Evaluation.objects.select_for_update().get(pk=evaluation_id)
        if (evaluation.status == EvaluationStatus.RUNNING
                and not evaluation.tasks.filter(done=False).exists()):
            evaluation.summary = summary_of(evaluation)
            evaluation.status, evaluation.finished_at = EvaluationStatus.FINISHED, timezone.now()
            evaluation.save(update_fields=["summary", "status", "finished_at"])
    return evaluation


def _ended_tasks(ids: list[int]) -> dict[int, Task]:
    return {t.pk: t for t in Task.objects.filter(pk__in=ids, status__in=TERMINAL)}


def _settle_replay(evaluation: Evaluation, row: EvaluationTask, ended: dict[int, Task]) -> None:
    shadow = ended.get(row.shadow_task_id)
    if shadow is None:
        return  # still running
    recorded = Task.objects.filter(pk=row.recorded_task_id).first()
    if recorded is None:  # purged meanwhile: nothing to compare with
        row.done, row.passed, row.score, row.reason = True, False, 0.0, "the recorded task is gone"
        row.save(update_fields=["done", "passed", "score", "reason"])
        return
    if evaluation.scorer == Scorer.JUDGE:
        if row.judge_task_id is None:
            row.judge_task_id = _judge_submit(evaluation, recorded, shadow)
            row.save(update_fields=["judge_task_id"])
            return
        judged = ended.get(row.judge_task_id)
        if judged is None:
            return
        row.score, row.reason = judged_score(judged)
    else:
        row.score, row.reason = score(evaluation.scorer, recorded, shadow,
                                      _result_schema(evaluation))
    row.comparison = compare(recorded, shadow)
    row.passed = row.score >= evaluation.pass_threshold
    row.done = True
    row.save(update_fields=["score", "reason", "comparison", "passed", "done"])


def _result_schema(evaluation: Evaluation) -> dict[str, Any]:
    config = (AgentVersion.objects.filter(agent_id=evaluation.agent_id,
                                          number=evaluation.candidate_version)
              .values_list("config", flat=True).first()) or {}
    return dict(config.get("result_schema") or {})


def _judge_submit(evaluation: Evaluation, recorded: Task, shadow: Task) -> int:
    """The judge's task: the goal, the baseline's outcome and the candidate's."""
    def outcome(task: Task) -> dict[str, Any]:
        return {"status": task.status, "result": task.result}
    submitted = task_submit(
        tenant_id=evaluation.tenant_id, requester_id=None, agent=evaluation.judge,
        goal=("Score from 0 to 1 how well the candidate's outcome does the task, taking the "
              "baseline's as correct. Answer {\"score\": number, \"reason\": text}."),
        input={"task_goal": recorded.goal, "task_input": recorded.input,
               "baseline": outcome(recorded), "candidate": outcome(shadow)},
        idempotency_key=f"evaluation-{evaluation.pk}-judge-{shadow.pk}", actor=SYSTEM)
    return submitted.task.pk


def judged_score(judged: Task) -> tuple[float, str]:
    result = judged.result if isinstance(judged.result, dict) else {}
    value = result.get("score")
    if judged.status != TaskStatus.SUCCEEDED or isinstance(value, bool) or not isinstance(
            value, int | float) or not 0 <= value <= 1:
        return 0.0, f"the judge's task {judged.pk} gave no score from 0 to 1"
    return float(value), str(result.get("reason") or "")[:2000]


def _ratio(candidate: int, baseline: int) -> float | None:
    if baseline == 0:
        return None if candidate else 1.0
    return round(candidate / baseline, 4)


def summary_of(evaluation: Evaluation) -> dict[str, Any]:
    """Pass rate, divergences, unmatched writes, cost and steps per task against
    the baseline, over the settled replays."""
    rows = list(evaluation.tasks.filter(done=True).values_list("passed", "comparison"))
    n = len(rows)
    comparisons = [c or {} for _, c in rows]

    def total(side: str, field: str) -> int:
        return sum(int((c.get(side) or {}).get(field) or 0) for c in comparisons)

    base_cost, cand_cost = total("baseline", "cost_pico"), total("candidate", "cost_pico")
    diverged = sum(1 for c in comparisons if c.get("first_divergence"))

    def per_task(value: int) -> float:
        return round(value / n, 3) if n else 0.0

    return {
        "tasks": n,
        "passed": sum(1 for p, _ in rows if p),
        "pass_rate": round(sum(1 for p, _ in rows if p) / n, 4) if n else 0.0,
        "same_outcome": sum(1 for c in comparisons if c.get("same_outcome")),
        "diverged": diverged,
        "same_decisions": n - diverged,
        "new_calls": sum(len(c.get("new_calls") or []) for c in comparisons),
        "unmatched_writes": sum(len(c.get("unmatched_writes") or []) for c in comparisons),
        "tasks_with_unmatched_writes": sum(1 for c in comparisons if c.get("unmatched_writes")),
        "not_recorded_reads": sum(int(c.get("not_recorded_reads") or 0) for c in comparisons),
        "would_need_approval": sum(int(c.get("would_need_approval") or 0) for c in comparisons),
        "needs_a_person": sum(1 for c in comparisons if c.get("needs_a_person")),
        "baseline": {"cost": pico_text(base_cost), "cost_per_task": _dollars(base_cost, n),
                     "steps_per_task": per_task(total("baseline", "steps")),
                     "model_calls": total("baseline", "model_calls"),
                     "tokens": total("baseline", "tokens")},
        "candidate": {"cost": pico_text(cand_cost), "cost_per_task": _dollars(cand_cost, n),
                      "steps_per_task": per_task(total("candidate", "steps")),
                      "model_calls": total("candidate", "model_calls"),
                      "tokens": total("candidate", "tokens")},
        "cost_ratio": _ratio(cand_cost, base_cost),
    }


def _dollars(pico: int, n: int) -> str:
    return format((Decimal(pico) / PICO / n).normalize(), "f") if n else "0"
