"""Resolved values, and their redaction from anything that is stored or logged.

A `Resolved` holds the values of some references (`secret:NAME`, `env:NAME`)
for one call, and why the others could not be resolved. Its values never
appear in its repr. A downstream service or model endpoint may echo what it
was sent (a header, a bearer token) back in an answer or an error: every such
answer passes through `redact` before it is stored, logged or shown to the model.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

MASK = "[redacted secret]"
# What replaces an answer whose secret could not be cut out cleanly (inside a
# number, say): the whole answer goes, not the secret.
WITHHELD = {"type": "redacted", "message": "the answer contained a secret value; withheld"}


class Unresolved(Exception):
    """A reference could not be resolved; the message names it, never a value."""


@dataclass(frozen=True)
class Resolved:
    values: Mapping[str, str] = field(default_factory=dict, repr=False)
    problems: Mapping[str, str] = field(default_factory=dict)

    def get(self, ref: str) -> str:
        """The value of `ref`; raises `Unresolved` with the reason."""
        if ref in self.values:
            return self.values[ref]
        raise Unresolved(self.problems.get(ref, f"{ref} was not resolved"))

    def redact(self, data: Any) -> Any:
        return redact(data, self.values.values())


def redact(data: Any, secrets: Iterable[str]) -> Any:
    """`data` (text or JSON-like) with every occurrence of each value masked."""
    found = sorted({s for s in secrets if s}, key=len, reverse=True)
    if not found or data is None:
        return data
    if isinstance(data, str):
        for value in found:
            data = data.replace(value, MASK)
        return data
    try:
        text = json.dumps(data, ensure_ascii=False, default=str)
    except ValueError:  # a circular structure: nothing an answer parses into
        return dict(WITHHELD)
    # A value appears in the JSON text as its own escaped form, inside a string.
    escaped = [json.dumps(value, ensure_ascii=False)[1:-1] for value in found]
    if not any(e in text for e in escaped):
        return data
    for value in escaped:
        text = text.replace(value, MASK)
    try:
        return json.loads(text)
    except ValueError:
        return dict(WITHHELD)
