"""Making tool outputs storable: what a tool or a downstream service returns ends
up in PostgreSQL jsonb (ledger, step, event), which refuses NUL characters and
NaN, and in `json.dumps`, which refuses unknown types."""
from __future__ import annotations

import json
from typing import Any


def storable(value: Any) -> Any:
    """`value` as plain JSON that jsonb accepts: unknown types become strings,
    NaN/Infinity become null, NUL characters are dropped."""
    plain = json.loads(json.dumps(value, default=str), parse_constant=lambda _: None)
    return _without_nul(plain)


def has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, list):
        return any(has_nul(v) for v in value)
    if isinstance(value, dict):
        return any(has_nul(k) or has_nul(v) for k, v in value.items())
    return False


def _without_nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, list):
        return [_without_nul(v) for v in value]
    if isinstance(value, dict):
        return {_without_nul(k): _without_nul(v) for k, v in value.items()}
    return value
