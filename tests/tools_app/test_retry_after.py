"""`Retry-After` as every outbound caller reads it (model endpoints, HTTP tools, webhooks)."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx2
import pytest

from tools_app.outbound.retry_after import retry_after_s


def headers(**values: str) -> httpx2.Headers:
    return httpx2.Headers({k.replace("_", "-"): v for k, v in values.items()})


@pytest.mark.parametrize(("given", "expected"), [
    ({}, None),
    ({"retry_after": "7"}, 7.0),
    ({"retry_after": "1.5"}, 1.5),
    ({"retry_after": "-3"}, 0.0),
    ({"retry_after": "soon"}, None),
    ({"retry_after": "nan"}, None),
    ({"retry_after": "inf"}, None),
    ({"retry_after_ms": "250"}, 0.25),
    ({"retry_after_ms": "250", "retry_after": "9"}, 0.25),  # the finer one wins
    ({"retry_after_ms": "x", "retry_after": "9"}, 9.0),
])
def test_seconds_and_milliseconds(given: dict[str, str], expected: float | None) -> None:
    assert retry_after_s(headers(**given)) == expected


def test_an_http_date_counts_from_now_and_a_past_one_is_no_wait() -> None:
    later = datetime.now(UTC) + timedelta(seconds=90)
    waited = retry_after_s(headers(retry_after=format_datetime(later, usegmt=True)))
    assert waited is not None and 85 <= waited <= 90
    past = datetime.now(UTC) - timedelta(hours=1)
    assert retry_after_s(headers(retry_after=format_datetime(past, usegmt=True))) == 0.0


def test_a_date_without_a_zone_is_utc() -> None:
    later = (datetime.now(UTC) + timedelta(seconds=60)).replace(tzinfo=None)
    waited = retry_after_s(headers(retry_after=later.strftime("%a, %d %b %Y %H:%M:%S -0000")))
    assert waited is not None and 55 <= waited <= 60
