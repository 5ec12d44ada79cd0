"""Budget checks: pure functions of a snapshot.

Each budget is checked where spending it is decided: steps and duration before
every step; model calls and tokens before asking the model (a decision queued
from an earlier reply costs neither); tool calls and per-tool limits when a
tool call is proposed (so a task that used its tool calls can still answer).
Cost (`max_cost`, dollars) is checked before asking the model and again when a
tool call is proposed, i.e. after the reply's cost was recorded: a reply that
went over the budget runs no tool (a final answer it gave is still accepted:
it was paid for and costs nothing more).
Limits are the profile's budget plus any extension granted on resume.
"""
from __future__ import annotations

from datetime import datetime

from ..pricing import money, to_pico
from ..snapshot import TaskSnapshot


def exhausted_budget(snap: TaskSnapshot, now: datetime, *, asking_model: bool = True) -> str | None:
    """The first budget the task has used up before its next step, or None."""
    if snap.steps_count >= snap.limit("max_steps"):
        return "max_steps"
    if asking_model and snap.model_calls >= snap.limit("max_model_calls"):
        return "max_model_calls"
    if asking_model and snap.tokens >= snap.limit("max_tokens"):
        return "max_tokens"
    if asking_model and cost_exhausted(snap):
        return "max_cost"
    if snap.started_at is not None:
        elapsed = (now - snap.started_at).total_seconds()
        if elapsed >= snap.limit("max_duration_s"):
            return "max_duration_s"
    return None


def tool_calls_exhausted(snap: TaskSnapshot) -> bool:
    return snap.tool_calls >= snap.limit("max_tool_calls")


def per_tool_limit(snap: TaskSnapshot, tool: str) -> int | None:
    limits = (snap.agent.get("budget") or {}).get("per_tool") or {}
    if tool not in limits:
        return None
    extra = (snap.budget_extension.get("per_tool") or {}).get(tool, 0)
    return int(limits[tool]) + int(extra)


def per_tool_exhausted(snap: TaskSnapshot, tool: str) -> bool:
    limit = per_tool_limit(snap, tool)
    return limit is not None and snap.per_tool.get(tool, 0) >= limit


def past_deadline(snap: TaskSnapshot, now: datetime) -> bool:
    return snap.deadline_at is not None and now >= snap.deadline_at


def cost_limit_pico(snap: TaskSnapshot) -> int | None:
    """The task's `max_cost` plus any extension, in pico-dollars; None: no limit."""
    base = money((snap.agent.get("budget") or {}).get("max_cost"))
    if base is None:
        return None
    return to_pico(base + (money(snap.budget_extension.get("max_cost")) or 0))


def cost_exhausted(snap: TaskSnapshot) -> bool:
    limit = cost_limit_pico(snap)
    return limit is not None and snap.cost_pico >= limit
