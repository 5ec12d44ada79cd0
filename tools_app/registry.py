"""The tool registry: lookups by tenant and name, frozen specs.

Schemas are checked and applied by `tools_app.schemas`. An mcp tool's spec
carries its server's address and secret headers; until an admin confirms its
settings (`Tool.review`), it is a plain `write` that needs approval, whatever
the server's annotations suggested. A disabled server's tools are not offered.

The runner reads an agent's tools at the start of every slice: `recent_tool_specs`
serves them from what this process read less than `SPECS_FRESH_S` ago (the
ORM compiling that join was a tenth of a busy worker's CPU). A change saved
in this process clears it at once; one saved elsewhere (the console, another
worker) applies within `SPECS_FRESH_S`, on top of the slice's own lag (the
slice memo).
"""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

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


SPECS_FRESH_S = 1.0
_RECENT_MAX = 1024  # (tenant, tool list) entries kept before all are dropped

_recent: dict[tuple[int, tuple[str, ...]], tuple[float, dict[str, ToolSpec]]] = {}


def recent_tool_specs(*, tenant_id: int, names: list[str]) -> dict[str, ToolSpec]:
    """`tool_specs`, as this process read them at most `SPECS_FRESH_S` ago."""
    key = (tenant_id, tuple(names))
    now = time.monotonic()
    held = _recent.get(key)
    if held is not None and now - held[0] < SPECS_FRESH_S:
        return dict(held[1])
    specs = tool_specs(tenant_id=tenant_id, names=names)
    if len(_recent) >= _RECENT_MAX:
        _recent.clear()
    _recent[key] = (now, specs)
    return dict(specs)


def forget_recent_specs(**_: Any) -> None:
    """Drop what `recent_tool_specs` holds (connected to the tools' and
    servers' save and delete signals)."""
    _recent.clear()


def tool_specs(*, tenant_id: int, names: list[str] | None = None) -> dict[str, ToolSpec]:
    """Enabled tools of a tenant, by name (restricted to `names` when given)."""
    qs = (Tool.objects.filter(tenant_id=tenant_id, enabled=True)
          .filter(Q(mcp_server__isnull=True) | Q(mcp_server__enabled=True))
          .select_related("mcp_server"))
    if names is not None:
        qs = qs.filter(name__in=names)
    return {t.name: spec_of(t) for t in qs}
