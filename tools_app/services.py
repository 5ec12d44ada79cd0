"""Tool registrations: create, update, enable/disable, each field checked before it is stored.

- An `http` tool is registrable without writing Python: `url` (POSTed to with
  the arguments), an optional `status_url` with `{key}` (GET, "did key K
  happen?"), secret headers as templates naming secrets of the tool's own
  tenant (`{"Authorization": "Bearer {secret:payments}"}`; values are never
  stored on the tool), schemas, side effect, risk, timeout and retries.
- Retries and the circuit breaker: `max_retries` with `retry_delays_s` (the
  wait before each retry, the last repeated: `[0, 30]` is "at once, then
  cool down") and `breaker` thresholds (`tools_app.breakers.policy`).
- A `python` tool names a dotted path to server code. Registering one loads
  that code, so its module must sit under a prefix the setting
  `TETHER_PYTHON_TOOL_MODULES` grants to the tool's tenant: `prefix` for
  every tenant, `tenant:prefix` for the tenant of that name only. The default,
  `demo:tools_app.demo.`, gives the demo tools to the demo tenant alone: they
  read and write global tables (the demo store), not a tenant's own data.
- `url` and `status_url` must pass the outbound-address policy
  (`tools_app.outbound`): resolved now, and checked again at every call.
- `resource` (optional) names what a call touches, a template over its
  arguments (`tools_app.resources`); calls on one resource never overlap.
- `args_schema` and `result_schema` are JSON Schema 2020-12, checked against
  the metaschema and bounded (`tools_app.schemas`); arguments are always an
  object.
- An `mcp` tool comes from a registered MCP server (`tools_app.mcp`), never
  from here; saving its settings confirms them (`Tool.review`), and what the
  server owns (its name there, schemas, address) cannot be changed here.

Every refusal is a `DomainError` with field errors; nothing is written then.
Every change is an audit entry (`audit_app`) in its own transaction.
A tool's name is its identity (agent profiles and steps refer to it) and
cannot change; names that are console routes (`/tools/new/`) are reserved.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import URLValidator
from django.utils.module_loading import import_string

from accounts_app.models import Tenant
from accounts_app.selectors import missing_secret_names
from accounts_app.vault.references import EXAMPLE, header_secret_names, template_errors
from audit_app.services import audit_record
from foundations.actors import SYSTEM, Actor
from foundations.errors import invalid
from foundations.named_resources import NamedResource, model_field_errors

from .breakers import breaker_errors, retry_delays_errors
from .models import Review, Risk, SideEffect, Tool, ToolKind
from .outbound import url_problem
from .ratelimits import rate_limit_errors
from .resources import resource_template_errors
from .schemas import check_schema

NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")
DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+")
HEADER = re.compile(r"[A-Za-z0-9-]{1,64}")
RESERVED_HEADERS = {
    "idempotency-key",
    "x-tether-task",
    "traceparent",
    "content-type",
    "content-length",
}
EDITABLE = (
    "description",
    "kind",
    "target",
    "url",
    "status_url",
    "status_tool",
    "compensation_tool",
    "resource",
    "secret_headers",
    "args_schema",
    "result_schema",
    "risk",
    "requires_approval",
    "timeout_s",
    "side_effect",
    "max_retries",
    "retry_delays_s",
    "breaker",
    "rate_limit",
    "enabled",
)
# What an mcp tool's server decides; an admin's save may repeat it, not change it.
MCP_SERVER_OWNED = ("kind", "target", "url", "status_url", "secret_headers", "args_schema",
                    "result_schema")
# Names a tool cannot take: its console page would be a route of the console.
RESERVED_NAMES = frozenset({"new", "mcp"})
MAX_TIMEOUT_S = 600.0
MAX_RETRIES = 20
_http_url = URLValidator(schemes=["http", "https"])


def tool_create(*, tenant_id: int, name: str, actor: Actor = SYSTEM, **fields: Any) -> Tool:
    TOOLS.refuse_unknown(fields)
    if fields.get("kind") == ToolKind.MCP:
        raise invalid("invalid", "The request is not valid.", kind=[
            "mcp tools come from a registered MCP server: POST /api/v1/mcp-servers"])
    return TOOLS.create(tenant_id=tenant_id, name=name, fields=fields, actor=actor,
                        defaults={"args_schema": {"type": "object"}})


def tool_update(*, tenant_id: int, name: str, changes: dict[str, Any],
                actor: Actor = SYSTEM) -> Tool:
    """Change some fields; the merged registration is checked as a whole."""
    return TOOLS.update(tenant_id=tenant_id, name=name, changes=changes, actor=actor,
                        prepare=_confirm_mcp_tool)


def tool_set_enabled(*, tenant_id: int, name: str, enabled: bool,
                     actor: Actor = SYSTEM) -> Tool:
    return tool_update(tenant_id=tenant_id, name=name, changes={"enabled": enabled}, actor=actor)


def tool_audited(tool: Tool) -> dict[str, Any]:
    """A registration as the audit log shows it (secret headers name secrets, never values)."""
    return {field: getattr(tool, field) for field in EDITABLE}


def tool_audit(tool: Tool, *, actor: Actor, action: str, before: dict[str, Any] | None) -> None:
    """The audit entry of a change to `tool` (as it now stands), in the caller's transaction."""
    audit_record(actor=actor, tenant_id=tool.tenant_id, kind="tool", name=tool.name,
                 action=action, before=before, after=tool_audited(tool), object_id=tool.pk)


