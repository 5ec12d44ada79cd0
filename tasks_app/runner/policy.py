"""Policy on a proposed tool call: a pure function of the decision, the tool
spec and the task snapshot. The model only proposes; this decides.

Order: allow-list, registration, argument schema (all "invalid": fed back to
the model), then the task's tool-call and cost budgets ("budget": the task
fails or escalates), then what the tenant's approval rules and the requester's
scope say (`approvals_app.policy.Gate`: "denied" is fed back to the model as a
typed refusal, "authorize" waits for a grant), and without a rule whether the
tool itself needs a person's approval; and whether the model's confidence in
the call is below the agent's `min_confidence` (then a person approves it).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from approvals_app.gates import DEFAULT, Gate
from tools_app.executor.types import ToolSpec
from tools_app.schemas import schema_errors

from ..gateway.base import Decision
from ..pricing import pico_text
from ..snapshot import TaskSnapshot
from .budgets import (
    cost_exhausted,
    cost_limit_pico,
    per_tool_exhausted,
    per_tool_limit,
    tool_calls_exhausted,
)

Verdict = Literal["run", "approve", "invalid", "budget", "denied", "authorize"]


@dataclass(frozen=True)
class PolicyResult:
    verdict: Verdict
    error: dict[str, Any] | None = None
    gate: Gate = DEFAULT


def check_tool_call(
    decision: Decision,
    *,
    spec: ToolSpec | None,
    snap: TaskSnapshot,
    always_allowed: frozenset[str] = frozenset(),
    gate: Gate = DEFAULT,
) -> PolicyResult:
    tool = decision.tool
    allowed = snap.agent.get("tools") or []
    if decision.check is not None:  # a completion check: the profile's, not the model's tools
        allowed = [c.get("tool") for c in snap.agent.get("completion_checks") or []]
    if tool not in allowed:
        return PolicyResult("invalid", {
            "type": "unknown_tool", "tool": tool[:100], "available": list(allowed),
            "message": f"tool {tool[:100]!r} is not available to this agent"})
    if spec is None:
        return PolicyResult("invalid", {
            "type": "unknown_tool", "tool": tool,
            "message": f"tool {tool!r} is not registered or disabled"})
    errors = schema_errors(spec.args_schema, decision.args)
    if errors:
        return PolicyResult("invalid", {
            "type": "invalid_arguments", "tool": tool, "errors": errors,
            "message": "the arguments do not match the tool's schema"})
    if tool_calls_exhausted(snap):
        return PolicyResult("budget", {
            "type": "budget_exhausted", "budget": "max_tool_calls", "tool": tool,
            "used": snap.tool_calls, "limit": snap.limit("max_tool_calls"),
            "message": "the task has used all its tool calls"})
    if per_tool_exhausted(snap, tool):
        return PolicyResult("budget", {
            "type": "budget_exhausted", "budget": "per_tool_limit", "tool": tool,
            "used": snap.per_tool.get(tool, 0), "limit": per_tool_limit(snap, tool),
            "message": f"the task has used all its calls of {tool}"})
    if cost_exhausted(snap):
        return PolicyResult("budget", {
            "type": "budget_exhausted", "budget": "max_cost", "tool": tool,
            "used": pico_text(snap.cost_pico), "limit": pico_text(cost_limit_pico(snap) or 0),
            "message": "the task has spent its cost budget"})
    if gate.action == "deny":
        return PolicyResult("denied", {
            "type": "denied_by_rule", "tool": tool, "rule": (gate.rule or {}).get("name"),
            "message": gate.message}, gate)
    if gate.action == "authorize":
        return PolicyResult("authorize", gate=gate)
    if gate.action == "approve":
        return PolicyResult("approve", gate=gate)
    if below_confidence(snap, decision):  # whatever a rule or a reviewer allowed: this call
        return PolicyResult("approve", {"type": "low_confidence",
                                        "confidence": decision.confidence,
                                        "min_confidence": snap.agent.get("min_confidence")})
    if gate.action == "run":
        return PolicyResult("run", gate=gate)
    # no rule: the tool's own default ("always allow" is a reviewer's word on it)
    if spec.requires_approval and tool not in always_allowed:
        return PolicyResult("approve")
    return PolicyResult("run")


def below_confidence(snap: TaskSnapshot, decision: Decision) -> bool:
    """Did the model say it is less sure of `decision` than the agent's
    `min_confidence` allows? A decision that gives no confidence is judged by
    the other rules alone."""
    threshold = snap.agent.get("min_confidence")
    return (threshold is not None and decision.confidence is not None
            and decision.confidence < threshold)
