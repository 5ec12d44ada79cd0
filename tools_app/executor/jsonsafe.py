"""Making tool and model outputs storable: what a tool, a downstream service or a
model returns ends up in PostgreSQL jsonb (ledger, step, event), which refuses
NUL characters and NaN, in UTF-8 text, which cannot hold a lone surrogate
(`"\\ud800"` is valid JSON, not valid Unicode), and in `json.dumps`, which
refuses unknown types."""
from __future__ import annotations

import json
import re
from typing import Any

# What jsonb or UTF-8 cannot store: NUL, and the surrogate halves that only
# mean something in pairs inside UTF-16.
UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable(value: Any) -> Any:
    """`value` as plain JSON that jsonb accepts: unknown types become strings,
    NaN/Infinity become null, NUL characters are dropped, lone surrogates become
    U+FFFD."""
    plain = json.loads(json.dumps(value, default=str), parse_constant=lambda _: None)
    return _cleaned(plain)


def storable_text(text: str) -> str:
    """`text` without NUL characters, its lone surrogates replaced by U+FFFD."""
    return UNSTORABLE.sub(lambda m: "" if m.group() == "\x00" else "\ufffd", text)


def has_unstorable(value: Any) -> bool:
    """Whether `value` holds a NUL or a lone surrogate anywhere, keys included."""
    if isinstance(value, str):
        return UNSTORABLE.search(value) is not None
    if isinstance(value, list):
        return any(has_unstorable(v) for v in value)
    if isinstance(value, dict):
        return any(has_unstorable(k) or has_unstorable(v) for k, v in value.items())
    return False


def _cleaned(value: Any) -> Any:
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, list):
        return [_cleaned(v) for v in value]
    if isinstance(value, dict):
        return {_cleaned(k): _cleaned(v) for k, v in value.items()}
    return value
