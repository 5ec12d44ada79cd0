"""Reads of the human loop."""
from __future__ import annotations

from typing import Any

from .models import Approval, Question


def pinned_human_facts(*, task_id: int, limit: int = 20) -> list[dict[str, Any]]:
    """Answers, approvals and rejections of a task, oldest first, as context facts."""
    facts: list[tuple[Any, dict[str, Any]]] = []
    for q in Question.objects.filter(task_id=task_id, status="answered").order_by("-id")[:limit]:
        facts.append((q.answered_at, {"id": f"answer:{q.pk}", "kind": "answer",
                                      "text": f"Q: {q.question}\nA (verbatim): {q.answer}"}))
    for a in (Approval.objects.filter(task_id=task_id)
              .exclude(status__in=["pending", "canceled"]).order_by("-id")[:limit]):
        text = f"{a.status.capitalize()} call of {a.tool}"
        if a.comment:
            text += f": {a.comment}"
        if a.args_diff:
            text += f" (arguments edited: {a.args_diff})"
        facts.append((a.decided_at, {"id": f"approval:{a.pk}", "kind": a.status, "text": text}))
    facts.sort(key=lambda f: (f[0] is None, f[0]))
    return [f for _, f in facts][-limit:]
