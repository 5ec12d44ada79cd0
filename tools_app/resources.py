"""Resource templates: which resource a tool call touches.

A tool may declare `resource`, a template over its call's arguments:
``"order:{order_id}"``, ``"account:{bank}/{account}"``, or a constant
(``"ledger"``: every call of the tool on one resource). Syntax: literal text
(no ``{`` or ``}``) and placeholders ``{name}``, where `name` is an argument
the tool's `args_schema` lists under `properties` *and* `required` (a call
always has a value for it). At most `MAX_TEMPLATE` characters.

Rendering is canonical, so equal arguments give equal resources whatever
their JSON spelling: a string argument is used as it is, anything else as its
canonical JSON (`7` → ``7``, `true` → ``true``, objects with sorted keys). A
rendered resource longer than `MAX_RESOURCE` keeps its head and ends with
the SHA-256 of the whole: still equal exactly when the full text is equal.
Resources are compared within a tenant only (`tasks_app.leases`).
"""
from __future__ import annotations

import hashlib
import json
import re
from typing import Any

MAX_TEMPLATE = 200
MAX_RESOURCE = 200
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]{0,63})\}")
_TEMPLATE = re.compile(r"(?:[^{}]|\{[A-Za-z_][A-Za-z0-9_]{0,63}\})+")


def resource_template_errors(template: Any, args_schema: Any) -> list[str]:
    """What is wrong with a resource template (empty: it may be stored; "" is no resource)."""
    if template in ("", None):
        return []
    if not isinstance(template, str):
        return ["a template such as order:{order_id}"]
    if len(template) > MAX_TEMPLATE:
        return [f"at most {MAX_TEMPLATE} characters"]
    if not _TEMPLATE.fullmatch(template) or any(c in template for c in "\x00\n\r\t"):
        return ["literal text and {argument} placeholders only, e.g. order:{order_id}"]
    schema: dict[str, Any] = args_schema if isinstance(args_schema, dict) else {}
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    required = schema.get("required")
    required = required if isinstance(required, list) else []
    problems = []
    for name in placeholders(template):
        if name not in properties:
            problems.append(f"{{{name}}} is not an argument of the tool (args_schema.properties)")
        elif name not in required:
            problems.append(f"{{{name}}} must be a required argument (args_schema.required)")
    return problems


def placeholders(template: str) -> list[str]:
    return _PLACEHOLDER.findall(template)


def render_resource(template: str, args: dict[str, Any]) -> str:
    """The resource a call with `args` touches ("" when the tool declares none)."""
    if not template:
        return ""

    def value(match: re.Match[str]) -> str:
        v = args.get(match.group(1))
        if isinstance(v, str):
            return v
        return json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    rendered = _PLACEHOLDER.sub(value, template)
    if len(rendered) > MAX_RESOURCE:
        digest = hashlib.sha256(rendered.encode("utf-8", "surrogatepass")).hexdigest()
        rendered = f"{rendered[:MAX_RESOURCE - 72]}…#{digest}"
    return rendered
