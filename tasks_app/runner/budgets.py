"""Budget checks: pure functions of a snapshot."""
from __future__ import annotations

from datetime import datetime

from .snapshot import TaskSnapshot


def exhausted_budget(snap: TaskSnapshot, now: datetime) -> str | None:
    """The first budget the task has used up before asking the model again, or None."""
    if snap.steps_count >= snap.limit("max_steps"):
        return "max_steps"
    if snap.model_calls >= snap.limit("max_model_calls"):
        return "max_model_calls"
    if snap.tokens >= snap.limit("max_tokens"):
        return "max_tokens"
    if snap.tool_calls >= snap.limit("max_tool_calls"):
        return "max_tool_calls"
    if snap.started_at is not None:
        elapsed = (now - snap.started_at).total_seconds()
        if elapsed >= snap.limit("max_duration_s"):
            return "max_duration_s"
    return None


def per_tool_exhausted(snap: TaskSnapshot, tool: str) -> bool:
    limits = (snap.agent.get("budget") or {}).get("per_tool") or {}
    if tool not in limits:
        return False
    return snap.per_tool.get(tool, 0) >= int(limits[tool])


def past_deadline(snap: TaskSnapshot, now: datetime) -> bool:
    return snap.deadline_at is not None and now >= snap.deadline_at