def _confirm_mcp_tool(tool: Tool, changes: dict[str, Any]) -> None:
    """Saving an mcp tool's settings (any other kind passes) is the admin's word
    on them: it is confirmed (a tool disabled by a changed schema is enabled again
    unless the save says otherwise). What the server owns (its name, schemas,
    address) cannot change here."""
    if tool.kind != ToolKind.MCP:
        return
    owned = [f for f in MCP_SERVER_OWNED if f in changes and changes[f] != getattr(tool, f)]
    if owned:
        raise invalid("invalid", "The request is not valid.", **{
            f: ["set by the MCP server: refresh the server to change it"] for f in owned})
    if tool.review == Review.GONE:
        if changes.get("enabled"):
            raise invalid("invalid", "The request is not valid.", enabled=[
                "the MCP server no longer lists this tool"])
        return
    if tool.review == Review.SCHEMA_CHANGED and "enabled" not in changes:
        tool.enabled = True
    tool.review = Review.CONFIRMED


AddError = Callable[[str, str], None]


def tool_errors(tool: Tool) -> dict[str, list[str]]:
    """Field errors of a registration as a whole (empty when it may be stored):
    its kind's own fields, what it names (status and compensation tools,
    secrets), its schemas, and how it is called. Fills the empty defaults of
    the optional JSON fields on `tool` as it goes."""
    errors: dict[str, list[str]] = {}

    def add(field: str, message: str) -> None:
        errors.setdefault(field, []).append(message)

    _kind_errors(tool, add)
    _named_errors(tool, add)
    _schema_errors(tool, add)
    _call_errors(tool, add)
    return errors or model_field_errors(tool)


def _kind_errors(tool: Tool, add: AddError) -> None:
    """An http tool has a URL, a python tool a target, an mcp tool its server."""
    if tool.kind == ToolKind.HTTP:
        if not tool.url:
            add("url", "an http tool needs the URL it is POSTed to")
        elif not is_http_url(tool.url):
            add("url", "an http(s) URL")
        elif problem := url_problem(tool.url):
            add("url", problem)
        if tool.target:
            add("target", "only python tools have a target")
    elif tool.kind == ToolKind.PYTHON:
        if not tool.target:
            add("target", "a python tool needs the dotted path of its function")
        else:
            problem = _python_callable_problem(tool.target, tool.tenant_id)
            if problem:
                add("target", problem)
        if tool.url:
            add("url", "only http tools have a URL")
    elif tool.kind == ToolKind.MCP:
        if tool.mcp_server_id is None or not tool.target:
            add("kind", "mcp tools come from a registered MCP server")
        if tool.url or tool.status_url:
            add("url", "an mcp tool is reached through its server")
    else:
        add("kind", f"one of {', '.join(ToolKind.values)}")


def _named_errors(tool: Tool, add: AddError) -> None:
    """What the tool names: how its status is asked, what compensates it, its secrets."""
    if tool.status_url:
        if "{key}" not in tool.status_url:
            add("status_url", "must contain {key}, where the idempotency key goes")
        elif not is_http_url(tool.status_url.replace("{key}", "k")):
            add("status_url", "an http(s) URL")
        elif problem := url_problem(tool.status_url.replace("{key}", "k")):
            add("status_url", problem)
    if tool.status_tool:
        if tool.status_url:
            add("status_tool", "give a status_url or a status_tool, not both")
        problem = _python_callable_problem(tool.status_tool, tool.tenant_id)
        if problem:
            add("status_tool", problem)
    if tool.compensation_tool:
        if tool.compensation_tool == tool.name:
            add("compensation_tool", "a tool cannot compensate itself")
        elif not Tool.objects.filter(
            tenant_id=tool.tenant_id, name=tool.compensation_tool
        ).exists():
            add("compensation_tool", f"no tool named {tool.compensation_tool!r} in this tenant")
    for problem in secret_header_errors(tool.tenant_id, tool.secret_headers):
        add("secret_headers", problem)


