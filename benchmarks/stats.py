"""Percentiles, and per-step intervals read back from the event log.

A step's interval is the time from the commit of the task's previous step (or
its start) to the commit of this step, both taken from the events' created_at
(stamped in the step's transaction, just before its commit). Waiting between
slices is included (it is latency a task really sees), and told apart: a
step that began a new slice (another lease owner) waited in the queue.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from tasks_app.models import Event

STEP_EVENTS = ("task_started", "step_succeeded", "final_accepted")


def percentile(values: Sequence[float], p: float) -> float | None:
    """Linear interpolation between closest ranks; None for no data."""
    if not values:
        return None
    data = sorted(values)
    k = (len(data) - 1) * p / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    if lo == hi:
        return data[int(k)]
    return data[lo] + (data[hi] - data[lo]) * (k - lo)


def summary_ms(values_s: Sequence[float]) -> dict[str, float | int | None]:
    """p50/p99/mean/max in milliseconds of durations given in seconds."""
    ms = [v * 1000.0 for v in values_s]
    return {
        "n": len(ms),
        "p50_ms": _r(percentile(ms, 50)),
        "p99_ms": _r(percentile(ms, 99)),
        "mean_ms": _r(sum(ms) / len(ms)) if ms else None,
        "max_ms": _r(max(ms)) if ms else None,
    }


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


def step_commit_times(task_ids: Iterable[int]) -> dict[int, list[tuple[datetime, str]]]:
    """Per task: the start and each step's commit, in order, as (time, actor). The
    actor of a runner event names the slice (a new lease owner per slice)."""
    out: dict[int, list[tuple[datetime, str]]] = defaultdict(list)
    rows = (
        Event.objects.filter(task_id__in=list(task_ids), type__in=STEP_EVENTS)
        .order_by("task_id", "id")
        .values_list("task_id", "created_at", "actor")
    )
    for task_id, created_at, actor in rows.iterator(chunk_size=5000):
        out[task_id].append((created_at, actor))
    return out


@dataclass(frozen=True)
class Interval:
    seconds: float
    same_slice: bool  # False: the step began a slice (queue wait and lease take included)


def step_intervals(task_ids: Iterable[int]) -> dict[int, list[Interval]]:
    """Per task: how long each step took, step 1 first."""
    return {
        task_id: [
            Interval((b[0] - a[0]).total_seconds(), a[1] == b[1])
            for a, b in zip(times, times[1:], strict=False)
        ]
        for task_id, times in step_commit_times(task_ids).items()
    }


def slices_of(task_ids: Iterable[int]) -> dict[int, int]:
    """Per task: how many slices (Celery deliveries that took the lease) advanced it."""
    return {
        task_id: len({actor for _, actor in times[1:]})
        for task_id, times in step_commit_times(task_ids).items()
    }
