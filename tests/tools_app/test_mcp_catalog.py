"""A server's listing as Tether tools (`tools_app.mcp.catalog`): names every
model backend accepts, schemas checked like an admin's, hints as defaults."""

from __future__ import annotations

import mcp_types as types
import pytest

from tools_app.mcp.catalog import catalog, defaults_from

OBJECT = {"type": "object", "properties": {"q": {"type": "string"}}}


def _tool(name: str, schema: dict | None = None, **fields) -> types.Tool:  # type: ignore[no-untyped-def, type-arg]
    return types.Tool(name=name, input_schema=schema or OBJECT, **fields)


def test_names_are_prefixed_and_what_cannot_be_a_function_name_is_skipped():
    listed, skipped = catalog("gh", [
        _tool("search-code"), _tool("get.issue"), _tool("créer"), _tool("x" * 61),
        _tool("x" * 60)])
    assert [t.name for t in listed] == ["gh__search-code", "gh__" + "x" * 60]  # 64 characters
    assert {s.remote for s in skipped} == {"get.issue", "créer", "x" * 61}


@pytest.mark.parametrize(("schema", "problem"), [
    ({"type": "string"}, '"type": "object"'),
    ({"type": "object", "properties": {"q": {"pattern": "(a)\\1"}}}, "RE2"),
    ({"type": "object", "$ref": "https://evil.example/schema"}, "$ref"),
    ({"type": "object", "allOf": [{"$ref": "#"}]}, "cycle"),
])
def test_a_schema_tether_refuses_skips_that_tool_only(schema, problem):
    listed, skipped = catalog("s", [_tool("bad", schema), _tool("good")])
    assert [t.remote for t in listed] == ["good"]
    assert skipped[0].remote == "bad" and problem in skipped[0].reason


def test_an_output_schema_is_the_result_schema_and_is_checked_too():
    out = {"type": "object", "required": ["id"]}
    listed, _ = catalog("s", [_tool("t", output_schema=out)])
    assert listed[0].result_schema == out
    _, skipped = catalog("s", [_tool("t", output_schema={"type": "object",
                                                          "patternProperties": {"(a)\\1": {}}})])
    assert "output schema" in skipped[0].reason


@pytest.mark.parametrize(("hints", "expected"), [
    ({"readOnlyHint": True}, ("read", "low", False)),
    ({"idempotentHint": True, "destructiveHint": False}, ("idempotent_write", "medium", False)),
    ({"idempotentHint": True}, ("idempotent_write", "high", True)),
    ({}, ("write", "high", True)),
    ({"destructiveHint": False}, ("write", "medium", False)),
])
def test_hints_suggest_settings(hints, expected):
    d = defaults_from(hints)
    assert (d["side_effect"], d["risk"], d["requires_approval"]) == expected


def test_hints_are_read_from_the_annotations():
    annotations = types.ToolAnnotations(read_only_hint=True, open_world_hint=True)
    listed, _ = catalog("s", [_tool("t", annotations=annotations)])
    assert listed[0].hints == {"readOnlyHint": True}
