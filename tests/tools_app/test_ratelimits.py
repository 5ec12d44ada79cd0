"""The rate limits' buckets on the real Redis (and in-process, without one):
reservations in arrival order, tickets that keep a waiter's slot, settling with
what a call used, a 429's hold, and the field errors of a `rate_limit`."""
from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest

from tasks_app.gateway.model_settings import model_settings_errors
from tests.processes import REDIS_BROKER_URL
from tools_app.ratelimits import (
    Buckets,
    RateLimit,
    Reservation,
    bucket_key,
    estimate_tokens,
    model_bucket_key,
    rate_limit_errors,
)

PERIOD_S = 10.0  # 100 tokens per period: 0.1 s a token


@pytest.fixture
def period(settings: Any) -> None:
    settings.TETHER = {**settings.TETHER, "RATE_LIMIT_PERIOD_S": PERIOD_S}


@pytest.fixture(params=["redis", "local"])
def store(request: pytest.FixtureRequest, period: None) -> Buckets:
    return Buckets(REDIS_BROKER_URL if request.param == "redis" else "")


def reserve(store: Buckets, bucket: str, limit: RateLimit, tokens: int,
            ticket: str) -> Reservation:
    return asyncio.run(store.reserve(bucket, limit, tokens=tokens, ticket=ticket))


class Slot(float):
    """When the reservation says the call may go, on this process's clock (so
    that the time the reservations themselves take does not count), and
    `spread`: how long asking took. The bucket reads its clock somewhere within
    that time, so on a loaded machine a slot is known to within it."""

    spread: float


def slot(store: Buckets, bucket: str, limit: RateLimit, tokens: int, ticket: str) -> Slot:
    asked = time.monotonic()
    wait_s = reserve(store, bucket, limit, tokens, ticket).wait_s
    at = Slot(asked + wait_s)
    at.spread = time.monotonic() - asked
    return at


def apart(later: float, earlier: float, expected: float, tolerance: float = 0.1) -> bool:
    """`later` comes `expected` seconds after `earlier`, within `tolerance` and
    the time it took to ask for each."""
    slack = tolerance + getattr(later, "spread", 0.0) + getattr(earlier, "spread", 0.0)
    return abs(later - earlier - expected) <= slack


def test_waiters_get_slots_in_arrival_order_one_call_apart(store: Buckets) -> None:
    bucket, limit = uuid.uuid4().hex, RateLimit(tokens_per_minute=100)
    assert reserve(store, bucket, limit, 10, ticket="task-0").wait_s == 0  # at once
    slots = [slot(store, bucket, limit, 10, ticket=f"task-{i}") for i in range(1, 5)]
    # each next one a call's tokens later (10 x 0.1 s)
    for before, after in zip(slots, slots[1:], strict=False):
        assert apart(after, before, 1.0), (after - before, after.spread, before.spread)
    # a waiter asking again keeps its slot (no second reservation, nobody pushed back)
    asked = time.monotonic()
    again = reserve(store, bucket, limit, 10, ticket="task-2")
    kept = Slot(asked + again.wait_s)
    kept.spread = time.monotonic() - asked
    assert apart(kept, slots[1], 0.0) and not again.fresh
    assert apart(slot(store, bucket, limit, 10, ticket="task-9"), slots[-1], 1.0)


def test_requests_per_minute_spaces_calls_whatever_their_tokens(store: Buckets) -> None:
    bucket, limit = uuid.uuid4().hex, RateLimit(requests_per_minute=20)  # one per 0.5 s
    slots = [slot(store, bucket, limit, 1000, ticket=str(i)) for i in range(3)]
    assert all(apart(s, slots[0], gap) for s, gap in zip(slots, [0.0, 0.5, 1.0], strict=True))


