"""What a server asks for when it says "not now": `Retry-After` (and `retry-after-ms`).

One reading for every outbound caller (model endpoints, HTTP tools, webhooks):
`retry-after-ms` (OpenAI-style milliseconds) wins, then `Retry-After` as
delta-seconds or an HTTP date (RFC 9110 10.2.3). A date without a zone is UTC.
Nonsense, or a time already past, reads as no wait at all (None or 0).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime


def retry_after_s(headers: Mapping[str, str]) -> float | None:
    """Seconds the server asked us to wait, or None when it did not say."""
    ms = _number(headers.get("retry-after-ms"))
    if ms is not None:
        return ms / 1000
    value = headers.get("retry-after")
    if not value:
        return None
    seconds = _number(value)
    if seconds is not None:
        return seconds
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _number(text: str | None) -> float | None:
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return max(0.0, value) if math.isfinite(value) else None
