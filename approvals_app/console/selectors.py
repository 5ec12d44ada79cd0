"""Reads for the reviewer's inbox: cards for pending approvals, open questions and
open reconciliations, with what the reviewer needs to decide (the model's
reason and the evidence it cites, each attempt of an uncertain call and the
latest status-query answer). Always scoped to one tenant.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tasks_app.context.refs import parse_cite
from tasks_app.machine import TaskStatus
from tasks_app.models import ContextSummary, Step, Task
from tasks_app.payloads import resolve_ledger
from tools_app.models import Tool, ToolExecution

from ..models import (
    Approval,
    Decision,
    Question,
    QuestionStatus,
    Reconciliation,
    ReconciliationStatus,
)
from ..selectors import approvals_for_inbox
from .sections import SECTIONS

SECTION_LIMIT = 50
CITES_SHOWN = 20


@dataclass(frozen=True)
class Card:
    kind: str  # "approval" | "question" | "reconciliation"
    obj: Any
    task: Task
    evidence: list[dict[str, Any]] = field(default_factory=list)
    ledger: ToolExecution | None = None
    honours_keys: bool = False
    step_no: int | None = None

    @property
    def key(self) -> str:
        return f"{self.kind}-{self.obj.pk}"

    @property
    def is_open(self) -> bool:
        return self.obj.status in (Decision.PENDING, QuestionStatus.OPEN, ReconciliationStatus.OPEN)

    @property
    def attempts(self) -> list[dict[str, Any]]:
        return list(self.ledger.attempts or []) if self.ledger else []

    @property
    def status_answer(self) -> Any:
        if self.kind != "reconciliation":
            return None
        return self.obj.status_answer or (self.ledger.status_answer if self.ledger else None)


def _evidence(task: Task, cites: list[str]) -> list[dict[str, Any]]:
    """What each cited context id pointed at, so the reviewer can check the reason."""
    shown = [(ref, parse_cite(ref)) for ref in cites[:CITES_SHOWN]]
    step_nos = [c.number for _, c in shown if c.kind == "step" and c.number is not None]
    steps = {s.step_no: s for s in Step.objects.filter(task_id=task.pk, step_no__in=step_nos)}
    out: list[dict[str, Any]] = []
    for ref, cite in shown:
        item: dict[str, Any] = {"ref": ref, "label": ref, "value": None, "missing": False}
        if cite.kind == "step" and cite.number in steps:
            s = steps[cite.number]
            item["label"] = f"Step {s.step_no}" + (f" · {s.tool}" if s.tool else "")
            item["value"] = s.output if s.output is not None else s.error
        elif cite.kind == "goal":
            item["label"], item["value"] = "Goal", task.goal
        elif cite.kind == "input":
            item["label"], item["value"] = "Input", task.input
        elif cite.kind == "answer" and cite.number is not None:
            q = Question.objects.filter(task_id=task.pk, pk=cite.number).first()
            item["label"] = "Answer"
            item["value"] = {"question": q.question, "answer": q.answer} if q else None
        elif cite.kind == "summary" and cite.number is not None:
            summary = ContextSummary.objects.filter(task_id=task.pk, version=cite.number).first()
            item["label"] = f"Summary v{cite.number}"
            item["value"] = summary.text if summary else None
        item["missing"] = item["value"] is None
        out.append(item)
    return out


def approval_card(approval: Approval) -> Card:
    task = approval.task
    preview = approval.preview or {}
    return Card(
        kind="approval",
        obj=approval,
        task=task,
        step_no=approval.step.step_no,
        evidence=_evidence(task, [str(c) for c in preview.get("cites") or []]),
    )


def question_card(question: Question) -> Card:
    return Card(kind="question", obj=question, task=question.task, step_no=question.step.step_no)


def reconciliation_card(
    rec: Reconciliation, *, tool: Tool | None = None, ledger: ToolExecution | None = None
) -> Card:
    if tool is None:
        tool = Tool.objects.filter(tenant_id=rec.tenant_id, name=rec.tool).first()
    if ledger is None:
        ledger = ToolExecution.objects.filter(idempotency_key=rec.idempotency_key).first()
        resolve_ledger([ledger] if ledger else [])
    honours = bool(tool and tool.enabled and tool.side_effect in ("read", "idempotent_write"))
    return Card(
        kind="reconciliation",
        obj=rec,
        task=rec.task,
        ledger=ledger,
        honours_keys=honours,
        step_no=rec.step.step_no,
    )


def inbox(tenant_id: int, *, user_id: int | None = None, show: str = "all") -> dict[str, Any]:
    """Open requests of the tenant, oldest first (they have waited longest);
    approvals as `show` filters them (`mine`, my `groups`, `all`)."""
    approvals_qs = approvals_for_inbox(
        Approval.objects.filter(tenant_id=tenant_id, status=Decision.PENDING),
        user_id=user_id, which=show)
    questions_qs = Question.objects.filter(tenant_id=tenant_id, status=QuestionStatus.OPEN)
    recs_qs = Reconciliation.objects.filter(tenant_id=tenant_id, status=ReconciliationStatus.OPEN)
    related = ("task", "task__agent", "step")
    approvals = [
        approval_card(a)
        for a in approvals_qs.select_related(*related, "group", "assignee")
        .order_by("id")[:SECTION_LIMIT]
    ]
    questions = [
        question_card(q)
        for q in questions_qs.select_related(*related).order_by("id")[:SECTION_LIMIT]
    ]
    recs = list(recs_qs.select_related(*related).order_by("id")[:SECTION_LIMIT])
    tools = {
        t.name: t for t in Tool.objects.filter(tenant_id=tenant_id, name__in={r.tool for r in recs})
    }
    rows = list(ToolExecution.objects.filter(
        tenant_id=tenant_id, idempotency_key__in=[r.idempotency_key for r in recs]))
    resolve_ledger(rows)
    ledgers = {row.idempotency_key: row for row in rows}
    reconciliations = [
        reconciliation_card(r, tool=tools.get(r.tool), ledger=ledgers.get(r.idempotency_key))
        for r in recs
    ]
    counts = {
        "approvals": approvals_qs.count(),
        "questions": questions_qs.count(),
        "reconciliations": recs_qs.count(),
    }
    # the registered sections' (`sections`): what waits for a reviewer without holding a task
    extra = []
    for section in SECTIONS.values():
        counts[section.key] = section.count(tenant_id)
        extra.append({"section": section, "count": counts[section.key],
                      "rows": section.rows(tenant_id, SECTION_LIMIT)})
    return {
        "show": show,
        "approvals": approvals,
        "approval_groups": by_task(approvals),
        "questions": questions,
        "reconciliations": reconciliations,
        "sections": extra,
        "counts": counts,
        "total": sum(counts.values()),
    }


def by_task(cards: list[Card]) -> list[dict[str, Any]]:
    """The cards grouped under their task, the groups in the order of their
    oldest card, each group's cards in step order: the calls of one model
    reply, decided one by one or all at once."""
    groups: dict[int, dict[str, Any]] = {}
    for card in cards:
        groups.setdefault(card.task.pk, {"task": card.task, "cards": []})["cards"].append(card)
    for group in groups.values():
        group["cards"].sort(key=lambda c: c.step_no or 0)
    return list(groups.values())


def inbox_count(tenant_id: int) -> int:
    return sum(section.count(tenant_id) for section in SECTIONS.values()) + (
        Approval.objects.filter(tenant_id=tenant_id, status=Decision.PENDING).count()
        + Question.objects.filter(tenant_id=tenant_id, status=QuestionStatus.OPEN).count()
        + Reconciliation.objects.filter(
            tenant_id=tenant_id, status=ReconciliationStatus.OPEN
        ).count()
    )


def card_of(tenant_id: int, kind: str, pk: int) -> Card | None:
    """One card, fresh from the database (after a decision, or a refused stale one)."""
    related: tuple[str, ...] = ("task", "task__agent", "step")
    if kind == "approval":
        related = (*related, "group", "assignee")
        a = Approval.objects.select_related(*related).filter(tenant_id=tenant_id, pk=pk).first()
        return approval_card(a) if a else None
    if kind == "question":
        q = Question.objects.select_related(*related).filter(tenant_id=tenant_id, pk=pk).first()
        return question_card(q) if q else None
    if kind == "reconciliation":
        r = (
            Reconciliation.objects.select_related(*related)
            .filter(tenant_id=tenant_id, pk=pk)
            .first()
        )
        return reconciliation_card(r) if r else None
    return None


def open_card_for_task(task: Task) -> Card | None:
    """The request the task is waiting on, if it waits on a person's decision."""
    related = ("task", "task__agent", "step")
    if task.status == TaskStatus.WAITING_FOR_APPROVAL:
        a = (
            Approval.objects.select_related(*related)
            .filter(task_id=task.pk, tenant_id=task.tenant_id, status=Decision.PENDING)
            .order_by("-id")
            .first()
        )
        return approval_card(a) if a else None
    if task.status == TaskStatus.WAITING_FOR_INPUT:
        q = (
            Question.objects.select_related(*related)
            .filter(task_id=task.pk, tenant_id=task.tenant_id, status=QuestionStatus.OPEN)
            .order_by("-id")
            .first()
        )
        return question_card(q) if q else None
    if task.status == TaskStatus.WAITING_FOR_RECONCILIATION:
        r = (
            Reconciliation.objects.select_related(*related)
            .filter(task_id=task.pk, tenant_id=task.tenant_id, status=ReconciliationStatus.OPEN)
            .order_by("-id")
            .first()
        )
        return reconciliation_card(r) if r else None
    return None
