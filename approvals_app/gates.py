"""What the approval rules and the requester's scope say of one tool call
(`approvals_app.policy.gate_for` decides it; the runner's policy and the
opening of its approval read it). A plain value, below everything that uses it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

AUTHORIZATION = "authorization"  # an approval's kind: the call is outside the requester's scope

GateAction = Literal["default", "run", "approve", "deny", "authorize"]


@dataclass(frozen=True)
class Gate:
    """`default`: no rule matched, the tool's own `requires_approval` decides;
    `run`, `approve` (`approvals` distinct reviewers; `group_required`: only
    the group's members), `deny` (`message` is told to the model), `authorize`."""

    action: GateAction
    rule: dict[str, Any] | None = None  # the rule that applied, as the card shows it
    approvals: int = 1
    group_id: int | None = None
    group_required: bool = False
    sla_s: int = 0
    on_expiry: str = ""
    escalate_to_id: int | None = None
    message: str = ""


DEFAULT = Gate("default")
