"""MCP tools: a `tools/call` to the tool's server over the process's pooled session.

The call carries the step's idempotency key in the request's `_meta`
(`tether/idempotency_key`, with `tether/task` and a W3C `traceparent`); a
server that honours it is registered as an `idempotent_write`. Secret headers
are the server's, rendered by the dispatcher for the call's tenant
(`call.resolved_headers`). Classification of what came back, as for an http tool:

- a result: `structuredContent` when the server sent one (checked against the
  tool's output schema by the dispatcher), else `{"content": [...]}`; a tool
  with an output schema that sends no structured content is a business error;
- `isError: true`, a JSON-RPC error answer, or 400/409/422 to the request:
  business error (back to the model);
- an address the outbound policy refuses, or 401/403: permission error;
- nothing sent (no connection, the handshake failed, 429/503, an expired
  session): transient;
- sent and no answer (timeout, reset, the connection closed, a 5xx): transient
  for tools that honour keys, uncertain for plain writes.

`timeout_s` bounds the whole call, the session's handshake included. The
sessions live on their own event loop (`tools_app.mcp.connections`);
`call_async` is what the runner awaits on its I/O loop (`dispatch.send`: the
call runs on the sessions' loop, awaited through a wrapped future), `call`
the same for a synchronous caller.
"""

from __future__ import annotations

import concurrent.futures
import secrets
from typing import Any

from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

from ..mcp.connections import (
    CallAnswer,
    ConnectFailed,
    ServerAddress,
    call_tool_async,
    call_tool_sync,
)
from ..outbound import REFUSED
from .types import OutcomeKind, ToolCall, ToolOutcome

KEY = "tether/idempotency_key"
TEXT_CHARS = 2000


def address_of(call: ToolCall) -> ServerAddress:
    return ServerAddress(tenant_id=call.context.tenant_id, name=call.spec.mcp_server,
                         url=call.spec.url, stdio=call.spec.mcp_stdio,
                         headers=tuple(sorted(call.resolved_headers.items())))


def meta_of(call: ToolCall) -> dict[str, Any]:
    trace = (call.context.trace_id + "0" * 32)[:32]
    return {KEY: call.context.idempotency_key, "tether/task": call.context.task_id,
            "traceparent": f"00-{trace}-{secrets.token_hex(8)}-01"}


def call(call: ToolCall) -> ToolOutcome:
    try:
        answer = call_tool_sync(address_of(call), tool=call.spec.target, arguments=dict(call.args),
                                meta=meta_of(call), timeout_s=call.spec.timeout_s)
    except ConnectFailed as exc:
        return _not_sent(exc)
    except concurrent.futures.TimeoutError:
        return _ambiguous(call, "timeout", f"no answer within {call.spec.timeout_s}s")
    return outcome_of(call, answer)


async def call_async(call: ToolCall) -> ToolOutcome:
    try:
        answer = await call_tool_async(address_of(call), tool=call.spec.target,
                                       arguments=dict(call.args), meta=meta_of(call),
                                       timeout_s=call.spec.timeout_s)
    except ConnectFailed as exc:
        return _not_sent(exc)
    except TimeoutError:
        return _ambiguous(call, "timeout", f"no answer within {call.spec.timeout_s}s")
    return outcome_of(call, answer)


def outcome_of(call: ToolCall, answer: CallAnswer) -> ToolOutcome:
    if answer.failure is not None:
        failure = answer.failure
        if failure.refused or failure.status in (401, 403):
            return _permission(failure.refused, failure.status, failure.message)
        if failure.status in (400, 409, 422):  # the server refused the request itself
            return ToolOutcome(kind=OutcomeKind.BUSINESS, error={
                "type": "http_error", "status": failure.status, "message": failure.message})
        if not failure.sent:
            return ToolOutcome(kind=OutcomeKind.TRANSIENT, error={
                "type": "connect_error", "message": failure.message, "status": failure.status})
        return _ambiguous(call, "transport_error", failure.message)
    if answer.error is not None:
        code, message = answer.error.code, answer.error.message[:TEXT_CHARS]
        if code in (CONNECTION_CLOSED, REQUEST_TIMEOUT):  # the SDK's own: no answer came
            return _ambiguous(call, "transport_error", message)
        return ToolOutcome(kind=OutcomeKind.BUSINESS, error={
            "type": "mcp_error", "code": code, "message": message})
    if answer.result is None:
        return ToolOutcome(kind=OutcomeKind.BUSINESS, error={
            "type": "invalid_result", "message": f"not a tool result: {answer.invalid}"})
    result = answer.result
    if result.is_error:
        return ToolOutcome(kind=OutcomeKind.BUSINESS, error={
            "type": "tool_error", "message": _text_of(result.content)})
    if result.structured_content is not None:
        return ToolOutcome(kind=OutcomeKind.OK, result=result.structured_content)
    if call.spec.result_schema:
        return ToolOutcome(kind=OutcomeKind.BUSINESS, error={
            "type": "invalid_result",
            "message": "the tool has an output schema and sent no structured content"})
    return ToolOutcome(kind=OutcomeKind.OK, result={"content": [
        block.model_dump(mode="json", by_alias=True, exclude_none=True)
        for block in result.content]})


def _text_of(content: list[Any]) -> str:
    text = " ".join(getattr(block, "text", "") for block in content).strip()
    return text[:TEXT_CHARS] or "the tool reported an error"


def _not_sent(exc: ConnectFailed) -> ToolOutcome:
    if exc.refused or exc.status in (401, 403):
        return _permission(exc.refused, exc.status, str(exc))
    # no session, so nothing of the call was sent: safe to retry for every kind of tool
    return ToolOutcome(kind=OutcomeKind.TRANSIENT, error={
        "type": "connect_error", "message": str(exc)[:TEXT_CHARS], "status": exc.status})


def _permission(refused: bool, status: int | None, message: str) -> ToolOutcome:
    if refused:
        return ToolOutcome(kind=OutcomeKind.PERMISSION, error={
            "type": "egress_refused", "message": REFUSED})
    return ToolOutcome(kind=OutcomeKind.PERMISSION, error={
        "type": "http_error", "status": status, "message": message[:TEXT_CHARS]})


def _ambiguous(call: ToolCall, kind: str, message: str) -> ToolOutcome:
    # sent (or partly sent) and no answer: it may have happened
    outcome = OutcomeKind.TRANSIENT if call.spec.honours_keys else OutcomeKind.UNCERTAIN
    return ToolOutcome(kind=outcome, error={"type": kind, "message": message[:TEXT_CHARS]})
