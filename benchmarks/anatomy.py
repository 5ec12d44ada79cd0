"""The anatomy of a runner step: what one tool step costs in round trips.

Runs a short task in this process as one slice would (the bench holds its
lease, so no worker touches it, and carries the slice's memo from step to
step) and, for each tool step, counts the database phases the step hands to
its hop (each a turn of a database thread in a worker), the statements sent
on the runner's own database connection (by verb: SELECT, INSERT, UPDATE,
BEGIN, COMMIT, SAVEPOINT, ...) and the database connections opened meanwhile
(a python tool runs in its own thread, with its own connection; with the pool,
a connection borrowed from it). Deterministic figures that do not depend on
the machine's load: they say where the time of a step goes, and show each
optimisation of the runner. `run_anatomy` takes the scripted model and
instant python tools; the I/O workload (`io_load`) runs it on its own agent
too, whose steps ask the model over HTTP and call an HTTP tool.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from django.db import connection
from django.db.backends.signals import connection_created
from django.test.utils import CaptureQueriesContext

from tasks_app.models import Task
from tasks_app.runner.hops import CallerHop
from tasks_app.runner.memo import SliceMemo
from tasks_app.runner.step import Next, step
from tasks_app.store.leases import lease_release, lease_take

from .world import World, cancel_open, step_script, submit_running

OWNER = "bench-anatomy"


class _CountedHop(CallerHop):
    """The synchronous caller's hop, counting the database phases it runs."""

    def __init__(self) -> None:
        super().__init__()
        self.phases = 0

    async def __call__(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        self.phases += 1
        return await super().__call__(fn, *args, **kwargs)


def run_anatomy(world: World, *, steps: int = 21, task_id: int | None = None) -> dict[str, Any]:
    """The anatomy of the steps of a scripted task (`steps` tool steps), or of
    the RUNNING task `task_id`, up to `steps` of them."""
    if task_id is None:
        task_id = submit_running(world, step_script(steps + 1, salt="anatomy-"),
                         goal="bench step anatomy")
    leased = lease_take(task_id=task_id, owner=OWNER)
    if leased is None:
        cancel_open(world, [task_id])
        return {"error": f"task {task_id} was not RUNNING or its lease was taken"}
    opened: list[int] = []

    def count_connection(**kwargs: Any) -> None:
        opened.append(1)

    connection_created.connect(count_connection, weak=False)
    per_step: list[Counter[str]] = []
    conns: list[int] = []
    phases: list[int] = []
    wall: list[float] = []
    # Steps each pass of the runner took: 1, or a wave's calls (a workflow run's
    # ready nodes, `runner.waves`); read outside the counted queries.
    advanced: list[int] = []
    counted = _steps_count(task_id)
    memo = SliceMemo(leased=leased)  # as the runner's slice starts
    try:
        while sum(advanced) < steps:
            opened.clear()
            started = time.perf_counter()
            hop = _CountedHop()
            with CaptureQueriesContext(connection) as ctx:
                result = hop.drive(step(task_id=task_id, owner=OWNER, memo=memo, hop=hop))
            wall.append(time.perf_counter() - started)
            phases.append(hop.phases)
            per_step.append(
                Counter(q["sql"].split(None, 1)[0].upper() for q in ctx.captured_queries)
            )
            conns.append(len(opened))
            now = _steps_count(task_id)
            advanced.append(max(1, now - counted))
            counted = now
            if result.next is not Next.CONTINUE:
                break
    finally:
        connection_created.disconnect(count_connection)
        lease_release(task_id=task_id, owner=OWNER)
        cancel_open(world, [task_id])
    # The first pass pays one-off costs (imports, caches): left out. Every
    # figure is per step, a wave's shared among its calls.
    n = sum(advanced[1:])
    later = per_step[1:]
    verbs = sorted({v for c in later for v in c})

    def per(total: float) -> float | None:
        return round(total / n, 2) if n else None

    return {
        "task_id": task_id,
        "tool_steps": n,
        "statements_per_step": per(sum(sum(c.values()) for c in later)),
        "by_verb": {v: per(sum(c[v] for c in later)) for v in verbs},
        # A `WITH ...` statement is one of the runner's one-statement commits
        # (`store.commits`): outside a transaction, it commits on its own.
        "commits_per_step": per(sum(c["COMMIT"] + c["WITH"] for c in later)),
        "connections_opened_per_step": per(sum(conns[1:])),
        "phases_per_step": per(sum(phases[1:])),
        "in_process_step_ms": round(sum(wall[1:]) / n * 1000, 2) if n else None,
    }


def _steps_count(task_id: int) -> int:
    return int(Task.objects.filter(pk=task_id).values_list("steps_count", flat=True).get())
