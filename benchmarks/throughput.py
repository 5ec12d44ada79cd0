"""Runner throughput: N tasks of M steps through real Celery workers, and what
a task waiting for a human costs (workers busy, database connections).

Figures come from the database: the window runs from the first task's start
(admission) to the last task's finish; per-step latency is the interval
between a task's consecutive step commits (see `stats`).
"""

from __future__ import annotations

import time
from typing import Any

from django.db import connection, transaction
from django.db.models import Max, Min, Sum

from tasks_app.machine import NON_TERMINAL, TaskStatus
from tasks_app.models import Task

from .config import BenchConfig
from .procs import Workers, busy_pct, machine_cpu_ticks, server_cpu_s, steal_pct
from .stats import slices_of, step_intervals, summary_ms
from .vacuum import vacuum
from .world import World, cancel_open, step_script, submit

POLL_S = 0.25


def wait_terminal(task_ids: list[int], *, timeout: float, statuses=NON_TERMINAL) -> bool:  # type: ignore[no-untyped-def]
    """Poll (with a deadline) until none of the tasks is in `statuses`."""
    deadline = time.monotonic() + timeout
    while Task.objects.filter(pk__in=task_ids, status__in=statuses).exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_S)
    return True


def warm_up(world: World, cfg: BenchConfig) -> None:
    """Every worker process imports, connects and runs a step before the clock starts."""
    ids = [
        submit(world, step_script(3, salt=f"warm{i}-"), goal="bench warm-up")
        for i in range(cfg.workers * 2)
    ]
    wait_terminal(ids, timeout=60)
    cancel_open(world, ids)


def run_throughput(world: World, cfg: BenchConfig, *, workers: Workers) -> dict[str, Any]:
    timeout = max(300.0, cfg.tasks * cfg.steps / 2.0)
    vacuum()
    cpu0, machine0 = workers.cpu_s(), machine_cpu_ticks()
    consumer0, pg0, redis0 = workers.consumer_cpu_s(), server_cpu_s("postgres"), server_cpu_s(
        "redis-server")
    t0 = time.time()
    # All submitted in one transaction: the runner's window (from the first
    # task's start) does not share the machine with the submissions.
    with transaction.atomic():
        ids = [
            submit(world, step_script(cfg.steps, salt=f"{i}-"), goal=f"bench throughput {i}")
            for i in range(cfg.tasks)
        ]
    submit_s = time.time() - t0
    complete = wait_terminal(ids, timeout=timeout)
    machine1 = machine_cpu_ticks()
    worker_cpu_s, machine_busy = workers.cpu_s() - cpu0, busy_pct(machine0, machine1)
    # Where the machine's CPU went, per step: the Celery node's consumer process
    # (its share of worker_cpu), PostgreSQL's processes, Redis (broker and layer).
    cpu_split = {
        "celery_consumer": workers.consumer_cpu_s() - consumer0,
        "postgres": server_cpu_s("postgres") - pg0,
        "redis": server_cpu_s("redis-server") - redis0,
    }
    if not complete:
        cancel_open(world, ids)
    agg = Task.objects.filter(pk__in=ids).aggregate(
        first=Min("started_at"), last=Max("finished_at"), steps=Sum("steps_count")
    )
    succeeded = Task.objects.filter(pk__in=ids, status=TaskStatus.SUCCEEDED).count()
    window = (agg["last"] - agg["first"]).total_seconds() if agg["first"] and agg["last"] else None
    steps = int(agg["steps"] or 0)
    intervals = [s for per_task in step_intervals(ids).values() for s in per_task]
    slices = list(slices_of(ids).values())
    return {
        "tasks": cfg.tasks,
        "steps_per_task": cfg.steps,
        "workers": cfg.workers,
        "complete": complete,
        "succeeded": succeeded,
        "steps": steps,
        "window_s": round(window, 3) if window else None,
        "submit_s": round(submit_s, 3),
        "steps_per_s": round(steps / window, 1) if window else None,
        "tasks_per_s": round(succeeded / window, 2) if window else None,
        # CPU the worker processes spent per step (the runner's own cost, whatever the load)
        "worker_cpu_ms_per_step": round(worker_cpu_s / steps * 1000, 2) if steps else None,
        "worker_cpu_s": round(worker_cpu_s, 2),
        "cpu_ms_per_step": {
            name: round(cpu_s / steps * 1000, 2) if steps else None
            for name, cpu_s in {"workers": worker_cpu_s, **cpu_split}.items()
        },
        # all CPUs of the machine, busy (any process) while the tasks ran
        "machine_cpu_busy_pct": machine_busy,
        # a shared VM: the share of the window its CPUs were given to other guests
        "machine_cpu_steal_pct": steal_pct(machine0, machine1),
        "step_latency": summary_ms([i.seconds for i in intervals]),
        # Steps that followed another step in the same slice: the runner's own pace.
        "step_latency_in_slice": summary_ms([i.seconds for i in intervals if i.same_slice]),
        "slices_per_task": {
            "mean": round(sum(slices) / len(slices), 2) if slices else None,
            "max": max(slices) if slices else None,
        },
        "first_task_id": min(ids),
        "last_task_id": max(ids),
    }


def _db_connections() -> int:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND backend_type = 'client backend'"
        )
        return int(cur.fetchone()[0])


def _busy_workers(node: str) -> int | None:
    from config.celery import app

    active = app.control.inspect(destination=[node], timeout=1.0).active()
    if active is None:
        return None
    return sum(len(v) for v in active.values())


def run_waiting(world: World, cfg: BenchConfig, *, workers: Workers) -> dict[str, Any]:
    """Tasks parked on a question hold no worker and no database connection."""
    before = _db_connections()
    ids = [
        submit(world, [{"ask": f"bench question {i}"}, {"final": {}}], goal="bench waiting")
        for i in range(cfg.waiting_tasks)
    ]
    parked = wait_terminal(ids, timeout=60, statuses=(TaskStatus.CREATED, TaskStatus.RUNNING))
    waiting = Task.objects.filter(pk__in=ids, status=TaskStatus.WAITING_FOR_INPUT).count()
    deadline = time.monotonic() + 10
    busy = _busy_workers(workers.node)
    while busy and time.monotonic() < deadline:
        time.sleep(POLL_S)
        busy = _busy_workers(workers.node)
    after = _db_connections()
    cancel_open(world, ids)
    return {
        "tasks": cfg.waiting_tasks,
        "waiting_for_input": waiting,
        "all_parked": parked,
        "busy_worker_processes": busy,
        "db_connections_before": before,
        "db_connections_while_waiting": after,
    }