def _schema_errors(tool: Tool, add: AddError) -> None:
    """The arguments' schema (an object), the result's, and the resource template."""
    schema_problems = check_schema(tool.args_schema)
    for problem in schema_problems:
        add("args_schema", problem)
    if not schema_problems and tool.args_schema.get("type") != "object":
        add("args_schema", 'arguments are a JSON object: the schema needs "type": "object"')
    if tool.result_schema not in ({}, None):
        for problem in check_schema(tool.result_schema):
            add("result_schema", problem)
    if tool.result_schema is None:
        tool.result_schema = {}
    if not schema_problems:
        for problem in resource_template_errors(tool.resource, tool.args_schema):
            add("resource", problem)


def _call_errors(tool: Tool, add: AddError) -> None:
    """How it is called: side effect, risk, time limit, retries, breaker, rate limit, flags."""
    if tool.side_effect not in SideEffect.values:
        add("side_effect", f"one of {', '.join(SideEffect.values)}")
    if tool.risk not in Risk.values:
        add("risk", f"one of {', '.join(Risk.values)}")
    if (
        not isinstance(tool.timeout_s, int | float)
        or isinstance(tool.timeout_s, bool)
        or not 0 < tool.timeout_s <= MAX_TIMEOUT_S
    ):
        add("timeout_s", f"seconds, more than 0 and at most {MAX_TIMEOUT_S:g}")
    if (
        not isinstance(tool.max_retries, int)
        or isinstance(tool.max_retries, bool)
        or not 0 <= tool.max_retries <= MAX_RETRIES
    ):
        add("max_retries", f"an integer from 0 to {MAX_RETRIES}")
    for problem in retry_delays_errors(tool.retry_delays_s):
        add("retry_delays_s", problem)
    for problem in breaker_errors(tool.breaker):
        add("breaker", problem)
    for problem in rate_limit_errors(tool.rate_limit or None, tokens=False):
        add("rate_limit", problem)
    if tool.rate_limit and tool.kind not in ("http", "mcp"):
        add("rate_limit", "only an http or mcp tool has a rate limit (a python tool is the "
                          "deployment's own code)")
    if tool.rate_limit is None:
        tool.rate_limit = {}
    if tool.retry_delays_s is None:
        tool.retry_delays_s = []
    if tool.breaker is None:
        tool.breaker = {}
    for flag in ("requires_approval", "enabled"):
        if not isinstance(getattr(tool, flag), bool):
            add(flag, "true or false")


def secret_header_errors(tenant_id: int, headers: Any,
                         reserved: frozenset[str] | set[str] = RESERVED_HEADERS) -> list[str]:
    """Problems of `{header: template naming the tenant's secrets}` (http tools, MCP servers)."""
    if not isinstance(headers, dict):
        return [f"an object {{header name: template, e.g. {EXAMPLE!r}}}"]
    problems = []
    for header, template in headers.items():
        if not HEADER.fullmatch(str(header)) or str(header).lower() in reserved:
            problems.append(f"{header!r} is not a header name Tether lets you set")
        problems.extend(f"{header}: {problem}" for problem in template_errors(template))
    missing = missing_secret_names(tenant_id, header_secret_names(headers))
    problems.extend(f"no secret named {name!r} in this tenant" for name in missing)
    return problems


def is_http_url(value: str) -> bool:
    try:
        _http_url(value)
    except DjangoValidationError:
        return False
    return True


def python_module_prefixes(tenant_name: str) -> tuple[str, ...]:
    """The module prefixes `TETHER_PYTHON_TOOL_MODULES` grants to this tenant."""
    prefixes = []
    for grant in settings.TETHER_PYTHON_TOOL_MODULES:
        tenant, _, prefix = grant.rpartition(":")
        if prefix and tenant in ("", tenant_name):
            prefixes.append(prefix)
    return tuple(prefixes)


def _python_callable_problem(path: str, tenant_id: int | None) -> str | None:
    if not isinstance(path, str) or not DOTTED.fullmatch(path):
        return "a dotted path such as package.module.function"
    tenant = Tenant.objects.filter(pk=tenant_id).first() if tenant_id is not None else None
    prefixes = python_module_prefixes(tenant.name if tenant else "")
    if not prefixes or not path.startswith(prefixes):
        granted = ", ".join(prefixes) or "none"
        return (
            "python tools must live under a module prefix granted to this tenant: "
            f"{granted} (TETHER_PYTHON_TOOL_MODULES)"
        )
    try:
        target = import_string(path)
    except (ImportError, ValueError):
        return f"cannot import {path}"
    if not callable(target):
        return f"{path} is not callable"
    return None


TOOLS = NamedResource(
    model=Tool, noun="tool", article="a", editable=EDITABLE, errors=tool_errors,
    audit=tool_audit, audited=tool_audited, name_pattern=NAME,
    name_rule="letters, digits, _ and -, starting with a letter (max 64)",
    reserved=RESERVED_NAMES, rename_hint="register a new tool instead",
)
