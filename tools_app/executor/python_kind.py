"""Python tools: a dotted path to ``fn(args: dict, ctx: ToolContext) -> result``.

The function runs in a thread of its own (a reusable one, see `threads`) so the
per-tool timeout holds even when it blocks, and the I/O loop awaits it without
stalling; a thread cannot be killed, so a
call that outlives its timeout keeps running and whatever it returns is
ignored (the commit fence discards it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.utils.module_loading import import_string

from .errors import ToolBusinessError, ToolPermissionError, ToolTransientError
from .ledger_answers import status_answer_from
from .threads import tool_threads
from .types import OutcomeKind, StatusAnswer, ToolCall, ToolOutcome


async def _run_with_timeout(
    fn: Callable[[], Any], timeout_s: float
) -> tuple[bool, Any, BaseException | None]:
    return await tool_threads.arun(fn, timeout_s)


async def acall(call: ToolCall) -> ToolOutcome:
    try:
        fn = import_string(call.spec.target)
    except Exception as exc:  # noqa: BLE001 - a broken registration, whatever the import raised
        return ToolOutcome(
            kind=OutcomeKind.PERMISSION,
            error={"type": "tool_unavailable", "message": f"cannot load {call.spec.target}: {exc}"},
        )
    finished, value, error = await _run_with_timeout(
        lambda: fn(dict(call.args), call.context), call.spec.timeout_s
    )
    if not finished:
        kind = OutcomeKind.TRANSIENT if call.spec.honours_keys else OutcomeKind.UNCERTAIN
        return ToolOutcome(
            kind=kind,
            error={"type": "timeout", "message": f"no answer within {call.spec.timeout_s}s"},
        )
    if error is None:
        return ToolOutcome(kind=OutcomeKind.OK, result=value)
    if isinstance(error, ToolTransientError):
        return ToolOutcome(
            kind=OutcomeKind.TRANSIENT,
            retry_after_s=error.retry_after_s,
            error={"type": "transient", "message": str(error), **error.details},
        )
    if isinstance(error, ToolPermissionError):
        return ToolOutcome(
            kind=OutcomeKind.PERMISSION,
            error={"type": "permission", "message": str(error), **error.details},
        )
    if isinstance(error, ToolBusinessError):
        return ToolOutcome(
            kind=OutcomeKind.BUSINESS,
            error={"type": "business", "message": str(error), **error.details},
        )
    # An unexpected crash inside the tool: for a plain write we cannot know whether
    # the effect happened before it crashed.
    kind = OutcomeKind.BUSINESS if call.spec.honours_keys else OutcomeKind.UNCERTAIN
    return ToolOutcome(
        kind=kind, error={"type": "tool_crashed", "message": f"{type(error).__name__}: {error}"}
    )


async def aquery_status(call: ToolCall) -> StatusAnswer:
    try:
        fn = import_string(call.spec.status_tool)
    except Exception:  # noqa: BLE001 - a broken registration, whatever the import raised
        return StatusAnswer(
            state="unknown", detail=f"cannot load status query {call.spec.status_tool}"
        )
    finished, value, error = await _run_with_timeout(
        lambda: fn({"idempotency_key": call.context.idempotency_key}, call.context),
        max(call.spec.timeout_s, 5.0),
    )
    if not finished or error is not None:
        return StatusAnswer(
            state="unknown", detail=f"the status query failed: {error or 'timeout'}"
        )
    return status_answer_from(value)
