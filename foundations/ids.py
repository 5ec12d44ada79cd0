"""Ids read from text that a tenant, a requester or a model controls: path
segments, query strings, cursors, a decision's cites, WebSocket messages.

An id is 1 to 18 ASCII digits, so it always fits PostgreSQL's bigint. Neither
`str.isdigit()` nor the regex `\\d` is a test for that: both accept other
Unicode digits ('²', '٣'), which `int()` then refuses (a ValueError, a 500) or
reads as a number nobody wrote. Everything that turns such text into an id
goes through `parse_id`.
"""

from __future__ import annotations

import re

ID_PATTERN = "[0-9]{1,18}"
MAX_ID = 2**63 - 1
_ID = re.compile(ID_PATTERN)


def parse_id(value: object) -> int | None:
    """`value` as a non-negative id, or None when it is not one. Accepts an int
    in bigint range or a string of 1 to 18 ASCII digits; nothing else (no
    bools, floats, signs, spaces or non-ASCII digits)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value <= MAX_ID else None
    if isinstance(value, str) and _ID.fullmatch(value):
        return int(value)
    return None
