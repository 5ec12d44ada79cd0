"""The tool registry: lookups by tenant and name, frozen specs.

Schemas are checked and applied by `tools_app.schemas`. An mcp tool's spec
carries its server's address and secret headers; until an admin confirms its
settings (`Tool.review`), it is a plain `write` that needs approval, whatever
the server's annotations suggested. A disabled server's tools are not offered.

The runner reads an agent's tools at every slice's start, so `tool_specs` is
one statement built once from the models' `_meta` (the store's backend
runs it: prepared on PostgreSQL),
not a query the ORM compiles on every call: with its join, compiling it was
a tenth of a busy worker's CPU. It is read fresh every time: a tool an admin
fixes applies to the very next slice, in whichever process.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import cache
from typing import Any

from django.db import connection, models

from tasks_app.store.backends import backend
from tasks_app.store.sql import column

from .executor.types import ToolSpec
from .models import McpServer, SideEffect, Tool, ToolKind

# the spec's fields that are the tool's columns as they are
SPEC_AS_SAVED = ("name", "kind", "target", "url", "status_url", "status_tool", "compensation_tool",
                 "resource", "risk", "requires_approval", "timeout_s", "side_effect",
                 "max_retries", "description")
TOOL_FIELDS = (*SPEC_AS_SAVED, "secret_headers", "args_schema", "result_schema", "retry_delays_s",
               "breaker", "rate_limit", "review")
SERVER_FIELDS = ("name", "url", "stdio", "secret_headers")


@cache
def _specs_sql(names: int | None) -> str:
    """The enabled tools of a tenant whose server, if any, is enabled; with
    `names` placeholders for the names asked for."""
    t, s = Tool, McpServer
    select = ", ".join([f"t.{column(t, f)}" for f in TOOL_FIELDS]
                       + [f"s.{column(s, f)}" for f in SERVER_FIELDS])
    sql = (f"SELECT {select} FROM {t._meta.db_table} t"
           f" LEFT JOIN {s._meta.db_table} s ON s.id = t.{column(t, 'mcp_server')}"
           f" WHERE t.{column(t, 'tenant')} = %s AND t.{column(t, 'enabled')}"
           f" AND (t.{column(t, 'mcp_server')} IS NULL OR s.{column(s, 'enabled')})")
    if names is not None:
        sql += f" AND t.{column(t, 'name')} IN ({', '.join(['%s'] * names)})"
    return sql


def _values(model: type[models.Model], fields: tuple[str, ...],
            row: tuple[Any, ...]) -> dict[str, Any]:
    """A row's columns as the ORM would give them (JSON decoded, booleans as such)."""
    return {name: convert(value) for (name, convert), value
            in zip(_converters(model, fields), row, strict=True)}


@cache
def _converters(model: type[models.Model],
                fields: tuple[str, ...]) -> tuple[tuple[str, Callable[[Any], Any]], ...]:
    def of(field: Any) -> Callable[[Any], Any]:
        if isinstance(field, models.JSONField):
            return lambda value: field.from_db_value(value, None, connection)  # type: ignore[arg-type]  # a plain column
        if isinstance(field, models.BooleanField):
            return bool
        return lambda value: value

    return tuple((name, of(model._meta.get_field(name))) for name in fields)


def _spec_of(row: tuple[Any, ...]) -> ToolSpec:
    tool = _values(Tool, TOOL_FIELDS, row[:len(TOOL_FIELDS)])
    server = row[len(TOOL_FIELDS):]
    spec = ToolSpec(
        **{name: tool[name] for name in SPEC_AS_SAVED},
        secret_headers=dict(tool["secret_headers"] or {}),
        args_schema=dict(tool["args_schema"] or {}),
        result_schema=dict(tool["result_schema"] or {}),
        retry_delays_s=tuple(float(d) for d in tool["retry_delays_s"] or ()),
        breaker=dict(tool["breaker"] or {}),
        rate_limit=dict(tool["rate_limit"] or {}),
    )
    if tool["kind"] == ToolKind.MCP and server[0] is not None:
        mcp = _values(McpServer, SERVER_FIELDS, server)
        spec = replace(spec, url=mcp["url"], secret_headers=dict(mcp["secret_headers"] or {}),
                       mcp_server=mcp["name"], mcp_stdio=mcp["stdio"])
        if tool["review"]:  # the server's hints are not yet an admin's word
            spec = replace(spec, side_effect=SideEffect.WRITE.value, requires_approval=True)
    return spec


def tool_specs(*, tenant_id: int, names: list[str] | None = None) -> dict[str, ToolSpec]:
    """Enabled tools of a tenant, by name (restricted to `names` when given)."""
    if names is not None and not names:
        return {}
    sql = _specs_sql(None if names is None else len(names))
    rows = backend().fetch_all(sql, [tenant_id, *(names or [])])
    return {spec.name: spec for spec in map(_spec_of, rows)}
