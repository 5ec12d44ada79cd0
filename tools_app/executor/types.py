"""Frozen data handed to and returned from tool calls (never ORM objects)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal


@dataclass(frozen=True)
class ToolSpec:
    name: str
    kind: str
    target: str = ""
    url: str = ""
    status_url: str = ""
    status_tool: str = ""
    compensation_tool: str = ""
    resource: str = ""  # a template over the arguments (`tools_app.resources`)
    secret_headers: dict[str, str] = field(default_factory=dict)
    args_schema: dict[str, Any] = field(default_factory=dict)
    result_schema: dict[str, Any] = field(default_factory=dict)
    risk: str = "low"
    requires_approval: bool = False
    timeout_s: float = 10.0
    side_effect: str = "read"
    max_retries: int = 3
    description: str = ""
    # mcp tools: the server's name and, for a stdio server, the operator's command
    # name (`target` is then the tool's name on the server, `url` the server's).
    mcp_server: str = ""
    mcp_stdio: str = ""
    retry_delays_s: tuple[float, ...] = ()  # per-tool retry policy (`tools_app.breakers.policy`)
    breaker: dict[str, Any] = field(default_factory=dict)  # per-tool breaker thresholds
    rate_limit: dict[str, Any] = field(default_factory=dict)  # {requests_per_minute} (`ratelimits`)

    @property
    def honours_keys(self) -> bool:
        """Whether calling again with the same key is safe (no second effect)."""
        return self.side_effect in ("read", "idempotent_write")


@dataclass(frozen=True)
class ToolContext:
    """What a python tool is told about the call it serves."""

    idempotency_key: str
    task_id: int
    step_id: int
    tenant_id: int
    trace_id: str
    # "resource#token" while the call holds its resource's lease (`tasks_app.leases`):
    # a downstream that keeps the highest token seen can refuse a stale holder.
    fence: str = ""


@dataclass(frozen=True)
class ToolCall:
    spec: ToolSpec
    args: dict[str, Any]
    context: ToolContext
    # The spec's secret headers rendered for the task's tenant: set by the
    # dispatcher for the call only, never stored, never in a repr.
    resolved_headers: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)


class OutcomeKind(StrEnum):
    OK = "ok"
    BUSINESS = "business"  # structured error back to the model
    PERMISSION = "permission"  # stop the task
    TRANSIENT = "transient"  # retry with backoff, same key
    UNCERTAIN = "uncertain"  # effect unknown: status query, else a human
    PROCESSING = "processing"  # another executor holds this key right now


@dataclass(frozen=True)
class ToolOutcome:
    kind: OutcomeKind
    result: Any = None
    error: dict[str, Any] | None = None
    retry_after_s: float | None = None
    latency_ms: int = 0
    from_ledger: bool = False  # answered from the ledger, the tool was not called
    status_answer: dict[str, Any] | None = None


@dataclass(frozen=True)
class StatusAnswer:
    state: Literal["succeeded", "failed", "not_found", "unknown"]
    result: Any = None
    detail: str = ""
