"""The tool registry: lookups by tenant and name, frozen specs.

Schemas are checked and applied by `tools_app.schemas`.
"""
from __future__ import annotations

from .executor.types import ToolSpec
from .models import Tool


def spec_of(tool: Tool) -> ToolSpec:
    return ToolSpec(
        name=tool.name,
        kind=tool.kind,
        target=tool.target,
        url=tool.url,
        status_url=tool.status_url,
        status_tool=tool.status_tool,
        compensation_tool=tool.compensation_tool,
        secret_headers=dict(tool.secret_headers or {}),
        args_schema=dict(tool.args_schema or {}),
        result_schema=dict(tool.result_schema or {}),
        risk=tool.risk,
        requires_approval=tool.requires_approval,
        timeout_s=tool.timeout_s,
        side_effect=tool.side_effect,
        max_retries=tool.max_retries,
        retry_delays_s=tuple(float(d) for d in tool.retry_delays_s or ()),
        breaker=dict(tool.breaker or {}),
        description=tool.description,
    )


def tool_specs(*, tenant_id: int, names: list[str] | None = None) -> dict[str, ToolSpec]:
    """Enabled tools of a tenant, by name (restricted to `names` when given)."""
    qs = Tool.objects.filter(tenant_id=tenant_id, enabled=True)
    if names is not None:
        qs = qs.filter(name__in=names)
    return {t.name: spec_of(t) for t in qs}

