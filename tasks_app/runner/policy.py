"""Policy on a proposed tool call: a pure function of the decision, the tool
spec and the task snapshot. The model only proposes; this decides."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tools_app.executor.types import ToolSpec
from tools_app.registry import schema_errors

from ..gateway.base import Decision
from .budgets import per_tool_exhausted
from .snapshot import TaskSnapshot

Verdict = Literal["run", "approve", "invalid", "budget"]


@dataclass(frozen=True)
class PolicyResult:
    verdict: Verdict
    error: dict | None = None


def check_tool_call(
    decision: Decision,
    *,
    spec: ToolSpec | None,
    snap: TaskSnapshot,
    always_allowed: frozenset[str] = frozenset(),
) -> PolicyResult:
    allowed = snap.agent.get("tools") or []
    if decision.tool not in allowed:
        return PolicyResult("invalid", {"type": "unknown_tool", "tool": decision.tool,
                                        "message": f"tool {decision.tool!r} is not available to this agent",
                                        "available": list(allowed)})
    if spec is None:
        return PolicyResult("invalid", {"type": "unknown_tool", "tool": decision.tool,
                                        "message": f"tool {decision.tool!r} is not registered or disabled"})
    errors = schema_errors(spec.args_schema, decision.args)
    if errors:
        return PolicyResult("invalid", {"type": "invalid_arguments", "tool": decision.tool,
                                        "message": "the arguments do not match the tool's schema",
                                        "errors": errors})
    if per_tool_exhausted(snap, decision.tool):
        return PolicyResult("budget", {"type": "per_tool_limit", "tool": decision.tool})
    if spec.requires_approval and decision.tool not in always_allowed:
        return PolicyResult("approve")
    return PolicyResult("run")
