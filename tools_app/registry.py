"""The tool registry: lookups by tenant and name, frozen specs.

Schemas are checked and applied by `tools_app.schemas`. An mcp tool's spec
carries its server's address and secret headers; until an admin confirms its
settings (`Tool.review`), it is a plain `write` that needs approval, whatever
the server's annotations suggested. A disabled server's tools are not offered.
"""
from __future__ import annotations

from dataclasses import replace

from django.db.models import Q

from .executor.types import ToolSpec
from .models import SideEffect, Tool, ToolKind


def spec_of(tool: Tool) -> ToolSpec:
    spec = ToolSpec(
        name=tool.name,
        kind=tool.kind,
        target=tool.target,
        url=tool.url,
        status_url=tool.status_url,
        status_tool=tool.status_tool,
        compensation_tool=tool.compensation_tool,
        resource=tool.resource,
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
    if tool.kind == ToolKind.MCP and tool.mcp_server is not None:
        server = tool.mcp_server
        spec = replace(spec, url=server.url, secret_headers=dict(server.secret_headers or {}),
                       mcp_server=server.name, mcp_stdio=server.stdio)
        if tool.review:  # the server's hints are not yet an admin's word
            spec = replace(spec, side_effect=SideEffect.WRITE.value, requires_approval=True)
    return spec


def tool_specs(*, tenant_id: int, names: list[str] | None = None) -> dict[str, ToolSpec]:
    """Enabled tools of a tenant, by name (restricted to `names` when given)."""
    qs = (Tool.objects.filter(tenant_id=tenant_id, enabled=True)
          .filter(Q(mcp_server__isnull=True) | Q(mcp_server__enabled=True))
          .select_related("mcp_server"))
    if names is not None:
        qs = qs.filter(name__in=names)
    return {t.name: spec_of(t) for t in qs}
