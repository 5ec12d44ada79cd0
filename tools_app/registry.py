"""The tool registry: lookups by tenant and name, frozen specs, schema checks.

Schemas are JSON Schema 2020-12. A schema an admin registers is itself checked
against the metaschema before it is stored.
"""
from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

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
        description=tool.description,
    )


def tool_specs(*, tenant_id: int, names: list[str] | None = None) -> dict[str, ToolSpec]:
    """Enabled tools of a tenant, by name (restricted to `names` when given)."""
    qs = Tool.objects.filter(tenant_id=tenant_id, enabled=True)
    if names is not None:
        qs = qs.filter(name__in=names)
    return {t.name: spec_of(t) for t in qs}


def schema_errors(schema: dict[str, Any], instance: Any) -> list[str]:
    """Readable validation errors of `instance` against `schema` (empty when valid)."""
    validator = Draft202012Validator(schema or {})
    errors = sorted(validator.iter_errors(instance), key=lambda e: list(e.path))
    return [f"{'/'.join(map(str, e.path)) or '(root)'}: {e.message}" for e in errors[:10]]


def check_schema(schema: Any) -> list[str]:
    """Errors in a JSON Schema itself (empty when it is a valid schema)."""
    if not isinstance(schema, dict):
        return ["a schema must be a JSON object"]
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        return [exc.message]
    return []
