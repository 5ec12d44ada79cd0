"""How long a task waits before trying again: exponential backoff with jitter,
capped (`TETHER_BACKOFF_BASE_S`, `TETHER_BACKOFF_MAX_S`), and the count of a
model's failures in a row that makes it grow across slices.

A model that keeps failing hands the task back after each step (the gateway's
own retries within a step are short); the attempt number that sets the next
delay is counted on the task's row (`Task.model_failures`, while the task
stands still: same version and step count, `Task.model_failure_at`), so the
delay grows across slices, workers and restarts, and starts again once a
decision commits. Each failed request also counts against the model-call
budget, which bounds the whole.
"""
from __future__ import annotations

import random

from django.conf import settings

from ..snapshot import TaskSnapshot
from ..store.counters import task_model_failure_count


def backoff_s(attempt: int, retry_after: float | None = None, *,
              full_jitter: bool = False) -> float:
    """Exponential backoff with jitter (the upper half of the ceiling, or all of it
    with `full_jitter`), bounded; `Retry-After` wins when larger."""
    cfg = settings.TETHER
    ceiling = min(cfg["BACKOFF_MAX_S"], cfg["BACKOFF_BASE_S"] * (2 ** max(0, attempt - 1)))
    delay = random.uniform(0.0 if full_jitter else ceiling / 2, ceiling)
    return max(delay, retry_after or 0.0)


def model_failure_count(snap: TaskSnapshot) -> int:
    """Count one more failure of the task's model where it stands; the count,
    this failure included."""
    at = f"{snap.version}/{snap.steps_count}"
    return task_model_failure_count(snap.id, at=at)
