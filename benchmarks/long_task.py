"""Long tasks: does a step cost more when the task's history is long?

Compares the median step interval over steps 2..20 with the one over the
last nineteen tool steps (the first step, which reads the task's setup, and
the final answer, a different kind of step, are left out). Medians, so the
one slower step at each slice boundary (a Celery round trip every
SLICE_MAX_STEPS steps) does not decide the figure; the means are reported
too, and a curve of medians per bucket of steps. Those steps are a few
milliseconds each, so the task runs `rounds` times, one after the other,
and the windows of all rounds are pooled (each round's ratio is reported
too).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from tasks_app.machine import TaskStatus
from tasks_app.models import Task

from .config import BenchConfig
from .stats import step_intervals
from .throughput import wait_terminal
from .vacuum import vacuum
from .world import World, cancel_open, step_script, submit

WINDOW = 19  # steps in each window: 2..20, and the last nineteen tool steps


def run_long_tasks(world: World, cfg: BenchConfig) -> dict[str, Any]:
    rounds = []
    for _ in range(max(1, cfg.rounds)):
        vacuum()
        rounds.append(run_long_task(world, cfg))
    early = [s for r in rounds for s in r.pop("_early")]
    late = [s for r in rounds for s in r.pop("_late")]
    doc = dict(rounds[-1])  # the last round's task, status and curve
    doc.update(
        rounds=len(rounds),
        succeeded=all(r["succeeded"] for r in rounds),
        rounds_ratio=[r["ratio_last_to_10"] for r in rounds],
        step_10_ms=_ms(statistics.median(early)) if early else None,
        step_last_ms=_ms(statistics.median(late)) if late else None,
        step_10_mean_ms=_ms(statistics.fmean(early)) if early else None,
        step_last_mean_ms=_ms(statistics.fmean(late)) if late else None,
    )
    doc["ratio_last_to_10"] = (
        round(doc["step_last_ms"] / doc["step_10_ms"], 3)
        if doc["step_10_ms"] and doc["step_last_ms"]
        else None
    )
    return doc


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def run_long_task(world: World, cfg: BenchConfig) -> dict[str, Any]:
    steps = cfg.long_steps
    task_id = submit(
        world, step_script(steps, salt="long-"), goal=f"bench long task ({steps} steps)"
    )
    started = time.monotonic()
    complete = wait_terminal([task_id], timeout=max(120.0, steps / 2.0))
    elapsed = time.monotonic() - started
    if not complete:
        cancel_open(world, [task_id])
    task = Task.objects.only("status", "steps_count").get(pk=task_id)
    intervals = [i.seconds for i in step_intervals([task_id]).get(task_id, [])]
    tool_steps = intervals[: steps - 1]  # step k took intervals[k - 1]; the last one is the final
    early = tool_steps[1 : 1 + WINDOW]
    late = tool_steps[-WINDOW:]
    early_med = statistics.median(early) * 1000 if early else None
    late_med = statistics.median(late) * 1000 if late else None
    bucket = max(1, steps // 10)
    curve = [
        {
            "steps": f"{i + 1}-{min(i + bucket, len(tool_steps))}",
            "median_ms": round(statistics.median(tool_steps[i : i + bucket]) * 1000, 2),
        }
        for i in range(0, len(tool_steps), bucket)
    ]
    return {
        "task_id": task_id,
        "steps": steps,
        "status": task.status,
        "succeeded": task.status == TaskStatus.SUCCEEDED,
        "elapsed_s": round(elapsed, 2),
        "step_10_ms": round(early_med, 2) if early_med is not None else None,
        "step_last_ms": round(late_med, 2) if late_med is not None else None,
        "step_10_mean_ms": round(statistics.fmean(early) * 1000, 2) if early else None,
        "step_last_mean_ms": round(statistics.fmean(late) * 1000, 2) if late else None,
        "ratio_last_to_10": round(late_med / early_med, 3) if early_med and late_med else None,
        "curve": curve,
        "_early": early,
        "_late": late,
    }
