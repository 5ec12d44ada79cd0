"""The one validator of tenant schemas (`tools_app.schemas`): what it does
with values and with stored schemas that are too costly to apply."""
from __future__ import annotations

from typing import Any

import pytest

from foundations.errors import DomainError
from tools_app.executor.dispatch import check_result
from tools_app.schemas import (
    MAX_ENUM,
    MAX_EVALUATIONS,
    MAX_VALUE_BYTES,
    SchemaRefused,
    check_schema,
    schema_errors,
)

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


# --- bounded work: every keyword pays for what it walks -----------------------------------
# Valid values below (an invalid one stops at the first few errors): the whole
# walk is what the meter must bound.

COSTLY = f"(root): validating this value took more than {MAX_EVALUATIONS} schema checks"
ITEMS = 30_000


def test_unique_items_is_linear_and_stops_with_the_cost_error_when_repeated() -> None:
    """jsonschema compares unsortable items pairwise: 30,000 objects took minutes.
    Hashed canonical JSON decides them in one pass, one charge per item."""
    distinct = [{"k": i} for i in range(ITEMS)]
    unique = {"type": "array", "uniqueItems": True}
    assert schema_errors(unique, distinct) == []
    (error,) = schema_errors(unique, [*distinct, {"k": 0}])
    assert error.startswith("(root): [{'k': 0}, ") and error.endswith("has non-unique elements")
    # the same check applied in place again and again: the meter stops it
    assert schema_errors({"type": "array", "allOf": [unique] * 10}, distinct) == [COSTLY]


@pytest.mark.parametrize(("items", "unique"), [
    ([1, 1.0], False), ([1, True], True), ([0, False], True), ([{"a": 1, "b": [2.0]},
                                                               {"b": [2], "a": 1}], False),
    (["1", 1], True), ([[1, 2], [2, 1]], True), ([None, None], False),
])
def test_unique_items_and_enum_keep_json_schema_equality(items: list[Any], unique: bool) -> None:
    """Equal as JSON Schema says (1 == 1.0, true != 1, key order does not matter)."""
    assert (schema_errors({"uniqueItems": True}, items) == []) is unique
    assert (schema_errors({"enum": [items[0]]}, items[1]) == []) is not unique
    assert (schema_errors({"const": items[0]}, items[1]) == []) is not unique


def test_an_enum_is_one_hashed_lookup_and_every_lookup_is_charged() -> None:
    values = [{"v": i} for i in range(1000)]
    assert schema_errors({"items": {"enum": values}}, [{"v": 999}] * 3_000) == []
    assert schema_errors({"items": {"allOf": [{"enum": values}] * 5}},
                         [{"v": 999}] * ITEMS) == [COSTLY]


def test_an_enum_of_more_than_the_limit_is_refused_at_registration() -> None:
    assert check_schema({"enum": list(range(MAX_ENUM))}) == []
    assert check_schema({"properties": {"x": {"enum": list(range(5_000))}}}) == [
        f"#/properties/x/enum: 5000 values; at most {MAX_ENUM} are allowed"]


@pytest.mark.parametrize("keyword", ["unevaluatedProperties", "unevaluatedItems"])
def test_unevaluated_keywords_are_refused(keyword: str) -> None:
    """jsonschema evaluates them outside its keyword checks, quadratic in the value."""
    assert check_schema({keyword: False}) == [f"#: {keyword} is not supported"]


@pytest.mark.parametrize(("schema", "value"), [
    # each extra key is matched against every pattern
    ({"additionalProperties": False, "patternProperties": {f"^x{i}": {} for i in range(500)}},
     {f"k{i}": 1 for i in range(ITEMS)}),
    # an empty subschema costs jsonschema nothing to apply, but applying it is work
    ({"items": {"allOf": [{}] * 900}}, [1] * ITEMS),
    ({"items": {"not": {"required": [f"p{i}" for i in range(2_000)]}}}, [{}] * ITEMS),
    # each failed branch prints the whole value in its message
    ({"anyOf": [{"type": "string"}] * 900}, {f"k{i}": "v" * 10 for i in range(ITEMS)}),
    # RE2 is linear, but 900 passes over 900 KB is still work
    ({"allOf": [{"pattern": "^b+$"}] * 900}, "b" * 900_000),
], ids=["patterns-per-key", "empty-subschemas", "required-per-item", "printed-values",
        "long-strings"])
def test_work_hidden_inside_one_keyword_check_is_charged(schema: dict[str, Any],
                                                         value: Any) -> None:
    assert check_schema(schema) == []
    assert schema_errors(schema, value) == [COSTLY]


def test_a_value_larger_than_the_limit_is_not_validated() -> None:
    big = {"s": "x" * MAX_VALUE_BYTES}
    assert schema_errors({"type": "object"}, big) == [
        f"(root): the value is larger than {MAX_VALUE_BYTES} bytes of JSON, the most a schema "
        "is applied to"]


def test_only_the_first_errors_are_produced() -> None:
    errors = schema_errors({"items": {"type": "string"}}, list(range(ITEMS)), limit=3)
    assert errors == ["0: 0 is not of type 'string'", "1: 1 is not of type 'string'",
                      "2: 2 is not of type 'string'"]


def test_a_tool_result_too_costly_to_validate_is_a_final_business_error() -> None:
    """Not an exception the runner would retry: the call is recorded, the model told."""
    problem = check_result({"type": "array", "allOf": [{"uniqueItems": True}] * 10},
                           list(range(20_000)))
    assert problem == {"type": "invalid_result", "errors": [COSTLY],
                       "message": "the tool result does not match its schema"}
