"""Calls one tool once, by kind (python, http, mcp), and classifies what happened.

A call has a database part (`prepare`: its secrets) and an I/O part (`send`,
`ask_status`: awaited on the I/O loop, no database), so the runner can run the
one in a database phase and await the other without holding a thread.

Every call has a timeout. A result must be JSON, within the size limit and
valid against the tool's result schema (`schemas.schema_errors`); otherwise
it is a business error.

An http or mcp tool's secret headers (an mcp tool's are its server's) are
rendered here, for the call's own tenant (`accounts_app.vault.lookup`), and
exist only for the call: a secret that cannot
be resolved is a permission error and nothing is sent. The downstream may echo
them back, so its answer (result, error, status answer) is redacted of every
resolved value before anything stores it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from django.conf import settings

from accounts_app.vault.lookup import tool_headers
from accounts_app.vault.values import Resolved, Unresolved
from foundations.ioloop import run_io

from ..schemas import SchemaRefused, schema_errors
from . import http_kind, mcp_kind, python_kind
from .jsonsafe import has_unstorable, storable
from .types import OutcomeKind, StatusAnswer, ToolCall, ToolOutcome


@dataclass(frozen=True)
class Prepared:
    """A call ready to be sent: its secret headers rendered (an http or mcp tool), and
    the values to redact from whatever comes back."""

    call: ToolCall
    resolved: Resolved


def prepare(call: ToolCall) -> Prepared | ToolOutcome:
    """The database part of a call (secrets are rows): run it where the ORM may
    run; a refusal is the call's outcome, nothing is sent."""
    if call.spec.kind not in ("http", "mcp") or not (call.spec.secret_headers or {}):
        return Prepared(call, Resolved())
    try:
        call, resolved = _with_secrets(call)
    except Unresolved as exc:
        return _secret_refused(exc)
    return Prepared(call, resolved)


async def send(prepared: Prepared) -> ToolOutcome:
    """Make the call, awaited on the I/O loop: an http tool on the async client of
    its endpoint, an mcp tool on its server's pooled session (awaited from the
    sessions' own loop), a python tool in a pooled thread (`threads`); the loop
    waits, no thread does. Pure CPU and network: no database."""
    call, resolved = prepared.call, prepared.resolved
    if call.spec.kind in ("http", "mcp"):
        outcome = await (mcp_kind.call_async(call) if call.spec.kind == "mcp"
                         else http_kind.acall(call))
        outcome = replace(outcome, result=resolved.redact(outcome.result),
                          error=resolved.redact(outcome.error))
    else:
        outcome = await python_kind.acall(call)
    if outcome.kind is OutcomeKind.OK:
        problem = check_result(call.spec.result_schema, outcome.result)
        if problem is not None:
            return ToolOutcome(kind=OutcomeKind.BUSINESS, error=problem)
    elif outcome.error is not None:
        # Errors are stored in the ledger, the step and an event: make them storable.
        outcome = replace(outcome, error=storable(outcome.error))
    return outcome


def call_tool(call: ToolCall) -> ToolOutcome:
    """`prepare` and `send`, for a synchronous caller (waits on the I/O loop)."""
    prepared = prepare(call)
    if isinstance(prepared, ToolOutcome):
        return prepared
    return run_io(send(prepared))


async def ask_status(prepared: Prepared) -> StatusAnswer:
    """The tool's status query for the call's key, awaited (no database)."""
    call, resolved = prepared.call, prepared.resolved
    if call.spec.status_url:
        answer = await http_kind.aquery_status(call)
        return replace(answer, result=resolved.redact(answer.result),
                       detail=resolved.redact(answer.detail))
    if call.spec.status_tool:
        return await python_kind.aquery_status(call)
    return StatusAnswer(state="unknown", detail="the tool has no status query")


def query_status(call: ToolCall) -> StatusAnswer:
    """`ask_status` for a synchronous caller."""
    if call.spec.status_url:
        try:
            call, resolved = _with_secrets(call)
        except Unresolved as exc:
            return StatusAnswer(state="unknown", detail=f"status query not sent: {exc}")
        return run_io(ask_status(Prepared(call, resolved)))
    return run_io(ask_status(Prepared(call, Resolved())))


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
