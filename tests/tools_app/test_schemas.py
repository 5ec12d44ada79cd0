"""The one validator of tenant schemas (`tools_app.schemas`): what it does
with values and with stored schemas that are too costly to apply."""
from __future__ import annotations

from typing import Any

import pytest

from config.errors import DomainError
from tools_app.executor.dispatch import check_result
from tools_app.schemas import MAX_EVALUATIONS, SchemaRefused, check_schema, schema_errors

# Two subschemas take the same property at each level: the work doubles with
# each level of the value, yet every level of the value is smaller.
DOUBLING = {"allOf": [{"properties": {"a": {"$ref": "#"}}}, {"properties": {"a": {"$ref": "#"}}}]}
NESTED_LISTS = {"$defs": {"n": {"type": "array", "items": {"$ref": "#/$defs/n"}}},
                "$ref": "#/$defs/n"}


def _chain(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels):
        value = {"a": value}
    return value


def _lists(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels):
        value = [value]
    return value


def test_a_value_that_needs_too_many_checks_is_invalid_not_a_stall() -> None:
    assert schema_errors(DOUBLING, _chain(5)) == []  # 2**5 checks: fine
    assert schema_errors(DOUBLING, _chain(40)) == [
        f"(root): validating this value took more than {MAX_EVALUATIONS} schema checks"]


def test_a_value_nested_too_deep_to_validate_is_invalid() -> None:
    assert schema_errors(NESTED_LISTS, _lists(50)) == []
    assert schema_errors(NESTED_LISTS, _lists(5_000)) == [
        "(root): the value is nested too deep to validate"]


@pytest.mark.parametrize("stored", [
    {"$ref": "#"},
    {"type": "string", "pattern": r"(x+)\1"},
    {"$ref": "https://127.0.0.1:9/remote.json"},
    ["not", "a", "schema"],
])
def test_a_stored_schema_the_rules_refuse_is_never_applied(stored: Any) -> None:
    with pytest.raises(SchemaRefused) as refused:
        schema_errors(stored, "x")
    assert isinstance(refused.value, DomainError) and refused.value.code == "schema_refused"
    assert refused.value.problems


def test_a_tool_result_against_a_refused_stored_schema_is_a_business_error() -> None:
    """The call happened: its outcome is recorded and the model told, never lost
    to an exception."""
    problem = check_result({"$ref": "#"}, {"ok": True})
    assert problem is not None and problem["type"] == "invalid_result"
    assert "cycle" in " ".join(problem["errors"])


def test_a_lone_surrogate_is_matched_as_a_replacement_character_not_an_error() -> None:
    """Valid JSON (`"\\ud800"`), but not UTF-8, which RE2 works on."""
    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": "^a"}},
              "patternProperties": {"^k": {"type": "integer"}}, "additionalProperties": False}
    assert schema_errors(schema, {"s": "a\ud800"}) == []
    errors = schema_errors(schema, {"s": "\ud800a", "k\ud800": "x", "\ud800": 1})
    assert len(errors) == 3, errors
    assert check_schema({"type": "string", "pattern": "\ud800"}) == [
        "the schema contains an unpaired surrogate: it is not text"]
    assert check_schema({"type": "string", "pattern": "a\x00"}) == [
        "the schema contains a NUL (\\u0000) character"]
