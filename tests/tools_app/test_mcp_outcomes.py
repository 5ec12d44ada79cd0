"""How an MCP call's answer maps to an outcome (`mcp_kind.outcome_of`): the
whole table, for a tool that honours keys and for a plain write."""

from __future__ import annotations

import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from tools_app.executor.mcp_kind import outcome_of
from tools_app.executor.types import OutcomeKind, ToolCall, ToolContext, ToolSpec
from tools_app.mcp.connections import CallAnswer, PostFailure

OK, BUSINESS, PERMISSION = OutcomeKind.OK, OutcomeKind.BUSINESS, OutcomeKind.PERMISSION
TRANSIENT, UNCERTAIN = OutcomeKind.TRANSIENT, OutcomeKind.UNCERTAIN
AMBIGUOUS = "ambiguous"  # transient when the tool honours keys, else uncertain


def _result(**fields) -> types.CallToolResult:  # type: ignore[no-untyped-def]
    return types.CallToolResult(content=[types.TextContent(type="text", text="said")], **fields)


CASES = [
    ("structured", CallAnswer(result=_result(structured_content={"a": 1})), OK, {"a": 1}),
    ("content", CallAnswer(result=_result()), OK,
     {"content": [{"type": "text", "text": "said"}]}),
    ("is_error", CallAnswer(result=_result(is_error=True)), BUSINESS, None),
    ("jsonrpc error", CallAnswer(error=MCPError(-32602, "bad params")), BUSINESS, None),
    ("closed", CallAnswer(error=MCPError(types.CONNECTION_CLOSED, "closed")), AMBIGUOUS, None),
    ("sdk timeout", CallAnswer(error=MCPError(types.REQUEST_TIMEOUT, "late")), AMBIGUOUS, None),
    ("not a result", CallAnswer(invalid="garbage"), BUSINESS, None),
    ("refused", CallAnswer(failure=PostFailure(sent=False, message="x", refused=True)),
     PERMISSION, None),
    ("401", CallAnswer(failure=PostFailure(sent=False, message="x", status=401)), PERMISSION,
     None),
    ("422", CallAnswer(failure=PostFailure(sent=False, message="x", status=422)), BUSINESS, None),
    ("503", CallAnswer(failure=PostFailure(sent=False, message="x", status=503)), TRANSIENT,
     None),
    ("no connection", CallAnswer(failure=PostFailure(sent=False, message="x")), TRANSIENT, None),
    ("500", CallAnswer(failure=PostFailure(sent=True, message="x", status=500)), AMBIGUOUS,
     None),
    ("reset after sending", CallAnswer(failure=PostFailure(sent=True, message="x")), AMBIGUOUS,
     None),
]


def _call(side_effect: str, result_schema: dict | None = None) -> ToolCall:  # type: ignore[type-arg]
    spec = ToolSpec(name="s__t", kind="mcp", target="t", url="http://127.0.0.1:9/mcp",
                    side_effect=side_effect, result_schema=result_schema or {})
    return ToolCall(spec=spec, args={}, context=ToolContext(
        idempotency_key="k", task_id=1, step_id=1, tenant_id=1, trace_id="t"))


@pytest.mark.parametrize("side_effect", ["read", "idempotent_write", "write"])
@pytest.mark.parametrize(("label", "answer", "kind", "result"), CASES, ids=[c[0] for c in CASES])
def test_answers_map_to_outcomes(side_effect, label, answer, kind, result):
    outcome = outcome_of(_call(side_effect), answer)
    if kind == AMBIGUOUS:
        kind = UNCERTAIN if side_effect == "write" else TRANSIENT
    assert outcome.kind == kind
    if kind == OK:
        assert outcome.result == result
    else:
        assert outcome.error and outcome.error["type"]


def test_content_without_structure_fails_a_tool_that_has_an_output_schema():
    outcome = outcome_of(_call("read", {"type": "object"}), CallAnswer(result=_result()))
    assert outcome.kind == BUSINESS and outcome.error["type"] == "invalid_result"
