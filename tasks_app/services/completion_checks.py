"""Completion checks: an agent's outside tests of a final answer.

A profile's `completion_checks` is a list of `{"tool": name, "args": {...}}`.
Each names a read-only tool of the profile's tenant (`side_effect` "read": a
check must never change anything, it may run any number of times). Its
`args` are a template in the workflows' expression language (CEL,
`foundations.expressions`): a string that is exactly `${ expr }` becomes the
expression's value, `${ expr }` inside other text becomes text. An expression
sees two names: `output`, the final answer (its result object), and
`inputs`, the task's input. Every template is compiled when the profile is
saved, so a typo is a field error then, not a failed task later.

A check answers `{"pass": true | false, "reason": "..."}`. Only `"pass": true`
passes; anything else (false, a missing or non-boolean `pass`, an error
answer) is a failed check, whose reason goes back to the model. An MCP tool
answers it as structured content, or as the JSON text of its one text block
(a server without structured output: `answer_of`). The runner's side is
`tasks_app.runner.completion`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from foundations.expressions import ExpressionError, render, template_expressions
from tools_app.executor.types import ToolSpec
from tools_app.models import SideEffect, Tool

MAX_CHECKS = 10
MAX_ATTEMPTS = 20
DEFAULT_ATTEMPTS = 3
NAMES = frozenset({"output", "inputs"})  # what a check's expressions may use
REASON_CHARS = 2000  # a check's reason, as kept and fed back


def completion_check_errors(tenant_id: int, checks: Any, max_attempts: Any,
                            min_confidence: Any) -> dict[str, list[str]]:
    """Field errors of the guards of a profile (empty: they may be stored)."""
    errors: dict[str, list[str]] = {}

    def add(field: str, message: str) -> None:
        errors.setdefault(field, []).append(message)

    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or not (
            1 <= max_attempts <= MAX_ATTEMPTS):
        add("max_completion_attempts", f"an integer from 1 to {MAX_ATTEMPTS}")
    if min_confidence is not None and (
            isinstance(min_confidence, bool) or not isinstance(min_confidence, int | float)
            or not 0 <= min_confidence <= 1):
        add("min_confidence", "a number from 0 to 1, or null for no threshold")
    if not isinstance(checks, list):
        add("completion_checks", 'a list of {"tool": name, "args": {...}}')
        return errors
    if len(checks) > MAX_CHECKS:
        add("completion_checks", f"at most {MAX_CHECKS} checks")
        return errors
    names = [c.get("tool") for c in checks if isinstance(c, dict)]
    tools = {t.name: t for t in Tool.objects.filter(
        tenant_id=tenant_id, name__in=[n for n in names if isinstance(n, str)])}
    for index, check in enumerate(checks):
        where = f"completion_checks[{index}]"
        if not isinstance(check, dict):
            add(where, 'an object {"tool": name, "args": {...}}')
            continue
        for key in sorted(set(check) - {"tool", "args"}):
            add(f"{where}.{key}", "not a field of a check (tool, args)")
        tool = check.get("tool")
        if not isinstance(tool, str) or not tool:
            add(f"{where}.tool", "the name of a tool of this tenant")
        elif tool not in tools:
            add(f"{where}.tool", f"no tool named {tool!r} in this tenant")
        elif tools[tool].side_effect != SideEffect.READ:
            add(f"{where}.tool", f"{tool!r} is not read-only (side_effect "
                                 f"{tools[tool].side_effect!r}): a check must only read")
        elif not tools[tool].enabled:
            add(f"{where}.tool", f"{tool!r} is disabled")
        elif tools[tool].review:
            add(f"{where}.tool", f"{tool!r} is an MCP tool whose settings an admin has not "
                                 f"confirmed ({tools[tool].review}): until then it is a write "
                                 "that needs approval, whatever its server says")
        args = check.get("args", {})
        if not isinstance(args, dict):
            add(f"{where}.args", "an object (a template of the tool's arguments)")
            continue
        for message in _template_errors(args):
            add(f"{where}.args", message)
    return errors


def _template_errors(args: dict[str, Any]) -> list[str]:
    try:
        found = list(template_expressions(args))
    except ExpressionError as exc:
        return [str(exc)]
    problems = []
    for path, expression in found:
        unknown = sorted(set(expression.program.variables()) - NAMES)
        if unknown:
            problems.append(f"{path or 'args'}: {unknown[0]!r} is not known here: a check's "
                            "expressions see `output` (the final answer) and `inputs` (the "
                            "task's input)")
    return problems


def unaskable(spec: ToolSpec | None) -> str | None:
    """Why a check's tool cannot be asked now (None: it can). A profile's checks
    were read-only tools when it was saved; since then the tool may have been
    disabled, made a write, or (an MCP tool) changed on its server and wait for
    an admin again."""
    if spec is None:
        return "the tool is gone or disabled"
    if spec.side_effect != SideEffect.READ:
        return (f"the tool is not read-only now (side_effect {spec.side_effect!r}"
                f"{', its MCP settings not confirmed' if spec.mcp_server else ''})")
    return None


@dataclass(frozen=True)
class Verdict:
    passed: bool
    reason: str


def check_args(check: dict[str, Any], *, answer: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    """A check's arguments for this answer; raises ExpressionError (the answer
    lacks what the check needs: a failed check, not a broken one)."""
    rendered = render(check.get("args") or {}, {"output": answer, "inputs": inputs})
    if not isinstance(rendered, dict):
        raise ExpressionError("a check's arguments must be an object")
    return rendered


def verdict_of(output: Any, error: Any) -> Verdict:
    """What a check's call came to: only an answer `{"pass": true}` passes."""
    if error:
        message = error.get("message") if isinstance(error, dict) else str(error)
        return Verdict(False, f"the check answered an error: {message}"[:REASON_CHARS])
    answer = answer_of(output)
    if not isinstance(answer, dict) or not isinstance(answer.get("pass"), bool):
        return Verdict(False, 'the check did not answer {"pass": true | false, "reason": ...}')
    reason = answer.get("reason")
    text = reason if isinstance(reason, str) else ("" if reason is None else str(reason))
    return Verdict(answer["pass"], text[:REASON_CHARS])


def answer_of(output: Any) -> Any:
    """The answer in a check's output. An MCP result without structured content
    is `{"content": [blocks]}` (`tools_app.executor.mcp_kind`); when it is one
    text block holding a JSON object, that object is the answer, as the MCP
    specification has servers send structured results as text too."""
    if not isinstance(output, dict) or set(output) != {"content"}:
        return output
    blocks = output["content"]
    if not (isinstance(blocks, list) and len(blocks) == 1 and isinstance(blocks[0], dict)
            and blocks[0].get("type") == "text" and isinstance(blocks[0].get("text"), str)):
        return output
    try:
        return json.loads(blocks[0]["text"])
    except ValueError:
        return output
