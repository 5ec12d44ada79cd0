"""A server's tool listing as Tether tools: names, schemas, hint defaults, what changed.

Pure functions of the listing (no database, no network), so the rules are in one place:

- a tool becomes `{server}__{tool}`: a valid function name for every model
  backend (`[A-Za-z0-9_-]`, at most 64 characters). A tool whose name cannot
  be one is skipped with a reason, never renamed (two names could collide);
- its input schema is the argument schema and its output schema the result
  schema, each through `tools_app.schemas.check_schema`: a schema Tether would
  refuse from an admin is refused from a server too, for that tool only;
- annotations (`readOnlyHint`, `idempotentHint`, `destructiveHint`) are hints
  of an untrusted server: they only prefill the settings an admin confirms.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types

from ..executor.jsonsafe import storable_text
from ..models import Risk, SideEffect
from ..schemas import check_schema

SEP = "__"
MAX_NAME = 64
MAX_TOOLS = 200
MAX_DESCRIPTION = 5000
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]+")
HINTS = {"read_only_hint": "readOnlyHint", "idempotent_hint": "idempotentHint",
         "destructive_hint": "destructiveHint"}


@dataclass(frozen=True)
class Listed:
    """One of the server's tools, as Tether registers it."""

    remote: str
    name: str
    description: str
    args_schema: dict[str, Any]
    result_schema: dict[str, Any]
    hints: dict[str, bool] = field(default_factory=dict)


@dataclass(frozen=True)
class Skipped:
    remote: str
    reason: str


def tool_name(server: str, remote: str) -> str:
    return f"{server}{SEP}{remote}"


def catalog(server: str, tools: list[types.Tool]) -> tuple[list[Listed], list[Skipped]]:
    listed: list[Listed] = []
    skipped: list[Skipped] = []
    for tool in tools:
        remote = storable_text(str(tool.name))[:200]
        if len(listed) >= MAX_TOOLS:
            skipped.append(Skipped(remote, f"more than {MAX_TOOLS} tools on one server"))
            continue
        name = tool_name(server, remote)
        if not TOOL_NAME.fullmatch(remote) or len(name) > MAX_NAME:
            skipped.append(Skipped(remote, (
                f"{name!r} is not a function name every model backend accepts: letters, digits, "
                f"_ and -, at most {MAX_NAME} characters with the server's prefix")))
            continue
        args_schema = tool.input_schema
        problems = [f"input schema: {p}" for p in check_schema(args_schema)]
        if not problems and args_schema.get("type") != "object":
            problems.append('input schema: arguments are a JSON object: "type": "object"')
        result_schema = tool.output_schema or {}
        if result_schema:
            problems += [f"output schema: {p}" for p in check_schema(result_schema)]
        if problems:
            skipped.append(Skipped(remote, "refused: " + "; ".join(problems)[:1000]))
            continue
        description = storable_text(tool.description or tool.title or "")[:MAX_DESCRIPTION]
        listed.append(Listed(remote=remote, name=name, description=description,
                             args_schema=args_schema, result_schema=result_schema,
                             hints=hints_of(tool.annotations)))
    return listed, skipped


def hints_of(annotations: types.ToolAnnotations | None) -> dict[str, bool]:
    if annotations is None:
        return {}
    return {wire: value for attr, wire in HINTS.items()
            if isinstance(value := getattr(annotations, attr, None), bool)}


def defaults_from(hints: dict[str, bool]) -> dict[str, Any]:
    """The settings the hints suggest; in force only once an admin confirms them.
    MCP's defaults when a hint is absent: not read-only, destructive, not idempotent."""
    if hints.get("readOnlyHint"):
        return {"side_effect": SideEffect.READ, "risk": Risk.LOW, "requires_approval": False}
    destructive = hints.get("destructiveHint", True)
    side_effect = SideEffect.IDEMPOTENT_WRITE if hints.get("idempotentHint") else SideEffect.WRITE
    return {"side_effect": side_effect, "risk": Risk.HIGH if destructive else Risk.MEDIUM,
            "requires_approval": destructive}


def schema_changed(tool: Any, listed: Listed) -> bool:
    """Whether the server changed what the tool takes or gives (`tool`: a stored Tool)."""
    return (tool.args_schema != listed.args_schema
            or (tool.result_schema or {}) != listed.result_schema)
