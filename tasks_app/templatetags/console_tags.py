"""Template helpers for the console: status labels and tones, times that read
well (relative, with the absolute time alongside), and JSON pretty-printed as
plain text. Nothing here marks anything safe: every value, model and tool
output above all, goes through Django's autoescaping."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django import template
from django.contrib.humanize.templatetags.humanize import naturaltime
from django.utils import timezone

from approvals_app.models import Decision, QuestionStatus, ReconciliationStatus
from tasks_app.console.presenters import status_label as _status_label

register = template.Library()

TONES = {
    # tasks
    "CREATED": "neutral",
    "RUNNING": "info",
    "WAITING_FOR_INPUT": "warning",
    "WAITING_FOR_APPROVAL": "warning",
    "WAITING_FOR_RECONCILIATION": "warning",
    "WAITING_FOR_HUMAN": "warning",
    "SUCCEEDED": "success",
    "FAILED": "danger",
    "CANCELED": "muted",
    # steps and the ledger
    "PENDING_APPROVAL": "warning",
    "RETRYING": "warning",
    "UNCERTAIN": "warning",
    "REJECTED": "danger",
    "DISCARDED": "muted",
    "IN_PROGRESS": "info",
    "FAILED_RETRYABLE": "warning",
    "FAILED_FINAL": "danger",
    # human requests (a question and a reconciliation are "open" alike)
    Decision.PENDING: "warning",
    QuestionStatus.OPEN: "warning",
    Decision.APPROVED: "success",
    QuestionStatus.ANSWERED: "success",
    ReconciliationStatus.RESOLVED: "success",
    Decision.RESPONDED: "info",
    Decision.REJECTED: "danger",
    Decision.EXPIRED: "muted",
    Decision.CANCELED: "muted",
    # risk
    "low": "neutral",
    "medium": "warning",
    "high": "danger",
}


@register.filter
def tone(value: Any) -> str:
    return TONES.get(str(value), "neutral")


@register.filter
def status_label(value: Any) -> str:
    return _status_label(str(value))


@register.filter
def pretty_json(value: Any) -> str:
    """Indented JSON as a plain string (the template escapes it)."""
    if value is None:
        return "null"
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


@register.filter
def compact_json(value: Any, limit: int = 120) -> str:
    """One line of JSON, cut at `limit` characters."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=str, separators=(", ", ": "))
    except (TypeError, ValueError):
        text = str(value)
    limit = int(limit)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@register.filter
def humanize_key(value: Any) -> str:
    return str(value or "").replace("_", " ")


@register.filter
def get_item(mapping: Any, key: Any) -> Any:
    try:
        return mapping.get(key)
    except AttributeError:
        return None


@register.filter
def other_errors(errors: Any, shown: str) -> list[str]:
    """Field errors for fields the form does not show (e.g. `outcome`), as lines."""
    if not errors:
        return []
    skip = set(shown.split(","))
    return [
        f"{k.replace('_', ' ')}: {m}" if k != "__all__" else m
        for k, msgs in errors.items()
        if k not in skip
        for m in msgs
    ]


@register.filter
def can_answer(console_user: Any, task: Any) -> bool:
    """Whether the signed-in console user may answer this task's question."""
    return bool(console_user) and console_user.can_answer(task)


@register.inclusion_tag("console/_time.html")
def when(value: datetime | None, style: str = "relative") -> dict[str, Any]:
    """A <time> showing "3 min ago" (kept fresh by console.js) with the absolute UTC time."""
    if value is None:
        return {"value": None}
    local = timezone.localtime(value)
    return {
        "value": value,
        "iso": value.isoformat(),
        "absolute": local.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "clock": local.strftime("%H:%M:%S"),
        "relative": naturaltime(value),
        "style": style,
    }


@register.filter
def reply_rows(steps: list[Any]) -> list[list[Any]]:
    """Steps (`StepView`s, in order) as rows: the tool calls of one model reply
    together (each one's `from_reply_of_step` is the step before it), shown
    side by side; every other step a row of its own."""
    rows: list[list[Any]] = []
    for view in steps:
        step = view.step
        joins = (rows and step.kind == "tool" and rows[-1][-1].step.kind == "tool"
                 and (step.model_log or {}).get("from_reply_of_step") == rows[-1][-1].step.step_no)
        if joins:
            rows[-1].append(view)
        else:
            rows.append([view])
    return rows
