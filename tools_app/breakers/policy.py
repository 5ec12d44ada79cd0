"""What an admin may set: a breaker's thresholds and a tool's retry delays,
checked (field errors, never a 500) and filled in with the defaults.

- `breaker` (on a tool, or in an agent's `model`): ``{"failures": 5,
  "cooldown_s": 10, "max_cooldown_s": 300, "enabled": true}``, every key
  optional; a missing one takes `TETHER_BREAKER_FAILURES`,
  `TETHER_BREAKER_COOLDOWN_S`, `TETHER_BREAKER_MAX_COOLDOWN_S`.
- `retry_delays_s` (on a tool): the seconds to wait before each retry of a
  transient error, in turn, the last one repeated up to `max_retries`: with
  ``max_retries: 3`` and ``[0, 30]`` a failed call is retried at once, then
  after 30 s, then after 30 s more ("fast fail, then cool down"). Empty:
  exponential backoff with jitter. A waiting delay gets up to 10% of jitter,
  so tasks that failed together do not come back together; a `Retry-After`
  from the downstream wins when longer.

Which outcomes count against a breaker is `outcome_signal`: what shows the
downstream is not answering (a timeout, a refused or reset connection, 408,
429, 5xx) is a failure; any answer (a result, a business or permission error)
is a success; what never reached it (the ledger's stored answer, an address
the outbound policy refused, a secret that could not be resolved) is neither.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from ..executor.types import OutcomeKind, ToolOutcome

MAX_FAILURES = 1000
MAX_COOLDOWN_S = 86400.0
MAX_DELAYS = 20
MAX_DELAY_S = 3600.0
FIELDS = ("failures", "cooldown_s", "max_cooldown_s", "enabled")
# The tool's outcome never reached the downstream: it says nothing of its health.
NOT_SENT = frozenset({"egress_refused", "secret_unavailable", "tool_unavailable"})
OUTAGE_ERRORS = frozenset({"connect_error", "timeout", "transport_error"})


@dataclass(frozen=True)
class BreakerPolicy:
    failures: int
    cooldown_s: float
    max_cooldown_s: float
    enabled: bool = True


def breaker_policy(value: dict[str, Any] | None) -> BreakerPolicy:
    """The thresholds of a (checked) `breaker` setting, defaults filled in."""
    value = value or {}
    cfg = settings.TETHER
    cooldown = float(value.get("cooldown_s", cfg["BREAKER_COOLDOWN_S"]))
    return BreakerPolicy(
        failures=int(value.get("failures", cfg["BREAKER_FAILURES"])),
        cooldown_s=cooldown,
        max_cooldown_s=max(cooldown, float(value.get("max_cooldown_s",
                                                     cfg["BREAKER_MAX_COOLDOWN_S"]))),
        enabled=bool(value.get("enabled", True)),
    )


def breaker_errors(value: Any) -> list[str]:
    """Problems of a `breaker` setting (empty: valid)."""
    if value is None:
        return []
    if not isinstance(value, dict):
        return ['an object such as {"failures": 5, "cooldown_s": 10, "max_cooldown_s": 300}']
    problems = [f"unknown key {key!r}: one of {', '.join(FIELDS)}" for key in value
                if key not in FIELDS]
    failures = value.get("failures")
    if failures is not None and not (_is_int(failures) and 1 <= failures <= MAX_FAILURES):
        problems.append(f"failures: an integer from 1 to {MAX_FAILURES}")
    for name in ("cooldown_s", "max_cooldown_s"):
        seconds = value.get(name)
        if seconds is not None and not (_is_number(seconds) and 0.1 <= seconds <= MAX_COOLDOWN_S):
            problems.append(f"{name}: seconds from 0.1 to {MAX_COOLDOWN_S:g}")
    cooldown, longest = value.get("cooldown_s", 0), value.get("max_cooldown_s", 0)
    if _is_number(cooldown) and _is_number(longest) and 0 < longest < cooldown:
        problems.append("max_cooldown_s: at least cooldown_s")
    if "enabled" in value and not isinstance(value["enabled"], bool):
        problems.append("enabled: true or false")
    return problems


def retry_delays_errors(value: Any) -> list[str]:
    """Problems of a tool's `retry_delays_s` (empty: valid)."""
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > MAX_DELAYS or not all(
            _is_number(d) and 0 <= d <= MAX_DELAY_S for d in value):
        return [f"a list of at most {MAX_DELAYS} delays in seconds, each from 0 to "
                f"{MAX_DELAY_S:g}, e.g. [0, 30]"]
    return []


def retry_delay_s(delays: tuple[float, ...], attempt: int,
                  retry_after: float | None = None) -> float:
    """The wait before retry number `attempt` (1-based) under a tool's delays."""
    base = float(delays[min(attempt, len(delays)) - 1])
    delay = random.uniform(base, base * 1.1) if base else 0.0
    return max(delay, retry_after or 0.0)


def outcome_signal(outcome: ToolOutcome) -> bool | None:
    """True: the call failed as an outage does; False: the downstream answered;
    None: the call did not reach it."""
    if outcome.from_ledger or outcome.kind is OutcomeKind.PROCESSING:
        return None
    error = outcome.error or {}
    if error.get("type") in NOT_SENT:
        return None
    if outcome.kind is OutcomeKind.UNCERTAIN:
        return True
    if outcome.kind is OutcomeKind.TRANSIENT:
        status = error.get("status")
        return error.get("type") in OUTAGE_ERRORS or (
            isinstance(status, int) and (status in (408, 429) or status >= 500))
    return False


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value
