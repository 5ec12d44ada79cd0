"""Circuit breakers per tenant tool and per tenant model endpoint, shared by all
workers in PostgreSQL (`store`), with the admins' thresholds and per-tool retry
delays (`policy`) and the reads the API and console show (`selectors`).

A caller's part is two calls around each call to a downstream: `admit` (call
now, or come back at `until`) and `record` (what came of it). Who waits, and
how a waiting task is woken, is the runner's (`tasks_app.runner.breaker_waits`),
told of every change through `on_change`.
"""
from .policy import (
    BreakerPolicy,
    breaker_errors,
    breaker_policy,
    outcome_signal,
    retry_delay_s,
    retry_delays_errors,
)
from .store import (
    Admission,
    Target,
    admit,
    forget_healthy,
    on_change,
    record,
    record_needed,
    wait_register,
    waiters_take,
)

__all__ = [
    "Admission",
    "BreakerPolicy",
    "Target",
    "admit",
    "breaker_errors",
    "breaker_policy",
    "forget_healthy",
    "on_change",
    "outcome_signal",
    "record",
    "record_needed",
    "retry_delay_s",
    "retry_delays_errors",
    "wait_register",
    "waiters_take",
]
