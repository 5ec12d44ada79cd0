"""Rate limits applied before a call: a model endpoint's requests and tokens per
minute, a tool's requests per minute, shared by every worker process and host.

What a limit is (on an agent profile's `model`, its `fallback`, or an http/mcp
tool)::

    "rate_limit": {"requests_per_minute": 500, "tokens_per_minute": 90000}

How it is kept: one bucket per endpoint and key (`bucket_key`), in Redis, as
GCRA (the generic cell rate algorithm: a token bucket kept as the time at which
it will next be full, "theoretical arrival time"). Each call *reserves*: the
script moves the bucket's time forward by the call's cost and answers when the
call may go, now or later. A reservation is taken at arrival, so calls are
served in arrival order across tasks, processes and hosts with no queue to
keep: the n-th waiter's slot is after the (n-1)-th's. There is no burst beyond
one call: over any window of one period the endpoint receives at most the limit
plus one call's reservation.

Why Redis, not PostgreSQL: every model call of every task to one endpoint
updates the same bucket. In PostgreSQL that is one hot row, locked and written
(WAL, a dead tuple) per call, serialising the calls on its lock; in Redis it
is one Lua script, atomic and well under a millisecond, with the clock of the
Redis server (`TIME`) shared by all hosts. Losing the buckets (a Redis restart)
loses nothing durable: the next calls start from an empty bucket. The Redis is
`TETHER_RATE_LIMIT_URL` (by default the cache's, else the broker's); with none
(the embedded runner, one process) the same algorithm runs in the process.

A waiting call holds no worker: the caller ends its slice and comes back at its
slot; its reservation is remembered as a *ticket* (per bucket and task) so it
does not queue again. A ticket not used within `TICKET_GRACE_S` after its slot
expires (the task was canceled, or its worker died): the slot is lost, not
the order of the others.

After the reply, the reservation is corrected with the reply's usage
(`Buckets.adjust`, called by the runner's settle): what was reserved but not
used is given back, and what was used
beyond it is taken. A 429 from the provider holds the whole bucket until its
`Retry-After` (`adjust`'s `hold_s`).
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import math
import threading
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings

RATE_LIMIT_FIELDS = ("requests_per_minute", "tokens_per_minute")
MAX_PER_MINUTE = 10**9
# A wait this short is taken on the I/O loop (it holds no thread), not by
# ending the slice: a re-dispatch costs more than it. A waiting task is handed
# back `EARLY_WAKE_S` before its slot and waits the rest there, so that the
# time a slice takes to start (lease, plan, context) does not make it late:
# late calls would bunch with the punctual ones after them.
INLINE_WAIT_S = 0.75
EARLY_WAKE_S = 0.5
# How long a ticket outlives its slot (the task may come back a little late).
TICKET_GRACE_S = 30.0
# Output tokens reserved for a call whose `max_tokens` is not set.
DEFAULT_OUTPUT_TOKENS = 512
CHARS_PER_TOKEN = 4


@dataclass(frozen=True)
class RateLimit:
    requests_per_minute: int = 0  # 0: no limit
    tokens_per_minute: int = 0

    @property
    def enabled(self) -> bool:
        return bool(self.requests_per_minute or self.tokens_per_minute)

    def intervals_ms(self) -> tuple[float, float]:
        """Milliseconds per token and per request over the period (0: no limit)."""
        period_ms = float(settings.TETHER["RATE_LIMIT_PERIOD_S"]) * 1000.0
        per_token = period_ms / self.tokens_per_minute if self.tokens_per_minute else 0.0
        per_request = period_ms / self.requests_per_minute if self.requests_per_minute else 0.0
        return per_token, per_request

    def as_dict(self) -> dict[str, int]:
        return {k: v for k, v in (("requests_per_minute", self.requests_per_minute),
                                  ("tokens_per_minute", self.tokens_per_minute)) if v}


NO_LIMIT = RateLimit()


def parse_rate_limit(value: Any) -> RateLimit:
    """The limit of a checked `rate_limit` (`rate_limit_errors` first)."""
    if not isinstance(value, dict):
        return NO_LIMIT
    return RateLimit(requests_per_minute=int(value.get("requests_per_minute") or 0),
                     tokens_per_minute=int(value.get("tokens_per_minute") or 0))


def rate_limit_errors(value: Any, *, tokens: bool = True) -> list[str]:
    """What is wrong with a `rate_limit` (a tool's has no `tokens_per_minute`)."""
    if value is None:
        return []
    allowed = RATE_LIMIT_FIELDS if tokens else RATE_LIMIT_FIELDS[:1]
    shape = "{" + ", ".join(allowed) + "}"
    if not isinstance(value, dict):
        return [f"a JSON object {shape}"]
    problems = [f"unknown field {key!r}: one of {', '.join(allowed)}"
                for key in value if key not in allowed]
    for key in allowed:
        number = value.get(key)
        if number is None:
            continue
        if isinstance(number, bool) or not isinstance(number, int) \
                or not 1 <= number <= MAX_PER_MINUTE:
            problems.append(f"{key}: a whole number from 1 to {MAX_PER_MINUTE}")
    if not problems and not any(value.get(key) for key in allowed):
        problems.append(f"give at least one of {', '.join(allowed)}")
    return problems


def bucket_key(*parts: object) -> str:
    """The bucket of an endpoint and key: a hash of what names them (base URL,
    model, the key's *reference*: `secret:NAME` with its tenant, or
    `env:NAME`), never the key itself. The same endpoint and key used by
    several agents is one bucket."""
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()[:32]


def model_bucket_key(*, tenant_id: int, base_url: str, model: str, key_ref: str) -> str:
    """A tenant's secret is the tenant's own key: its bucket is the tenant's. An
    operator's variable (`env:`) or no key is one key for every tenant."""
    owner = tenant_id if key_ref.startswith("secret:") else "*"
    return bucket_key("model", base_url.rstrip("/"), model, key_ref, owner)


def estimate_tokens(request: dict[str, Any], max_tokens: int | None) -> int:
    """A model call's reservation: the request's messages and tools at
    `CHARS_PER_TOKEN` characters a token (the usual figure for English text and
    JSON with OpenAI's and Llama's tokenizers), plus the reply's `max_tokens`
    (`DEFAULT_OUTPUT_TOKENS` when unset). The reply's usage corrects it."""
    chars = len(json.dumps([request.get("messages") or [], request.get("tools") or []],
                           separators=(",", ":"), default=str))
    return math.ceil(chars / CHARS_PER_TOKEN) + (max_tokens or DEFAULT_OUTPUT_TOKENS)


@dataclass(frozen=True)
class Reservation:
    """What `reserve` answered: go now (`wait_s` 0) with `tokens` reserved, or
    come back after `wait_s` (the ticket holds the slot)."""

    wait_s: float
    tokens: int
    fresh: bool = True  # a new reservation (False: a ticket's): counted once


# --- the Redis scripts ------------------------------------------------------------------
# KEYS[1]: the bucket (hash: t = tokens' time, r = requests' time, in ms of
# the Redis clock); KEYS[2]: the caller's ticket ("slot_ms:tokens").
# ARGV: tokens, ms per token, ms per request, inline wait ms, ticket grace ms.
# Answers {wait_ms, tokens, fresh}: fresh 1 for a new reservation, 0 for a
# ticket used now, 2 for a ticket whose slot is still ahead.
RESERVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local ticket = redis.call('GET', KEYS[2])
if ticket then
  local slot, tokens = string.match(ticket, '([^:]+):([^:]+)')
  slot = tonumber(slot)
  if slot - now <= tonumber(ARGV[4]) then
    redis.call('DEL', KEYS[2])
    return {tostring(math.max(0, slot - now)), tokens, 0}
  end
  return {tostring(slot - now), tokens, 2}
end
local cost = tonumber(ARGV[1])
local per_token, per_request = tonumber(ARGV[2]), tonumber(ARGV[3])
local slot = now
local tt = tonumber(redis.call('HGET', KEYS[1], 't') or now)
local tr = tonumber(redis.call('HGET', KEYS[1], 'r') or now)
if per_token > 0 and tt > slot then slot = tt end
if per_request > 0 and tr > slot then slot = tr end
if per_token > 0 then redis.call('HSET', KEYS[1], 't', tostring(slot + cost * per_token)) end
if per_request > 0 then redis.call('HSET', KEYS[1], 'r', tostring(slot + per_request)) end
local ahead = slot - now + cost * per_token + per_request
redis.call('PEXPIRE', KEYS[1], math.ceil(ahead + tonumber(ARGV[5])))
if slot - now > tonumber(ARGV[4]) then
  redis.call('SET', KEYS[2], tostring(slot) .. ':' .. ARGV[1], 'PX',
             math.ceil(slot - now + tonumber(ARGV[5])))
  return {tostring(slot - now), ARGV[1], 1}
end
return {tostring(slot - now), ARGV[1], 1}
"""
# KEYS[1]: the bucket. ARGV: tokens to take back (negative: to give back), ms
# per token, hold until ms from now (0: no hold). Never earlier than now: a
# refund makes no burst.
ADJUST = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local delta, per_token, hold = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local last = now
for _, field in ipairs({'t', 'r'}) do
  local at = tonumber(redis.call('HGET', KEYS[1], field) or now)
  if field == 't' then at = at + delta * per_token end
  if hold > 0 and at < now + hold then at = now + hold end
  if at < now then at = now end
  redis.call('HSET', KEYS[1], field, tostring(at))
  if at > last then last = at end
end
redis.call('PEXPIRE', KEYS[1], math.ceil(last - now + tonumber(ARGV[4])))
return 1
"""
PREFIX = "tether:rl:"


class Buckets:
    """The shared buckets (Redis), or this process's when no Redis is configured."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._clients: dict[int, Any] = {}  # one asyncio client per event loop
        self._sync: Any = None
        self._local = _LocalBuckets() if not url else None

    # the clients are made on first use: the redis package is imported only then
    def _client(self) -> Any:
        import redis.asyncio as aredis

        loop = asyncio.get_running_loop()
        client = self._clients.get(id(loop))
        if client is None:
            client = self._clients[id(loop)] = aredis.Redis.from_url(
                self.url, socket_timeout=2.0, socket_connect_timeout=2.0)
        return client

    def _sync_client(self) -> Any:
        import redis

        if self._sync is None:
            self._sync = redis.Redis.from_url(self.url, socket_timeout=2.0,
                                              socket_connect_timeout=2.0)
        return self._sync

    def _reserve_args(self, bucket: str, ticket: str, limit: RateLimit, tokens: int,
                      inline_s: float) -> tuple[list[str], list[Any]]:
        per_token, per_request = limit.intervals_ms()
        return ([PREFIX + bucket, f"{PREFIX}ticket:{bucket}:{ticket}"],
                [tokens, per_token, per_request, inline_s * 1000, TICKET_GRACE_S * 1000])

    async def reserve(self, bucket: str, limit: RateLimit, *, tokens: int, ticket: str,
                      inline_s: float = INLINE_WAIT_S) -> Reservation:
        """Reserve `tokens` (and one request) for the holder of `ticket` (a task);
        a wait of at most `inline_s` is the caller's to take (no ticket kept)."""
        if self._local is not None:
            return self._local.reserve(bucket, limit, tokens=tokens, ticket=ticket,
                                       inline_s=inline_s)
        keys, args = self._reserve_args(bucket, ticket, limit, tokens, inline_s)
        answer = await self._client().eval(RESERVE, len(keys), *keys, *args)
        return _reservation(answer)

    def reserve_now(self, bucket: str, limit: RateLimit, *, tokens: int, ticket: str,
                    inline_s: float) -> Reservation:
        """`reserve`, for a caller in a database phase (a tool call's admission)."""
        if self._local is not None:
            return self._local.reserve(bucket, limit, tokens=tokens, ticket=ticket,
                                       inline_s=inline_s)
        keys, args = self._reserve_args(bucket, ticket, limit, tokens, inline_s)
        return _reservation(self._sync_client().eval(RESERVE, len(keys), *keys, *args))

    async def adjust(self, bucket: str, limit: RateLimit, *, tokens: int = 0,
                     hold_s: float = 0.0) -> None:
        """Take `tokens` more (negative: give them back), and hold the bucket
        `hold_s` from now (a provider's Retry-After)."""
        if self._local is not None:
            self._local.adjust(bucket, limit, tokens=tokens, hold_s=hold_s)
            return
        per_token, _ = limit.intervals_ms()
        await self._client().eval(ADJUST, 1, PREFIX + bucket, tokens, per_token,
                                  hold_s * 1000, TICKET_GRACE_S * 1000)


def _reservation(answer: list[Any]) -> Reservation:
    wait_ms, tokens, fresh = answer
    return Reservation(wait_s=max(0.0, float(wait_ms) / 1000.0), tokens=int(tokens),
                       fresh=int(fresh) == 1)


class _LocalBuckets:
    """The same algorithm in one process (no Redis configured)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.times: dict[str, list[float]] = {}
        self.tickets: dict[str, tuple[float, int]] = {}

    def reserve(self, bucket: str, limit: RateLimit, *, tokens: int, ticket: str,
                inline_s: float) -> Reservation:
        now = time.monotonic() * 1000
        per_token, per_request = limit.intervals_ms()
        with self.lock:
            key = f"{bucket}:{ticket}"
            held = self.tickets.pop(key, None)
            if held is not None and now - held[0] <= TICKET_GRACE_S * 1000:
                slot, reserved = held
                if slot - now > inline_s * 1000:
                    self.tickets[key] = held
                return Reservation(max(0.0, (slot - now) / 1000), reserved, fresh=False)
            at = self.times.setdefault(bucket, [now, now])
            slot = max(now, at[0] if per_token else now, at[1] if per_request else now)
            if per_token:
                at[0] = slot + tokens * per_token
            if per_request:
                at[1] = slot + per_request
            if slot - now > inline_s * 1000:
                self.tickets[key] = (slot, tokens)
                return Reservation((slot - now) / 1000, tokens)
            return Reservation(max(0.0, (slot - now) / 1000), tokens)

    def adjust(self, bucket: str, limit: RateLimit, *, tokens: int, hold_s: float) -> None:
        now = time.monotonic() * 1000
        per_token, _ = limit.intervals_ms()
        with self.lock:
            at = self.times.setdefault(bucket, [now, now])
            at[0] += tokens * per_token
            for i in (0, 1):
                at[i] = max(at[i], now + hold_s * 1000 if hold_s else now)


BACKLOG = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local at = math.max(tonumber(redis.call('HGET', KEYS[1], 't') or now),
                    tonumber(redis.call('HGET', KEYS[1], 'r') or now))
return tostring(math.max(0, at - now))
"""


def backlog_s(bucket: str) -> float:
    """How far ahead the bucket's next free slot is: the wait a call arriving
    now would have (0: calls go at once). Never raises: a page shows it."""
    store = buckets()
    try:
        if store._local is not None:
            now = time.monotonic() * 1000
            times = store._local.times.get(bucket, [now, now])
            return max(0.0, max(times) - now) / 1000
        return float(store._sync_client().eval(BACKLOG, 1, PREFIX + bucket)) / 1000
    except Exception:  # noqa: BLE001 - Redis away: nothing to show, the page still opens
        return 0.0


_buckets: Buckets | None = None
_buckets_lock = threading.Lock()


def buckets() -> Buckets:
    """This process's handle on the shared buckets (`TETHER_RATE_LIMIT_URL`)."""
    global _buckets
    url = str(settings.TETHER["RATE_LIMIT_URL"] or "")
    if _buckets is None or _buckets.url != url:
        with _buckets_lock:
            if _buckets is None or _buckets.url != url:
                _buckets = Buckets(url)
    return _buckets
