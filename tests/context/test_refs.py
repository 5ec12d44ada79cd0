"""Cites and ids read from text a model or a tenant wrote: only ASCII digits
within bigint make an id; anything else is an unknown cite, never an error."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from foundations.ids import MAX_ID, parse_id
from tasks_app.context.refs import UNKNOWN, Cite, parse_cite


@pytest.mark.parametrize(
    ("ref", "cite"),
    [
        ("goal", Cite("goal")),
        ("input", Cite("input")),
        ("step:4", Cite("step", 4)),
        ("summary:v2", Cite("summary", 2)),
        ("summary:2", Cite("summary", 2)),
        ("answer:3", Cite("answer", 3)),
        ("approval:5", Cite("approval", 5)),
        ("step:²", UNKNOWN),
        ("step:٣", UNKNOWN),
        ("summary:v³", UNKNOWN),
        ("summary:vv2", UNKNOWN),
        ("step:" + "9" * 19, UNKNOWN),
        ("step:-1", UNKNOWN),
        ("step: 1", UNKNOWN),
        ("step:", UNKNOWN),
        ("step", UNKNOWN),
        ("event:1", UNKNOWN),
    ],
)
def test_a_cite_names_an_item_or_nothing(ref: str, cite: Cite) -> None:
    assert parse_cite(ref) == cite


@given(st.text())
def test_any_text_parses_without_raising(text: str) -> None:
    cite = parse_cite(text)
    assert cite.number is None or 0 <= cite.number <= MAX_ID
    number = parse_id(text)
    assert number is None or (text.isascii() and text.isdigit() and int(text) == number)


@pytest.mark.parametrize("value", [True, -1, 2**63, 1.0, "1.0", "+1", " 1", "²", "٣", None, [1]])
def test_only_ascii_digit_strings_and_bigint_ints_are_ids(value: object) -> None:
    assert parse_id(value) is None


def test_ids_in_range_are_read() -> None:
    assert parse_id("0") == 0
    assert parse_id("007") == 7
    assert parse_id(MAX_ID) == MAX_ID
    assert parse_id("9" * 18) == 10**18 - 1