def test_settling_gives_back_what_was_not_used_and_a_429_holds_the_bucket(
        store: Buckets) -> None:
    bucket, limit = uuid.uuid4().hex, RateLimit(tokens_per_minute=100)
    started = time.monotonic()
    assert reserve(store, bucket, limit, 30, ticket="a").wait_s == 0
    asyncio.run(store.adjust(bucket, limit, tokens=-20))  # it used 10 of its 30
    assert apart(slot(store, bucket, limit, 10, ticket="b"), started, 1.0, 0.15)
    held = time.monotonic()
    asyncio.run(store.adjust(bucket, limit, hold_s=4.0))  # the provider said 429, wait 4 s
    assert apart(slot(store, bucket, limit, 10, ticket="c"), held, 4.0, 0.15)
    # a refund never makes credit: the next call after a large one waits its own share only
    other = uuid.uuid4().hex
    assert reserve(store, other, limit, 10, ticket="a").wait_s == 0
    asyncio.run(store.adjust(other, limit, tokens=-1000))
    started = time.monotonic()
    assert reserve(store, other, limit, 10, ticket="b").wait_s == 0
    assert apart(slot(store, other, limit, 10, ticket="c"), started, 1.0, 0.15)


def test_a_window_sees_at_most_the_limit_plus_one_call(store: Buckets) -> None:
    """Slots of many callers (sizes varying) in any window of one period hold
    at most the limit's tokens plus one call's."""
    bucket, limit = uuid.uuid4().hex, RateLimit(tokens_per_minute=100)
    slots = []
    for i in range(40):
        tokens = 5 + (i * 7) % 20
        slots.append((slot(store, bucket, limit, tokens, ticket=str(i)), tokens))
    for start, _ in slots:
        within = sum(t for at, t in slots if start <= at < start + PERIOD_S)
        assert within <= 100 + 25, (start, within)
    first = slots[0][0]
    assert sum(t for at, t in slots if at < first + PERIOD_S) >= 90  # and the limit is used


def test_the_bucket_is_keyed_by_endpoint_model_and_key_reference_never_the_key() -> None:
    a = model_bucket_key(tenant_id=1, base_url="https://api.x/v1/", model="m",
                         key_ref="secret:openai")
    assert a == model_bucket_key(tenant_id=1, base_url="https://api.x/v1", model="m",
                                 key_ref="secret:openai")
    # another tenant's secret of the same name is another key
    assert a != model_bucket_key(tenant_id=2, base_url="https://api.x/v1", model="m",
                                 key_ref="secret:openai")
    # an operator's variable is one key for every tenant
    assert model_bucket_key(tenant_id=1, base_url="https://api.x/v1", model="m",
                            key_ref="env:OPENAI_KEY") == model_bucket_key(
        tenant_id=2, base_url="https://api.x/v1", model="m", key_ref="env:OPENAI_KEY")
    assert len(bucket_key("x")) == 32


def test_a_call_reserves_its_characters_over_four_plus_max_tokens() -> None:
    request = {"messages": [{"role": "user", "content": "x" * 400}], "tools": []}
    base = estimate_tokens(request, 0) - estimate_tokens({"messages": [], "tools": []}, 0)
    assert 100 <= base <= 110
    assert estimate_tokens(request, 64) - estimate_tokens(request, 1) == 63


@pytest.mark.parametrize(("value", "problem"), [
    ("fast", "a JSON object"),
    ({"tokens_per_minute": 0}, "a whole number"),
    ({"tokens_per_minute": 1.5}, "a whole number"),
    ({"requests_per_minute": True}, "a whole number"),
    ({"rpm": 5}, "unknown field"),
    ({}, "at least one"),
])
def test_a_bad_rate_limit_is_a_field_error(value: Any, problem: str) -> None:
    errors = model_settings_errors({"backend": "openai", "name": "m",
                                    "base_url": "https://api.example.com/v1",
                                    "rate_limit": value,
                                    "fallback": {"name": "f", "rate_limit": value}})
    assert any(problem in e for e in errors["rate_limit"]), errors
    assert any(problem in e for e in errors["fallback.rate_limit"]), errors


def test_a_tool_limit_counts_requests_only() -> None:
    assert rate_limit_errors({"requests_per_minute": 60}, tokens=False) == []
    assert rate_limit_errors({"tokens_per_minute": 60}, tokens=False)
