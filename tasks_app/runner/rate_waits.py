"""The runner's side of the rate limits (`tools_app.ratelimits`): calls that
reserve before they are sent, and tasks that wait for their slot.

- A model call (`ModelLimits`, the gateway's `CallLimiter`) reserves its
  estimated tokens and one request from its target's limit, on the I/O loop;
  after the reply the reservation is settled with the reply's usage. A 429
  holds the limit for its `Retry-After` (every task calling that endpoint
  waits, not only the one that was told).
- When the slot is ahead, the call is not made: the step ends, the task notes
  `rate_limit_waiting` with the expected wait (`model_wait`) and is handed back
  until its slot, holding no worker, no thread and no lease meanwhile. Its
  reservation stays (a ticket per task and bucket), so when it comes back it
  goes at once: tasks are served in the order they arrived.
- A tool call of an http or mcp tool with a `rate_limit` reserves one request
  when it is admitted (`tool_admit`), in the same way.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.utils import timezone

from foundations.actors import Actor
from foundations.metrics import count_rate_limit_tokens, observe_rate_limit_wait
from tools_app.executor import ledger
from tools_app.executor.types import ToolSpec
from tools_app.ratelimits import (
    EARLY_WAKE_S,
    INLINE_WAIT_S,
    RateLimit,
    backlog_s,
    bucket_key,
    buckets,
    model_bucket_key,
    parse_rate_limit,
)

from ..gateway.model_settings import ModelTarget, parse_model_settings
from ..snapshot import TaskSnapshot
from .breaker_waits import info_event

RATE_LIMIT_ACTOR = Actor.worker("rate_limit")
# How long a limit is held after a 429 that names no Retry-After.
THROTTLED_HOLD_S = 1.0
# A tool's admission runs in a database phase: it never sleeps there, and a
# call this close to its slot goes at once.
TOOL_INLINE_S = 0.05


@dataclass
class ModelLimits:
    """The rate limits of a task's model endpoints, for the gateway (`CallLimiter`)."""

    snap: TaskSnapshot
    reserved: dict[str, int] = field(default_factory=dict)  # bucket -> the call's tokens
    # (target, wait, tokens, the slot on this process's monotonic clock)
    waits: list[tuple[ModelTarget, float, int, float]] = field(default_factory=list)

    def _bucket(self, target: ModelTarget) -> str:
        return model_bucket_key(tenant_id=self.snap.tenant_id, base_url=target.base_url,
                                model=target.name, key_ref=target.key_ref)

    async def reserve(self, target: ModelTarget, tokens: int) -> float | None:
        bucket = self._bucket(target)
        got = await buckets().reserve(bucket, target.rate_limit, tokens=tokens,
                                      ticket=str(self.snap.id))
        if got.fresh:
            observe_rate_limit_wait(kind="model", name=target.name, seconds=got.wait_s)
            count_rate_limit_tokens(model=target.name, reserved=got.tokens)
        if got.wait_s > INLINE_WAIT_S:
            self.waits.append((target, got.wait_s, got.tokens, time.monotonic() + got.wait_s))
            return got.wait_s
        if got.wait_s > 0:
            await asyncio.sleep(got.wait_s)  # shorter than a hand-back; holds no thread
        self.reserved[bucket] = got.tokens
        return None


    async def settle(self, target: ModelTarget, *, used: int | None, sent: bool,
                     throttled: bool = False, retry_after_s: float | None = None) -> None:
        bucket = self._bucket(target)
        reserved = self.reserved.pop(bucket, 0)
        delta = 0
        if used is not None:
            delta = used - reserved
            count_rate_limit_tokens(model=target.name, used=used)
        elif not sent:
            delta = -reserved  # it never reached the endpoint: all of it back
        hold = (retry_after_s or THROTTLED_HOLD_S) if throttled else 0.0
        if delta or hold:
            await buckets().adjust(bucket, target.rate_limit, tokens=delta, hold_s=hold)


def model_wait(snap: TaskSnapshot, limits: ModelLimits) -> float:
    """The model's rate limit made the call wait (a database phase): note it on
    the task; the delay before the task comes back (`EARLY_WAKE_S` before its
    slot: it waits the rest in its next slice)."""
    for target, wait_s, tokens, _ in limits.waits:
        note_wait(snap.id, kind="model", name=target.name, limit=target.rate_limit,
                  wait_s=wait_s, tokens=tokens)
    slot = min(at for *_, at in limits.waits)
    return max(0.0, slot - time.monotonic() - EARLY_WAKE_S)


def note_wait(task_id: int, *, kind: str, name: str, limit: RateLimit, wait_s: float,
              tokens: int = 0) -> None:
    until = timezone.now() + timedelta(seconds=wait_s)
    payload: dict[str, Any] = {"kind": kind, "name": name, "wait_s": round(wait_s, 3),
                               "until": until.isoformat(), "limit": limit.as_dict()}
    if tokens:
        payload["tokens"] = tokens
    info_event(task_id, "rate_limit_waiting", payload, actor=RATE_LIMIT_ACTOR)


def model_limits_view(tenant_id: int, model: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The rate limits of an agent's model endpoints as its page shows them:
    {"primary"|"fallback": {limit, backlog_s}} (only those with a limit)."""
    try:
        settings = parse_model_settings(model)
    except (TypeError, ValueError):
        return {}
    targets = {"primary": settings.primary, "fallback": settings.fallback}
    out = {}
    for role, target in targets.items():
        if target is None or not target.rate_limit.enabled:
            continue
        bucket = model_bucket_key(tenant_id=tenant_id, base_url=target.base_url,
                                  model=target.name, key_ref=target.key_ref)
        out[role] = {"limit": target.rate_limit.as_dict(), "backlog_s": backlog_s(bucket)}
    return out


# --- tools ---------------------------------------------------------------------------


def tool_bucket(snap: TaskSnapshot, spec: ToolSpec) -> str:
    """A tool's bucket: its tenant, downstream (URL, or MCP server) and the
    secrets its calls carry (by reference): tools of the tenant calling the
    same downstream with the same credentials share it."""
    secrets = sorted((spec.secret_headers or {}).items())
    return bucket_key("tool", snap.tenant_id, spec.mcp_server or spec.url or spec.name, secrets)


def tool_admit(snap: TaskSnapshot, spec: ToolSpec, claim: ledger.Claim | None, *,
               step_no: int) -> float | None:
    """Before a tool call (a database phase): None to call now; else its claim
    is given back (no attempt spent), the wait is noted on the task and its
    delay returned. The slot is the step's (calls of one reply may run at once)."""
    limit = parse_rate_limit(spec.rate_limit)
    if spec.kind not in ("http", "mcp") or not limit.enabled:
        return None
    got = buckets().reserve_now(tool_bucket(snap, spec), limit, tokens=0,
                                ticket=f"{snap.id}/{step_no}", inline_s=TOOL_INLINE_S)
    if got.fresh:
        observe_rate_limit_wait(kind="tool", name=spec.name, seconds=got.wait_s)
    if got.wait_s <= TOOL_INLINE_S:
        return None
    if claim is not None:
        ledger.release(claim, error={"type": "rate_limited",
                                     "message": f"waiting for the rate limit of {spec.name}"})
    if got.fresh:
        note_wait(snap.id, kind="tool", name=spec.name, limit=limit, wait_s=got.wait_s)
    return got.wait_s
