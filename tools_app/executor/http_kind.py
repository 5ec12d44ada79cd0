"""HTTP tools (docs/how-to/tools.md): ``POST {url}`` with the arguments as JSON.

Headers: ``Idempotency-Key``, ``X-Tether-Task``, a W3C ``traceparent`` (the
call's `execute_tool` span when traces are on, `foundations.tracing`) and, for a
tool that declares a resource, ``X-Tether-Fence: resource#token``;
secret headers are the tool's `secret_headers` templates rendered with its
tenant's secrets by the dispatcher (`call.resolved_headers`), never stored in
clear. Classification of the answer:

- 2xx with a JSON body: the result;
- 400/404/409/422: business error (the body goes back to the model);
- 401/403: permission error;
- 408, 429, 5xx, connection refused or a connect timeout (nothing was sent):
  transient (``Retry-After`` honoured, in seconds or as an HTTP date);
- a timeout or a reset *after the request was sent*: transient for tools that
  honour keys, uncertain for plain writes;
- an unusable URL: the tool is unavailable (the task stops, as for a python
  tool that cannot be imported);
- an address the outbound-address policy refuses: a permission error, the
  same whatever the target (the task stops; nothing was sent).

Calls are awaited on the process's I/O loop, through the long-lived async
transport of the URL's endpoint (`tools_app.outbound.astream`):
redirects are not followed, and `timeout_s` bounds the whole call, connecting
to the last byte. Bodies are read up to
``MAX_TOOL_RESULT_BYTES``, never more.
"""
from __future__ import annotations

import json
from typing import Any

import httpx2
from django.conf import settings

from foundations.tracing import outgoing_headers

from ..outbound import REFUSED, EgressRefusedError, astream
from ..outbound.retry_after import retry_after_s
from .ledger_answers import status_answer_from
from .types import OutcomeKind, StatusAnswer, ToolCall, ToolOutcome

BUSINESS = {400, 404, 409, 422}
PERMISSION = {401, 403}
ERROR_BODY_BYTES = 16 * 1024


def _headers(call: ToolCall) -> dict[str, str]:
    headers = {
        "Idempotency-Key": call.context.idempotency_key,
        "X-Tether-Task": str(call.context.task_id),
        # the `execute_tool` span of this call (foundations.tracing)
        **outgoing_headers(call.context.trace_id),
        "Accept": "application/json",
    }
    if call.context.fence:
        headers["X-Tether-Fence"] = call.context.fence  # "resource#token" (`tasks_app.leases`)
    headers.update(call.resolved_headers)
    return headers


def _body(content: bytes) -> Any:
    """An error body as the model gets it: JSON when it parses, else a bounded text."""
    if len(content) <= ERROR_BODY_BYTES:
        try:
            return json.loads(content)
        except ValueError:
            pass
    return content[:2000].decode("utf-8", "replace")


async def _read_capped(response: httpx2.Response, limit: int) -> tuple[bytes, bool]:
    """Read at most `limit` bytes of the body; the flag says there was more."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            return b"".join(chunks)[:limit], True
    return b"".join(chunks), False


def _unavailable(call: ToolCall, exc: Exception) -> ToolOutcome:
    # A broken registration (bad URL or scheme): nothing was sent, retrying cannot help.
    return ToolOutcome(kind=OutcomeKind.PERMISSION, error={
        "type": "tool_unavailable", "message": f"cannot call {call.spec.url!r}: {exc}"})


async def acall(call: ToolCall) -> ToolOutcome:
    limit = settings.TETHER["MAX_TOOL_RESULT_BYTES"]
    ambiguous = OutcomeKind.TRANSIENT if call.spec.honours_keys else OutcomeKind.UNCERTAIN
    try:
        async with astream("POST", call.spec.url, json=call.args, headers=_headers(call),
                           timeout_s=call.spec.timeout_s) as response:
            content, too_large = await _read_capped(response, limit)
    except (httpx2.InvalidURL, httpx2.UnsupportedProtocol) as exc:
        return _unavailable(call, exc)
    except EgressRefusedError:
        return ToolOutcome(kind=OutcomeKind.PERMISSION, error={
            "type": "egress_refused", "message": REFUSED})
    except (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.PoolTimeout) as exc:
        # no connection, so nothing was sent: safe to retry for every kind of tool
        return ToolOutcome(kind=OutcomeKind.TRANSIENT, error={
            "type": "connect_error", "message": str(exc) or type(exc).__name__})
    except httpx2.TimeoutException as exc:
        # sent (or partly sent) and no answer: it may have happened
        return ToolOutcome(kind=ambiguous, error={
            "type": "timeout", "message": str(exc) or "timed out"})
    except httpx2.HTTPError as exc:
        # a reset or a broken answer after sending: it may have happened
        return ToolOutcome(kind=ambiguous, error={
            "type": "transport_error", "message": str(exc) or type(exc).__name__})
    code = response.status_code
    if 200 <= code < 300:
        if too_large:
            return ToolOutcome(kind=OutcomeKind.BUSINESS, error={
                "type": "result_too_large", "message": f"the tool result exceeds {limit} bytes"})
        try:
            return ToolOutcome(kind=OutcomeKind.OK, result=json.loads(content))
        except ValueError:
            return ToolOutcome(kind=OutcomeKind.BUSINESS, error={
                "type": "invalid_result", "message": "the tool answered 2xx without a JSON body",
                "body": content[:500].decode("utf-8", "replace")})
    error = {"type": "http_error", "status": code, "body": _body(content)}
    if code in BUSINESS:
        return ToolOutcome(kind=OutcomeKind.BUSINESS, error=error)
    if code in PERMISSION:
        return ToolOutcome(kind=OutcomeKind.PERMISSION, error=error)
    if code in (408, 429) or code >= 500:
        return ToolOutcome(kind=OutcomeKind.TRANSIENT, error=error,
                           retry_after_s=retry_after_s(response.headers))
    return ToolOutcome(kind=OutcomeKind.BUSINESS, error=error)


async def aquery_status(call: ToolCall) -> StatusAnswer:
    url = call.spec.status_url.replace("{key}", call.context.idempotency_key)
    limit = settings.TETHER["MAX_TOOL_RESULT_BYTES"]
    try:
        async with astream("GET", url, headers=_headers(call),
                           timeout_s=max(call.spec.timeout_s, 5.0)) as response:
            content, too_large = await _read_capped(response, limit)
    except EgressRefusedError:
        return StatusAnswer(state="unknown", detail=f"status query: {REFUSED}")
    except (httpx2.HTTPError, httpx2.InvalidURL) as exc:
        return StatusAnswer(state="unknown", detail=f"status query failed: {exc}")
    if too_large:
        return StatusAnswer(state="unknown", detail="the status query's answer is too large")
    try:
        data = json.loads(content)
    except ValueError:
        return StatusAnswer(state="unknown",
                            detail=f"status query answered {response.status_code} without JSON")
    if not 200 <= response.status_code < 300 and not (isinstance(data, dict) and "state" in data):
        return StatusAnswer(state="unknown", detail=f"status query answered {response.status_code}")
    return status_answer_from(data)
