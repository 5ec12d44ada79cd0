"""HTTP tools (DESIGN.md "HTTP tools"): ``POST {url}`` with the arguments as JSON.

Headers: ``Idempotency-Key``, ``X-Tether-Task`` and a W3C ``traceparent``;
secret headers are read from settings or the environment by name, never
stored in clear. Classification of the answer:

- 2xx with a JSON body: the result;
- 400/404/409/422: business error (the body goes back to the model);
- 401/403: permission error;
- 408, 429, 5xx, connection refused: transient (``Retry-After`` honoured);
- a timeout or a reset *after the request was sent*: transient for tools that
  honour keys, uncertain for plain writes.
"""
from __future__ import annotations

import os
import secrets
from typing import Any

import httpx
from django.conf import settings

from .ledger_answers import status_answer_from
from .types import OutcomeKind, StatusAnswer, ToolCall, ToolOutcome

BUSINESS = {400, 404, 409, 422}
PERMISSION = {401, 403}


def _headers(call: ToolCall) -> dict[str, str]:
    trace = (call.context.trace_id + "0" * 32)[:32]
    headers = {
        "Idempotency-Key": call.context.idempotency_key,
        "X-Tether-Task": str(call.context.task_id),
        "traceparent": f"00-{trace}-{secrets.token_hex(8)}-01",
        "Accept": "application/json",
    }
    for header, source in (call.spec.secret_headers or {}).items():
        value = getattr(settings, source, None) or os.environ.get(source)
        if value:
            headers[header] = str(value)
    return headers


def _body(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text[:2000]


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def call(call: ToolCall) -> ToolOutcome:
    limit = settings.TETHER["MAX_TOOL_RESULT_BYTES"]
    ambiguous = OutcomeKind.TRANSIENT if call.spec.honours_keys else OutcomeKind.UNCERTAIN
    try:
        with httpx.Client(timeout=call.spec.timeout_s, follow_redirects=False) as client:
            response = client.post(call.spec.url, json=call.args, headers=_headers(call))
    except httpx.ConnectError as exc:
        # nothing was sent: safe to retry for every kind of tool
        return ToolOutcome(kind=OutcomeKind.TRANSIENT, error={"type": "connect_error", "message": str(exc)})
    except httpx.TimeoutException as exc:
        return ToolOutcome(kind=ambiguous, error={"type": "timeout", "message": str(exc) or "timed out"})
    except httpx.TransportError as exc:
        return ToolOutcome(kind=ambiguous, error={"type": "transport_error", "message": str(exc)})
    code = response.status_code
    if 200 <= code < 300:
        if len(response.content) > limit:
            return ToolOutcome(kind=OutcomeKind.BUSINESS, error={
                "type": "result_too_large", "message": f"the tool result exceeds {limit} bytes"})
        try:
            return ToolOutcome(kind=OutcomeKind.OK, result=response.json())
        except ValueError:
            return ToolOutcome(kind=OutcomeKind.BUSINESS, error={
                "type": "invalid_result", "message": "the tool answered 2xx without a JSON body",
                "body": response.text[:500]})
    error = {"type": "http_error", "status": code, "body": _body(response)}
    if code in BUSINESS:
        return ToolOutcome(kind=OutcomeKind.BUSINESS, error=error)
    if code in PERMISSION:
        return ToolOutcome(kind=OutcomeKind.PERMISSION, error=error)
    if code in (408, 429) or code >= 500:
        return ToolOutcome(kind=OutcomeKind.TRANSIENT, error=error, retry_after_s=_retry_after(response))
    return ToolOutcome(kind=OutcomeKind.BUSINESS, error=error)


def query_status(call: ToolCall) -> StatusAnswer:
    url = call.spec.status_url.replace("{key}", call.context.idempotency_key)
    try:
        with httpx.Client(timeout=max(call.spec.timeout_s, 5.0)) as client:
            response = client.get(url, headers=_headers(call))
    except httpx.HTTPError as exc:
        return StatusAnswer(state="unknown", detail=f"status query failed: {exc}")
    try:
        data = response.json()
    except ValueError:
        return StatusAnswer(state="unknown", detail=f"status query answered {response.status_code} without JSON")
    if not 200 <= response.status_code < 300 and not (isinstance(data, dict) and "state" in data):
        return StatusAnswer(state="unknown", detail=f"status query answered {response.status_code}")
    return status_answer_from(data)
