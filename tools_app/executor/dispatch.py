"""Calls one tool once, by kind (python, http, mcp), and classifies what happened.

Every call has a timeout. A result must be JSON, within the size limit and
valid against the tool's result schema (`schemas.schema_errors`); otherwise
it is a business error.

An http or mcp tool's secret headers (an mcp tool's are its server's) are
rendered here, for the call's own tenant (`tasks_app.vault.lookup`), and
exist only for the call: a secret that cannot
be resolved is a permission error and nothing is sent. The downstream may echo
them back, so its answer (result, error, status answer) is redacted of every
resolved value before anything stores it.
"""
from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from django.conf import settings

from tasks_app.vault.lookup import tool_headers
from tasks_app.vault.values import Resolved, Unresolved

from ..schemas import SchemaRefused, schema_errors
from . import http_kind, mcp_kind, python_kind
from .jsonsafe import has_unstorable, storable
from .types import OutcomeKind, StatusAnswer, ToolCall, ToolOutcome


def call_tool(call: ToolCall) -> ToolOutcome:
    if call.spec.kind in ("http", "mcp"):
        try:
            call, resolved = _with_secrets(call)
        except Unresolved as exc:
            return _secret_refused(exc)
        outcome = (mcp_kind if call.spec.kind == "mcp" else http_kind).call(call)
        outcome = replace(outcome, result=resolved.redact(outcome.result),
                          error=resolved.redact(outcome.error))
    else:
        outcome = python_kind.call(call)
    if outcome.kind is OutcomeKind.OK:
        problem = check_result(call.spec.result_schema, outcome.result)
        if problem is not None:
            return ToolOutcome(kind=OutcomeKind.BUSINESS, error=problem)
    elif outcome.error is not None:
        # Errors are stored in the ledger, the step and an event: make them storable.
        outcome = replace(outcome, error=storable(outcome.error))
    return outcome


def query_status(call: ToolCall) -> StatusAnswer:
    if call.spec.status_url:
        try:
            call, resolved = _with_secrets(call)
        except Unresolved as exc:
            return StatusAnswer(state="unknown", detail=f"status query not sent: {exc}")
        answer = http_kind.query_status(call)
        return replace(answer, result=resolved.redact(answer.result),
                       detail=resolved.redact(answer.detail))
    if call.spec.status_tool:
        return python_kind.query_status(call)
    return StatusAnswer(state="unknown", detail="the tool has no status query")


def _with_secrets(call: ToolCall) -> tuple[ToolCall, Resolved]:
    """The call with its secret headers rendered for its tenant; raises `Unresolved`."""
    headers, resolved = tool_headers(tenant_id=call.context.tenant_id,
                                     secret_headers=dict(call.spec.secret_headers or {}))
    return replace(call, resolved_headers=headers), resolved


def _secret_refused(exc: Unresolved) -> ToolOutcome:
    # Nothing was sent: the tool cannot be called as registered, retrying cannot help.
    return ToolOutcome(kind=OutcomeKind.PERMISSION,
                       error={"type": "secret_unavailable", "message": str(exc)})


def check_result(schema: dict[str, Any], result: Any) -> dict[str, Any] | None:
    try:
        encoded = json.dumps(result, allow_nan=False)
    except (TypeError, ValueError) as exc:
        return {"type": "invalid_result", "message": f"the tool result is not JSON: {exc}"}
    if ("\\u0000" in encoded or "\\ud" in encoded) and has_unstorable(result):
        # valid JSON, but jsonb cannot store it: refuse it here rather than fail the commit
        return {"type": "invalid_result",
                "message": "the tool result contains NUL characters or lone surrogates"}
    limit = settings.TETHER["MAX_TOOL_RESULT_BYTES"]
    if len(encoded.encode()) > limit:
        return {"type": "result_too_large", "message": f"the tool result exceeds {limit} bytes",
                "size": len(encoded.encode())}
    try:
        errors = schema_errors(schema, result, limit=5)
    except SchemaRefused as exc:
        # The call happened: what it did is recorded, and the model is told.
        return {"type": "invalid_result", "message": exc.message, "errors": exc.problems}
    if errors:
        return {"type": "invalid_result", "message": "the tool result does not match its schema",
                "errors": errors}
    return None
